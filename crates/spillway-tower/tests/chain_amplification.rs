//! 3 layers × 3 attempts: naive retries multiply the bottom's load up to 27×; Spillway's gated
//! retries with don't-retry propagation keep it near 1.1× (SRE book ch. 21, "Handling Overload
//! Errors"). Real loopback HTTP servers: driver → A → B → C, where C refuses everything (503).

mod client_support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use http::StatusCode;
use spillway_core::retry::RetryConfig;
use spillway_tower::client::{PropagateLayer, RetryLayer};
use tower::util::BoxCloneSyncService;
use tower::ServiceBuilder;

use client_support::*;

fn stack(retry: RetryLayer) -> Stack {
    let svc = ServiceBuilder::new()
        .layer(PropagateLayer::new())
        .layer(retry)
        .service(hyper_client());
    BoxCloneSyncService::new(svc)
}

fn retry_layer(naive: bool) -> RetryLayer {
    let (base, max) = no_backoff();
    let layer = if naive {
        RetryLayer::naive(3).expect("valid")
    } else {
        RetryLayer::new(RetryConfig::default()).expect("valid default")
    };
    layer.backoff(base, max).expect("valid backoff")
}

#[derive(Clone)]
struct Hop {
    client: Stack,
    next: String,
}

async fn hop(State(h): State<Hop>) -> Result<Response, CallError> {
    let mut client = h.client.clone();
    use tower::{Service, ServiceExt};
    let req = http::Request::get(&h.next)
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .map_err(|e| CallError(e.into()))?;
    let resp = client
        .ready()
        .await
        .map_err(CallError)?
        .call(req)
        .await
        .map_err(CallError)?;
    Ok(forward(resp).await)
}

/// Builds the chain; returns (driver stack, URL of A, bottom counter).
async fn chain(naive: bool) -> (Stack, String, Arc<AtomicU64>) {
    let bottom = Arc::new(AtomicU64::new(0));
    let counter = bottom.clone();
    let c = serve(Router::new().route(
        "/",
        get(move || {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::Relaxed);
                (StatusCode::SERVICE_UNAVAILABLE, "overloaded")
            }
        }),
    ))
    .await;
    let b = serve(
        Router::new()
            .route("/", get(hop))
            .with_state(Hop {
                client: stack(retry_layer(naive)),
                next: format!("http://{c}/"),
            })
            .layer(axum::middleware::from_fn(edge)),
    )
    .await;
    let a = serve(
        Router::new()
            .route("/", get(hop))
            .with_state(Hop {
                client: stack(retry_layer(naive)),
                next: format!("http://{b}/"),
            })
            .layer(axum::middleware::from_fn(edge)),
    )
    .await;
    (stack(retry_layer(naive)), format!("http://{a}/"), bottom)
}

async fn run(naive: bool, top_requests: u64) -> (f64, u64) {
    let (mut driver, a, bottom) = chain(naive).await;
    let mut failed = 0;
    for _ in 0..top_requests {
        match send_get(&mut driver, &a, &[]).await {
            Ok((status, _, _)) if status.is_success() => {}
            _ => failed += 1,
        }
    }
    let at_bottom = bottom.load(Ordering::Relaxed);
    (at_bottom as f64 / top_requests as f64, failed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spillway_retries_keep_bottom_near_1_1x_while_naive_reach_27x() {
    let top = 300;
    let (spillway, failed_s) = run(false, top).await;
    let naive_top = 20;
    let (naive, failed_n) = run(true, naive_top).await;
    println!(
        "3-layer chain, bottom refuses everything: bottom/top = {spillway:.3}x with Spillway \
         retries ({top} top requests), {naive:.1}x with naive 3-attempt retries ({naive_top} top requests)"
    );
    // Every top request fails either way: the bottom refuses everything.
    assert_eq!(failed_s, top);
    assert_eq!(failed_n, naive_top);
    // Spillway: only B retries, within 10 % of its requests plus a floor of 1 retry/s over the
    // 10 s window (≤ 10 retries here): ≤ 1 + 0.1 + 10/300 ≈ 1.13.
    assert!(
        spillway >= 1.0,
        "every top request reaches the bottom at least once: {spillway}"
    );
    assert!(
        spillway <= 1.5,
        "Spillway amplification too high: {spillway}"
    );
    // Naive: 3 × 3 × 3.
    assert!(
        naive >= 20.0,
        "naive amplification lower than expected: {naive}"
    );
    assert!(
        naive <= 27.0 + 1e-9,
        "naive amplification above 27: {naive}"
    );
}
