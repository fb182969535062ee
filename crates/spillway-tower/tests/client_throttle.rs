//! The adaptive throttle over real loopback HTTP.
//!
//! Why the backend has a fixed *capacity* rather than a fixed acceptance *fraction*: the SRE
//! book's claim is that a throttled client sends the backend about K × what it accepts. That
//! holds when the backend accepts what it can (a rate) whatever it is sent. A backend accepting
//! a fixed fraction f of what it receives makes received/accepted = 1/f whatever the client does
//! (the throttle only shrinks both), so the test uses a backend that accepts at most `CAPACITY`
//! requests per second (token bucket) and refuses the rest with 503, and drives it well past
//! K × capacity.
//!
//! Time: the throttle and the backend's token bucket share one injected `ManualClock` that the
//! driver advances 1 ms per request (an offered 1000 requests/s against a capacity of 100/s).
//! Locally throttled requests cost nothing, so on the wall clock a driver would offer them at
//! an unbounded rate; a virtual clock makes the offered rate what the test says it is, while
//! every request that is sent still crosses a real loopback socket.

mod client_support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::StatusCode;
use http_body_util::Full;
use spillway_core::clock::{Clock, ManualClock};
use spillway_core::throttle::ThrottleConfig;
use spillway_tower::client::{ThrottleLayer, Throttled};
use tower::util::BoxCloneSyncService;
use tower::{Service, ServiceBuilder, ServiceExt};

use client_support::*;

const CAPACITY: f64 = 100.0; // accepted requests per second

struct Bucket {
    tokens: f64,
    last: Instant,
    clock: Arc<ManualClock>,
}

#[derive(Default)]
struct Counts {
    received: AtomicU64,
    accepted: AtomicU64,
}

async fn backend(clock: Arc<ManualClock>) -> (std::net::SocketAddr, Arc<Counts>) {
    let counts = Arc::new(Counts::default());
    let bucket = Arc::new(Mutex::new(Bucket {
        tokens: 1.0,
        last: clock.now(),
        clock,
    }));
    let c = counts.clone();
    let app = Router::new().route(
        "/",
        get(move || {
            let c = c.clone();
            let bucket = bucket.clone();
            async move {
                c.received.fetch_add(1, Ordering::Relaxed);
                let ok = {
                    let mut b = bucket.lock().unwrap_or_else(|p| p.into_inner());
                    let now = b.clock.now();
                    b.tokens =
                        (b.tokens + now.duration_since(b.last).as_secs_f64() * CAPACITY).min(1.0);
                    b.last = now;
                    if b.tokens >= 1.0 {
                        b.tokens -= 1.0;
                        true
                    } else {
                        false
                    }
                };
                if ok {
                    c.accepted.fetch_add(1, Ordering::Relaxed);
                    (StatusCode::OK, "ok")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "over capacity")
                }
            }
        }),
    );
    (serve(app).await, counts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overloaded_backend_receives_about_k_times_what_it_accepts() {
    let clock = Arc::new(ManualClock::new());
    let (addr, counts) = backend(clock.clone()).await;
    let cfg = ThrottleConfig {
        // Shorter than the book's 120 s so that the 5 virtual seconds driven here are more than
        // a window's worth of history; the formula is the same.
        window: Duration::from_secs(2),
        buckets: 20,
        ..ThrottleConfig::default()
    };
    let k = cfg.k;
    let throttle = ThrottleLayer::with_clock(cfg, clock.clone()).expect("valid config");
    let mut stack: Stack = BoxCloneSyncService::new(
        ServiceBuilder::new()
            .layer(throttle.clone())
            .service(hyper_client()),
    );
    let uri = format!("http://{addr}/");
    let total = 5000u64;
    let offered_per_sec = 1000.0;
    let mut throttled = 0u64;
    for _ in 0..total {
        clock.advance(Duration::from_secs_f64(1.0 / offered_per_sec));
        let req = http::Request::get(&uri)
            .body(Full::new(Bytes::new()))
            .expect("request");
        match stack.ready().await.expect("ready").call(req).await {
            Ok(_) => {}
            Err(e) if e.downcast_ref::<Throttled>().is_some() => throttled += 1,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    let received = counts.received.load(Ordering::Relaxed);
    let accepted = counts.accepted.load(Ordering::Relaxed).max(1);
    let ratio = received as f64 / accepted as f64;
    let authority: http::uri::Authority = addr.to_string().parse().expect("authority");
    println!(
        "throttle: {total} requests offered at {offered_per_sec}/s (virtual) vs {CAPACITY}/s \
         capacity: {throttled} throttled locally, backend received {received}, accepted \
         {accepted}: received/accepted = {ratio:.2} (K = {k}; {:.1} without the throttle); \
         final P = {:.3}",
        total as f64 / accepted as f64,
        throttle.probability(Some(&authority)),
    );
    assert_eq!(
        received + throttled,
        total,
        "every request is either sent or throttled"
    );
    // The backend was overloaded: without the throttle it would receive all `total`.
    assert!(total as f64 / accepted as f64 > 3.0 * k);
    // With it, about K × accepted (generous bounds: the start-up transient and bucket edges).
    assert!(
        ratio > 0.7 * k && ratio < 1.5 * k,
        "received/accepted = {ratio:.2}, K = {k}"
    );
    // The throttle keys by destination: this authority's throttle carried the traffic (the
    // window is shorter than the run, so only its last 2 s are still counted).
    let (req, acc) = throttle.counts(Some(&authority));
    assert!(req > 0 && req <= total && acc <= accepted, "{req} {acc}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_refusal_is_a_matchable_throttled_error_and_is_never_sent() {
    let (addr, counts) = backend(Arc::new(ManualClock::new())).await;
    let cfg = ThrottleConfig {
        k: 0.01, // throttles hard as soon as the backend refuses
        ..ThrottleConfig::default()
    };
    let throttle = ThrottleLayer::new(cfg).expect("valid config");
    let mut stack: Stack = BoxCloneSyncService::new(
        ServiceBuilder::new()
            .layer(throttle)
            .service(hyper_client()),
    );
    let uri = format!("http://{addr}/");
    let mut seen: Option<Throttled> = None;
    let mut sent = 0;
    for _ in 0..500 {
        let req = http::Request::get(&uri)
            .body(Full::new(Bytes::new()))
            .expect("request");
        match stack.ready().await.expect("ready").call(req).await {
            Ok(_) => sent += 1,
            Err(e) => {
                let t = e
                    .downcast_ref::<Throttled>()
                    .expect("the only local error is Throttled");
                seen = Some(t.clone());
            }
        }
    }
    let t = seen.expect("the throttle refused at least once");
    assert!(t.probability > 0.0 && t.probability < 1.0, "{t:?}");
    assert_eq!(
        t.destination.as_ref().map(|a| a.as_str()),
        Some(addr.to_string().as_str())
    );
    assert!(t.to_string().contains("throttled locally"), "{t}");
    assert_eq!(counts.received.load(Ordering::Relaxed), sent);
}
