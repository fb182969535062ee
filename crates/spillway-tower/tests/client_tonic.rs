//! A tonic client sees gRPC overload refusals with pushback, over real loopback HTTP/2: from
//! Spillway's server layer directly (UNAVAILABLE + `grpc-retry-pushback-ms`), and through the
//! client layers, which retry within the gates and then return the refusal marked don't-retry.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use spillway_core::clock::SystemClock;
use spillway_core::controller::{AdmissionConfig, AdmissionController};
use spillway_core::limit::{FixedConfig, LimitConfig};
use spillway_core::retry::RetryConfig;
use spillway_core::PerCriticality;
use spillway_tower::client::retry::RetryBody;
use spillway_tower::client::RetryLayer;
use spillway_tower::server::SpillwayLayer;
use tokio::sync::Notify;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Request, Response, Status};
use tower::ServiceBuilder;

#[path = "../examples/proto/spillway.example.rs"]
#[allow(clippy::all, dead_code)]
mod proto;

use proto::work_client::WorkClient;
use proto::work_server::{Work, WorkServer};
use proto::{WorkReply, WorkRequest};

/// Holds every call until released, so one call keeps the single permit busy.
struct Held {
    release: Arc<Notify>,
    received: Arc<AtomicU64>,
}

#[tonic::async_trait]
impl Work for Held {
    async fn r#do(&self, _: Request<WorkRequest>) -> Result<Response<WorkReply>, Status> {
        self.received.fetch_add(1, Ordering::SeqCst);
        self.release.notified().await;
        Ok(Response::new(WorkReply::default()))
    }
}

async fn leaf() -> (String, Arc<Notify>, Arc<AtomicU64>) {
    let mut cfg = AdmissionConfig {
        limit: LimitConfig::Fixed(FixedConfig { limit: 1 }),
        headroom: PerCriticality([1.0; 4]),
        ..AdmissionConfig::default()
    };
    cfg.queue.max_len = Some(0);
    let controller = AdmissionController::new(cfg, Arc::new(SystemClock)).expect("valid");
    let release = Arc::new(Notify::new());
    let received = Arc::new(AtomicU64::new(0));
    let svc = WorkServer::new(Held {
        release: release.clone(),
        received: received.clone(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(
        Server::builder()
            .layer(SpillwayLayer::new(controller))
            .add_service(svc)
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    (format!("http://{addr}"), release, received)
}

fn pushback(s: &Status) -> Option<String> {
    s.metadata()
        .get("grpc-retry-pushback-ms")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Occupies the leaf's only permit with one call; returns once the leaf has it.
async fn occupy(addr: &str, received: &AtomicU64) -> tokio::task::JoinHandle<()> {
    let channel = Channel::from_shared(addr.to_owned())
        .expect("uri")
        .connect_lazy();
    let before = received.load(Ordering::SeqCst);
    let h = tokio::spawn(async move {
        let _ = WorkClient::new(channel).r#do(WorkRequest::default()).await;
    });
    while received.load(Ordering::SeqCst) == before {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tonic_client_sees_unavailable_with_pushback_from_the_server_layer() {
    let (addr, release, received) = leaf().await;
    let busy = occupy(&addr, &received).await;
    let channel = Channel::from_shared(addr).expect("uri").connect_lazy();
    let status = WorkClient::new(channel)
        .r#do(WorkRequest::default())
        .await
        .expect_err("the only permit is taken");
    println!(
        "direct: {:?} pushback={:?}",
        status.code(),
        pushback(&status)
    );
    assert!(
        matches!(
            status.code(),
            tonic::Code::Unavailable | tonic::Code::ResourceExhausted
        ),
        "{status:?}"
    );
    assert!(
        pushback(&status).is_some(),
        "pushback metadata expected: {status:?}"
    );
    release.notify_waiters();
    let _ = busy.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_client_layers_the_refusal_comes_back_marked_dont_retry() {
    let (addr, release, received) = leaf().await;
    let busy = occupy(&addr, &received).await;
    let retry = RetryLayer::new(RetryConfig::default())
        .expect("valid")
        .buffer_unknown_length(true)
        .backoff(Duration::ZERO, Duration::ZERO)
        .expect("valid");
    let channel = Channel::from_shared(addr).expect("uri").connect_lazy();
    let stack = ServiceBuilder::new()
        .layer(retry)
        .map_request(|r: http::Request<RetryBody<tonic::body::Body>>| r.map(tonic::body::Body::new))
        .service(channel);
    let status = WorkClient::new(stack)
        .r#do(WorkRequest::default())
        .await
        .expect_err("refused on every attempt");
    println!(
        "through the client layers: {:?} pushback={:?} (leaf handler entered {} time(s))",
        status.code(),
        pushback(&status),
        received.load(Ordering::SeqCst)
    );
    assert!(
        matches!(
            status.code(),
            tonic::Code::Unavailable | tonic::Code::ResourceExhausted
        ),
        "{status:?}"
    );
    assert_eq!(
        pushback(&status).as_deref(),
        Some("-1"),
        "marked don't-retry"
    );
    // Only the occupying call ever reached the handler: the refusals were the server layer's.
    assert_eq!(received.load(Ordering::SeqCst), 1);
    release.notify_waiters();
    let _ = busy.await;
}
