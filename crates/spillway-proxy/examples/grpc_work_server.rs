//! A plain gRPC service (tonic, no Spillway layer) for the HTTP/2 benchmarks: the service a
//! proxy stands in front of, as `spillway backend` is for HTTP/1.1.
//!
//! ```text
//! cargo run --release -p spillway-proxy --example grpc_work_server -- 127.0.0.1:21581 60
//! ```
//!
//! Serves `spillway.example.Work/Do` (the proto of `spillway-tower`'s examples) on the given
//! loopback address for the given number of seconds, then exits: each call's reply echoes its
//! payload, after `SLEEP_MS` (default 1) of sleep, so that like `spillway backend`'s 1 ms it
//! costs the machine little CPU and the fronts' cost is what differs between runs
//! (bench/overhead/h2.sh).

use std::net::SocketAddr;
use std::time::Duration;

use tonic::{Request, Response, Status};

#[path = "../../spillway-tower/examples/proto/spillway.example.rs"]
#[allow(clippy::all, missing_docs)]
mod proto;

use proto::work_server::{Work, WorkServer};
use proto::{WorkReply, WorkRequest};

struct Echo {
    sleep: Duration,
}

#[tonic::async_trait]
impl Work for Echo {
    async fn r#do(&self, req: Request<WorkRequest>) -> Result<Response<WorkReply>, Status> {
        if !self.sleep.is_zero() {
            tokio::time::sleep(self.sleep).await;
        }
        Ok(Response::new(WorkReply {
            payload: req.into_inner().payload,
            served_by: "grpc_work_server".into(),
            ..Default::default()
        }))
    }
}

fn usage(why: &str) -> ! {
    eprintln!("grpc_work_server: {why}\nusage: grpc_work_server LOOPBACK_ADDR SECONDS (e.g. 127.0.0.1:21581 60; env SLEEP_MS, default 1)");
    std::process::exit(2);
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = match args.next().map(|a| a.parse()) {
        Some(Ok(a)) => a,
        Some(Err(_)) => usage("the address must be ip:port"),
        None => usage("missing the address"),
    };
    if !addr.ip().is_loopback() {
        usage("the address must be on loopback (127.0.0.0/8 or [::1])");
    }
    let secs: u64 = match args.next().map(|s| s.parse()) {
        Some(Ok(s)) if s > 0 => s,
        _ => usage("SECONDS must be a whole number above 0"),
    };
    let sleep_ms: u64 = match std::env::var("SLEEP_MS") {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| usage("SLEEP_MS must be a whole number of milliseconds")),
        Err(_) => 1,
    };
    let svc = WorkServer::new(Echo {
        sleep: Duration::from_millis(sleep_ms),
    });
    let served = tonic::transport::Server::builder()
        .add_service(svc)
        .serve_with_shutdown(addr, tokio::time::sleep(Duration::from_secs(secs)));
    if let Err(e) = served.await {
        eprintln!("grpc_work_server: cannot serve on {addr}: {e}");
        std::process::exit(1);
    }
}
