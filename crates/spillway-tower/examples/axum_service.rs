//! An axum service protected by `SpillwayLayer`, calling a downstream through the client layers.
//!
//! ```text
//! self-test client ──► front (SpillwayLayer, trusts 127.0.0.1) ──► Propagate ► Retry ► Throttle
//!                                                                   ──► inventory (SpillwayLayer, limit 2)
//! ```
//!
//! Runs a bounded demo on loopback and exits: a burst of page requests at mixed criticalities
//! (the inventory can serve two at a time, so some are refused; the front turns "gave up on an
//! overloaded downstream" into 503 + don't-retry, so the caller does not retry again), a
//! batch request the front treats as SHEDDABLE, and a health check.
//!
//! `cargo run -p spillway-tower --example axum_service`

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::Router;
use spillway_core::controller::{AdmissionConfig, AdmissionController};
use spillway_core::limit::{FixedConfig, LimitConfig};
use spillway_core::{Criticality, PerCriticality, SystemClock};
use spillway_tower::context;
use spillway_tower::server::SpillwayLayer;
use spillway_tower::wire;

fn admission(limit: usize) -> Result<AdmissionController, BoxError> {
    let mut cfg = AdmissionConfig {
        limit: LimitConfig::Fixed(FixedConfig { limit }),
        headroom: PerCriticality([1.0; 4]),
        ..AdmissionConfig::default()
    };
    cfg.queue.max_len = Some(0); // refuse at once past the limit, so the demo shows refusals
    Ok(AdmissionController::new(cfg, Arc::new(SystemClock))?)
}

async fn serve(app: Router) -> Result<SocketAddr, BoxError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        if let Err(e) = axum::serve(listener, app).await {
            eprintln!("server on {addr} stopped: {e}");
        }
    });
    Ok(addr)
}

fn peer(e: &http::Extensions) -> Option<SocketAddr> {
    e.get::<ConnectInfo<SocketAddr>>().map(|c| c.0)
}

/// The downstream: slow enough that two at a time is its capacity.
async fn inventory() -> String {
    tokio::time::sleep(Duration::from_millis(40)).await;
    let ctx = context::current().unwrap_or_default();
    format!("stock checked at {} for {}", ctx.criticality, ctx.customer)
}

// readme-client:begin
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use spillway_core::{retry::RetryConfig, throttle::ThrottleConfig};
use spillway_tower::client::retry::RetryBody;
use spillway_tower::client::{
    BoxError, ClientError, ClientService, PropagateLayer, RetryLayer, ThrottleLayer,
};
use tower::{ServiceBuilder, ServiceExt};

/// The client stack: `Clone + Send + Sync`, errors a concrete `ClientError`.
type Downstream = ClientService<Full<Bytes>, hyper::body::Incoming>;

/// The client stack around hyper-util's client, outermost first: the request's context
/// (criticality, remaining deadline, customer) onto headers, gated retries, adaptive throttle.
fn downstream() -> Result<Downstream, BoxError> {
    let http: Client<HttpConnector, RetryBody<Full<Bytes>>> =
        Client::builder(TokioExecutor::new()).build_http();
    let retry = RetryLayer::new(RetryConfig::default())?
        .backoff(Duration::from_millis(5), Duration::from_millis(20))?;
    let throttle = ThrottleLayer::new(ThrottleConfig {
        min_requests_per_sec: 0.1,
        ..ThrottleConfig::default()
    })?;
    let svc = ServiceBuilder::new()
        .layer(PropagateLayer::new())
        .layer(retry)
        .layer(throttle)
        .service(http)
        .map_err(ClientError::from);
    Ok(ClientService::new(svc))
}

#[derive(Clone)]
struct Front {
    inventory: String,
    client: Downstream,
}

/// A handler calling the downstream through the stack kept in axum state.
async fn page(State(front): State<Front>) -> Response {
    let req = match Request::get(format!("{}/stock", front.inventory)).body(Full::default()) {
        Ok(r) => r,
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    match front.client.oneshot(req).await {
        Ok(res) if res.status().is_success() => {
            let body = res.into_body().collect().await.map(|b| b.to_bytes());
            let text = body.map(|b| String::from_utf8_lossy(&b).into_owned());
            text.unwrap_or_else(|e| e.to_string()).into_response()
        }
        Ok(res) => (
            StatusCode::BAD_GATEWAY,
            format!("inventory said {}", res.status()),
        )
            .into_response(),
        // An overloaded downstream (given up on, or throttled locally) becomes 503 with the
        // don't-retry marker, so *our* callers do not retry either; anything else 502.
        Err(e) => e.to_response::<Body>(),
    }
}
// readme-client:end

async fn get_status(
    http: &Client<HttpConnector, Full<Bytes>>,
    url: &str,
    criticality: Criticality,
) -> Result<(u16, bool), BoxError> {
    let req = Request::get(url)
        .header(wire::CRITICALITY, criticality.as_str())
        .header(wire::CUSTOMER, "demo-shop")
        .header(wire::DEADLINE_MS, "2000")
        .body(Full::default())?;
    let res = http.request(req).await?;
    let dont_retry = wire::is_dont_retry(res.headers());
    Ok((res.status().as_u16(), dont_retry))
}

#[tokio::main]
pub async fn main() -> Result<(), BoxError> {
    let inventory_addr = serve(
        Router::new().route("/stock", get(inventory)).layer(
            SpillwayLayer::new(admission(2)?)
                .trust("127.0.0.1/32")?
                .peer_addr(peer),
        ),
    )
    .await?;
    let front = Front {
        inventory: format!("http://{inventory_addr}"),
        client: downstream()?,
    };
    let front_layer = SpillwayLayer::new(admission(64)?)
        .trust("127.0.0.1/32")?
        .peer_addr(peer)
        .route("/batch/", Criticality::Sheddable)
        .health_path("/healthz")
        .cost_headers(true)
        .measure_cpu(true);
    let front_addr = serve(
        Router::new()
            .route("/page", get(page))
            .route("/batch/report", get(page))
            .route("/healthz", get(|| async { "ok" }))
            .route("/local", get(|| async { "served locally" }))
            .with_state(front)
            .layer(front_layer),
    )
    .await?;
    println!("inventory on {inventory_addr} (limit 2), front on {front_addr} (limit 64)");

    let http: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let mut calls = Vec::new();
    for i in 0..24 {
        let c = [
            Criticality::Sheddable,
            Criticality::Critical,
            Criticality::CriticalPlus,
        ][i % 3];
        let http = http.clone();
        let url = format!("http://{front_addr}/page");
        calls.push(tokio::spawn(async move {
            (c, get_status(&http, &url, c).await)
        }));
    }
    let mut table: BTreeMap<(Criticality, u16, bool), u32> = BTreeMap::new();
    for call in calls {
        let (c, r) = call.await?;
        let (status, dont_retry) = r?;
        *table.entry((c, status, dont_retry)).or_default() += 1;
    }
    println!("burst of 24 page requests through the front to a 2-slot inventory:");
    for ((c, status, dont_retry), n) in &table {
        let marker = if *dont_retry { "  (don't retry)" } else { "" };
        println!("  {:<14} -> {status}: {n}{marker}", c.as_str());
    }
    let served: u32 = table
        .iter()
        .filter(|((_, s, _), _)| *s == 200)
        .map(|(_, n)| n)
        .sum();
    check(served >= 1, "some page requests are served")?;
    check(
        served < 24,
        "a 2-slot inventory cannot serve a burst of 24 at once",
    )?;
    check(
        table
            .keys()
            .all(|(_, s, dont_retry)| *s == 200 || (*s == 503 && *dont_retry)),
        "every refusal is 503 with the don't-retry marker (the front gave up on the inventory)",
    )?;

    let res = http
        .request(Request::get(format!("http://{front_addr}/local")).body(Full::default())?)
        .await?;
    let cost = res.headers().get(wire::COST).cloned();
    let queue = res.headers().get(wire::QUEUE_MS).cloned();
    let status = res.status();
    let body = res.into_body().collect().await?.to_bytes();
    println!(
        "local page: {status} {:?}, cost {cost:?} CPU-s, queued {queue:?} ms",
        String::from_utf8_lossy(&body)
    );
    check(status == 200, "the local page is served")?;
    check(
        cost.is_some() && queue.is_some(),
        "cost headers are on the response",
    )?;
    let health = get_status(
        &http,
        &format!("http://{front_addr}/healthz"),
        Criticality::Sheddable,
    )
    .await?;
    println!("health check: {}", health.0);
    check(health.0 == 200, "health checks are never shed")?;
    // After the burst the front's adaptive throttle refuses most calls to the inventory
    // locally (P = (requests - 2 x accepts) / (requests + 1), SRE book ch. 21), so this one
    // most likely fails fast without touching the inventory.
    let batch = get_status(
        &http,
        &format!("http://{front_addr}/batch/report"),
        Criticality::Critical,
    )
    .await?;
    println!(
        "batch report (route default SHEDDABLE unless a trusted caller says otherwise): {}",
        batch.0
    );
    check(
        batch.0 == 200 || (batch.0 == 503 && batch.1),
        "the batch report is served or refused with don't-retry",
    )?;
    println!("all checks passed");
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
