//! Criticality, deadline and customer propagate across a 3-service chain over real loopback
//! HTTP: driver → A → B → C, where C echoes what it received. A and B spend time before calling
//! on, so the deadline C sees must be reduced by it; B lowers the criticality of a second call
//! made on its own behalf (`with_criticality`), which must not raise it.

mod client_support;

use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use spillway_core::Criticality;
use spillway_tower::client::PropagateLayer;
use spillway_tower::context;
use spillway_tower::wire;
use tower::util::BoxCloneSyncService;
use tower::{Service, ServiceBuilder, ServiceExt};

use client_support::*;

fn stack() -> Stack {
    BoxCloneSyncService::new(
        ServiceBuilder::new()
            .layer(PropagateLayer::new())
            .service(hyper_client()),
    )
}

#[derive(Clone)]
struct Hop {
    client: Stack,
    next: String,
}

async fn call(h: &Hop) -> Result<String, CallError> {
    let req = http::Request::get(&h.next)
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .map_err(|e| CallError(e.into()))?;
    let mut client = h.client.clone();
    let resp = client
        .ready()
        .await
        .map_err(CallError)?
        .call(req)
        .await
        .map_err(CallError)?;
    use http_body_util::BodyExt;
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| CallError(e.into()))?;
    Ok(String::from_utf8_lossy(&body.to_bytes()).into_owned())
}

/// A: spends 100 ms, then calls B.
async fn hop_a(State(h): State<Hop>) -> Result<String, CallError> {
    tokio::time::sleep(Duration::from_millis(100)).await;
    call(&h).await
}

/// B: spends 100 ms, calls C on the request's behalf, then again "on its own behalf" as
/// SHEDDABLE, and once more asking for CRITICAL_PLUS (which must be clamped).
async fn hop_b(State(h): State<Hop>) -> Result<Response, CallError> {
    tokio::time::sleep(Duration::from_millis(100)).await;
    let direct = call(&h).await?;
    let lowered = context::with_criticality(Criticality::Sheddable, call(&h)).await?;
    let raised = context::with_criticality(Criticality::CriticalPlus, call(&h)).await?;
    Ok(axum::response::IntoResponse::into_response(format!(
        "{direct}\n{lowered}\n{raised}"
    )))
}

/// C: echoes the context headers it received.
async fn echo(headers: HeaderMap) -> String {
    let get = |n: &http::HeaderName| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_owned()
    };
    format!(
        "criticality={} deadline_ms={} customer={} attempt={}",
        get(&wire::CRITICALITY),
        get(&wire::DEADLINE_MS),
        get(&wire::CUSTOMER),
        get(&wire::ATTEMPT)
    )
}

fn field<'a>(line: &'a str, name: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(name).and_then(|r| r.strip_prefix('=')))
        .unwrap_or("?")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn criticality_deadline_and_customer_cross_three_services() {
    let c = serve(Router::new().route("/", get(echo))).await;
    let b = serve(
        Router::new()
            .route("/", get(hop_b))
            .with_state(Hop {
                client: stack(),
                next: format!("http://{c}/"),
            })
            .layer(axum::middleware::from_fn(edge)),
    )
    .await;
    let a = serve(
        Router::new()
            .route("/", get(hop_a))
            .with_state(Hop {
                client: stack(),
                next: format!("http://{b}/"),
            })
            .layer(axum::middleware::from_fn(edge)),
    )
    .await;

    let mut driver = stack();
    let (status, _, body) = send_get(
        &mut driver,
        &format!("http://{a}/"),
        &[
            (&wire::CRITICALITY, "SHEDDABLE_PLUS"),
            (&wire::DEADLINE_MS, "5000"),
            (&wire::CUSTOMER, "acme"),
        ],
    )
    .await
    .expect("chain answers");
    println!("C saw:\n{body}");
    assert!(status.is_success(), "{status}: {body}");
    let lines: Vec<&str> = body.lines().collect();
    assert_eq!(lines.len(), 3, "{body}");

    // Criticality and customer arrive unchanged two hops down.
    assert_eq!(field(lines[0], "criticality"), "SHEDDABLE_PLUS");
    assert_eq!(field(lines[0], "customer"), "acme");
    // The deadline is the remaining time: 5000 ms minus at least the 200 ms A and B spent.
    let left: u64 = field(lines[0], "deadline_ms")
        .parse()
        .expect("deadline header at C");
    assert!(
        left <= 4800,
        "deadline not reduced by the time spent: {left} ms"
    );
    assert!(
        left > 3000,
        "deadline reduced by far more than the time spent: {left} ms"
    );
    // with_criticality lowers for calls made on the service's own behalf, and never raises.
    assert_eq!(field(lines[1], "criticality"), "SHEDDABLE");
    assert_eq!(field(lines[2], "criticality"), "SHEDDABLE_PLUS");
    // Later calls see less time left than earlier ones.
    let later: u64 = field(lines[2], "deadline_ms")
        .parse()
        .expect("deadline header");
    assert!(later <= left);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_made_after_the_deadline_is_not_sent() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let hits = Arc::new(AtomicU64::new(0));
    let h2 = hits.clone();
    let c = serve(Router::new().route(
        "/",
        get(move || {
            h2.fetch_add(1, Ordering::Relaxed);
            async { "served" }
        }),
    ))
    .await;
    // B spends 100 ms of a 50 ms deadline before calling C.
    let b = serve(
        Router::new()
            .route("/", get(hop_a))
            .with_state(Hop {
                client: stack(),
                next: format!("http://{c}/"),
            })
            .layer(axum::middleware::from_fn(edge)),
    )
    .await;
    let mut driver = stack();
    let (status, _, body) = send_get(
        &mut driver,
        &format!("http://{b}/"),
        &[(&wire::DEADLINE_MS, "50")],
    )
    .await
    .expect("B answers");
    assert_eq!(status, http::StatusCode::BAD_GATEWAY, "{body}");
    assert!(body.contains("deadline"), "{body}");
    assert_eq!(
        hits.load(Ordering::Relaxed),
        0,
        "C must not be called past the deadline"
    );
}
