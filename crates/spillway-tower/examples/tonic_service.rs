//! A tonic (gRPC) service protected by Spillway, calling a downstream through the client layers.
//!
//! ```text
//! self-test client ──► front (SpillwayLayer) ──► client layers ──► leaf (SpillwayLayer, limit 2)
//!                                                propagate → retry → throttle → tonic Channel
//! ```
//!
//! Run with `cargo run -p spillway-tower --example tonic_service`: it starts both services on
//! loopback, runs a bounded self-test, prints what it saw and exits. No `protoc` is needed: the
//! generated code is checked in under `examples/proto/`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use spillway_core::clock::SystemClock;
use spillway_core::controller::{AdmissionConfig, AdmissionController};
use spillway_core::limit::{FixedConfig, LimitConfig};
use spillway_core::retry::RetryConfig;
use spillway_core::throttle::ThrottleConfig;
use spillway_core::{Criticality, PerCriticality};
use spillway_tower::client::retry::RetryBody;
use spillway_tower::client::{
    find_cause, BoxError, PropagateLayer, RetryLayer, ThrottleKeying, ThrottleLayer,
};
use spillway_tower::context;
use spillway_tower::server::SpillwayLayer;
use spillway_tower::wire::{self, OverloadGiveUp};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Request, Response, Status};
use tower::util::BoxCloneSyncService;
use tower::{ServiceBuilder, ServiceExt};

#[path = "proto/spillway.example.rs"]
#[allow(clippy::all)]
mod proto;

use proto::work_client::WorkClient;
use proto::work_server::{Work, WorkServer};
use proto::{WorkReply, WorkRequest};

type Downstream = BoxCloneSyncService<
    http::Request<tonic::body::Body>,
    http::Response<tonic::body::Body>,
    ClientError,
>;

/// The client stack's error under a concrete name: tonic's generated futures must be `Send`,
/// and rustc cannot prove that through a bare `Box<dyn Error>` service error inside
/// `async_trait` (a higher-ranked lifetime limitation). The cause stays reachable by `source()`.
#[derive(Debug)]
struct ClientError(BoxError);

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.0.as_ref())
    }
}

/// The leaf: does 50 ms of "work" and echoes the context it was given.
struct Leaf {
    served: Arc<AtomicU64>,
}

#[tonic::async_trait]
impl Work for Leaf {
    async fn r#do(&self, req: Request<WorkRequest>) -> Result<Response<WorkReply>, Status> {
        self.served.fetch_add(1, Ordering::Relaxed);
        let ctx = context::current().unwrap_or_default();
        let deadline_ms = ctx
            .remaining(std::time::Instant::now())
            .map_or(0, |d| d.as_millis() as i64);
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok(Response::new(WorkReply {
            payload: req.into_inner().payload,
            criticality: ctx.criticality.to_string(),
            deadline_ms,
            attempt: ctx.attempt,
            served_by: "leaf".into(),
        }))
    }
}

/// The front: forwards to the leaf through the client layers; context travels by itself.
struct Front {
    leaf: WorkClient<Downstream>,
}

#[tonic::async_trait]
impl Work for Front {
    async fn r#do(&self, req: Request<WorkRequest>) -> Result<Response<WorkReply>, Status> {
        let mut leaf = self.leaf.clone();
        // A refusal from the leaf comes back as its Status, with the don't-retry marker added
        // by the retry layer when it gave up; returning it passes the marker up.
        leaf.r#do(Request::new(req.into_inner()))
            .await
            .map_err(overload_status)
    }
}

/// A call the client layers abandoned without a gRPC answer to show for it (the local throttle
/// refused it) reaches tonic as an error, which tonic reports as `UNKNOWN`. Say what it is:
/// `UNAVAILABLE`, with the don't-retry marker, so the caller does not retry either.
fn overload_status(s: Status) -> Status {
    let give_up = std::error::Error::source(&s).and_then(find_cause::<OverloadGiveUp>);
    let Some(g) = give_up else { return s };
    let mut status = Status::unavailable(g.to_string());
    // The marker in gRPC's form (gRFC A6): wire::GRPC_RETRY_PUSHBACK_MS = -1.
    status.metadata_mut().insert(
        "grpc-retry-pushback-ms",
        tonic::metadata::MetadataValue::from_static("-1"),
    );
    status
}

fn admission(limit: usize) -> Result<AdmissionController, BoxError> {
    let mut cfg = AdmissionConfig {
        limit: LimitConfig::Fixed(FixedConfig { limit }),
        headroom: PerCriticality([1.0; 4]),
        ..AdmissionConfig::default()
    };
    cfg.queue.max_len = Some(0); // refuse at once past the limit: the demo shows refusals
    Ok(AdmissionController::new(cfg, Arc::new(SystemClock))?)
}

async fn spawn<S>(svc: WorkServer<S>, layer: SpillwayLayer) -> Result<String, BoxError>
where
    S: Work,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let served = Server::builder()
            .layer(layer)
            .add_service(svc)
            .serve_with_incoming(TcpIncoming::from(listener))
            .await;
        if let Err(e) = served {
            eprintln!("server on {addr} stopped: {e}");
        }
    });
    Ok(format!("http://{addr}"))
}

/// The client stack a service puts around its downstream channel.
fn client_stack(channel: Channel) -> Result<Downstream, BoxError> {
    let retry = RetryLayer::new(RetryConfig::default())?
        // tonic unary requests have a body of unknown length that always ends: buffer it.
        .buffer_unknown_length(true)
        .backoff(Duration::from_millis(5), Duration::from_millis(50))?;
    let throttle = ThrottleLayer::new(ThrottleConfig {
        // The core's cold-start guard: a burst of first requests still in flight would
        // otherwise read as "nothing accepted" and be throttled (P = n / (n + 1)).
        min_requests_per_sec: 0.1,
        ..ThrottleConfig::default()
    })?
    .keying(ThrottleKeying::Single)?;
    let svc = ServiceBuilder::new()
        .layer(PropagateLayer::new())
        .layer(retry)
        .layer(throttle)
        .map_request(|r: http::Request<RetryBody<tonic::body::Body>>| r.map(tonic::body::Body::new))
        .service(channel);
    Ok(BoxCloneSyncService::new(svc.map_err(ClientError)))
}

fn pushback(s: &Status) -> &str {
    s.metadata()
        .get(wire::GRPC_RETRY_PUSHBACK_MS.as_str())
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
}

#[tokio::main]
pub async fn main() -> Result<(), BoxError> {
    let leaf_served = Arc::new(AtomicU64::new(0));
    let leaf_addr = spawn(
        WorkServer::new(Leaf {
            served: leaf_served.clone(),
        }),
        // Loopback demo: every peer is trusted to set criticality.
        SpillwayLayer::new(admission(2)?).trust_all(true),
    )
    .await?;
    let channel = Channel::from_shared(leaf_addr.clone())?.connect_lazy();
    let front_addr = spawn(
        WorkServer::new(Front {
            leaf: WorkClient::new(client_stack(channel)?),
        }),
        SpillwayLayer::new(admission(64)?).trust_all(true),
    )
    .await?;
    println!("leaf on {leaf_addr}, front on {front_addr}");

    let mut client = WorkClient::new(Channel::from_shared(front_addr)?.connect().await?);

    println!("\n1. propagation: the leaf echoes what reached it two hops down");
    for c in [Criticality::Sheddable, Criticality::Critical] {
        let mut req = Request::new(WorkRequest {
            payload: format!("hello as {c}"),
        });
        req.set_timeout(Duration::from_millis(800));
        req.metadata_mut()
            .insert("x-spillway-criticality", c.as_str().parse()?); // = wire::CRITICALITY
        let reply = client.r#do(req).await?.into_inner();
        println!(
            "   sent {c:<14} with an 800 ms deadline -> leaf saw criticality {}, {} ms left, attempt {}",
            reply.criticality, reply.deadline_ms, reply.attempt
        );
        check(
            reply.criticality == c.as_str(),
            "the criticality reaches the leaf two hops down",
        )?;
        check(
            reply.deadline_ms > 0 && reply.deadline_ms <= 800,
            "the leaf sees the caller's deadline less the time spent",
        )?;
    }

    println!(
        "\n2. overload: 40 concurrent calls, the leaf serves 2 at a time and refuses the rest"
    );
    let before = leaf_served.load(Ordering::Relaxed);
    let mut calls = Vec::new();
    for i in 0..40 {
        let mut client = client.clone();
        calls.push(tokio::spawn(async move {
            client
                .r#do(Request::new(WorkRequest {
                    payload: format!("job {i}"),
                }))
                .await
        }));
    }
    let (mut ok, mut refused, mut marked) = (0, 0, 0);
    let mut example: Option<Status> = None;
    for c in calls {
        match c.await? {
            Ok(_) => ok += 1,
            Err(s)
                if matches!(
                    s.code(),
                    tonic::Code::Unavailable | tonic::Code::ResourceExhausted
                ) =>
            {
                refused += 1;
                if pushback(&s) == "-1" {
                    marked += 1;
                }
                example.get_or_insert(s);
            }
            Err(s) => return Err(format!("unexpected status: {s}").into()),
        }
    }
    let served = leaf_served.load(Ordering::Relaxed) - before;
    println!(
        "   {ok} served, {refused} refused ({marked} marked don't-retry); the leaf served {served}"
    );
    if let Some(s) = example {
        println!(
            "   a refusal as the caller sees it: code {:?}, grpc-retry-pushback-ms {}",
            s.code(),
            pushback(&s)
        );
    }
    check(ok >= 1, "some calls are served")?;
    check(
        refused >= 1,
        "a 2-slot leaf refuses some of 40 concurrent calls",
    )?;
    check(ok + refused == 40, "every call is served or refused")?;
    println!("\nself-test done");
    Ok(())
}

/// An error naming the expectation that failed (the example exits non-zero).
fn check(ok: bool, what: &str) -> Result<(), BoxError> {
    if ok {
        Ok(())
    } else {
        Err(format!("check failed: {what}").into())
    }
}
