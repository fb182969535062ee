//! Per-request overhead of the server layer, in process: a bare service vs tower's
//! `ConcurrencyLimit` + `LoadShed` vs `SpillwayLayer` (admitted, and refused), each called with
//! `ServiceExt::oneshot` on a current-thread runtime. No sockets: this isolates the layer's cost
//! (classification, admission, permit, body wrapper) from the network's.
//!
//! Run: `cargo bench -p spillway-tower --bench server_overhead`

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use divan::Bencher;
use http::{Request, Response};
use http_body_util::{Empty, Full};
use spillway_core::controller::{AdmissionConfig, AdmissionController};
use spillway_core::limit::{FixedConfig, LimitConfig};
use spillway_core::signal::ManualSignal;
use spillway_core::{Criticality, SystemClock};
use spillway_tower::server::SpillwayLayer;
use tower::{service_fn, Layer, ServiceBuilder, ServiceExt};

fn main() {
    divan::main();
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
}

fn request() -> Request<Empty<Bytes>> {
    Request::builder()
        .uri("/api/items")
        .header("x-spillway-criticality", "CRITICAL")
        .body(Empty::new())
        .expect("request")
}

async fn handler(_r: Request<Empty<Bytes>>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"ok"))))
}

fn controller(signal: f64) -> AdmissionController {
    let cfg = AdmissionConfig {
        limit: LimitConfig::Fixed(FixedConfig { limit: 1000 }),
        ..AdmissionConfig::default()
    };
    let s = Arc::new(ManualSignal::new("bench"));
    s.set(signal);
    AdmissionController::new(cfg, Arc::new(SystemClock))
        .expect("config")
        .with_signal(s)
}

#[divan::bench]
fn bare(b: Bencher) {
    let rt = runtime();
    let svc = service_fn(handler);
    b.bench_local(|| rt.block_on(svc.oneshot(request())));
}

#[divan::bench]
fn tower_concurrency_limit_load_shed(b: Bencher) {
    let rt = runtime();
    let svc = ServiceBuilder::new()
        .load_shed()
        .concurrency_limit(1000)
        .service(service_fn(handler));
    b.bench_local(|| rt.block_on(svc.clone().oneshot(request())));
}

#[divan::bench]
fn spillway_admitted(b: Bencher) {
    let rt = runtime();
    let svc = SpillwayLayer::new(controller(0.0)).layer(service_fn(handler));
    // Dropping the response drops the body and releases the permit, as a finished body would.
    b.bench_local(|| rt.block_on(svc.clone().oneshot(request())));
}

#[divan::bench]
fn spillway_admitted_no_metrics(b: Bencher) {
    let rt = runtime();
    let svc = SpillwayLayer::new(controller(0.0))
        .metrics(false)
        .layer(service_fn(handler));
    b.bench_local(|| rt.block_on(svc.clone().oneshot(request())));
}

#[divan::bench]
fn spillway_admitted_cpu_measured(b: Bencher) {
    let rt = runtime();
    let svc = SpillwayLayer::new(controller(0.0))
        .measure_cpu(true)
        .layer(service_fn(handler));
    b.bench_local(|| rt.block_on(svc.clone().oneshot(request())));
}

#[divan::bench]
fn spillway_refused_shed(b: Bencher) {
    let rt = runtime();
    let svc = SpillwayLayer::new(controller(0.99))
        .default_criticality(Criticality::Sheddable)
        .layer(service_fn(handler));
    let req = || {
        Request::builder()
            .uri("/api/items")
            .body(Empty::new())
            .expect("request")
    };
    b.bench_local(|| rt.block_on(svc.clone().oneshot(req())));
}
