//! Two tower services sharing one Redis hold a customer's *global* quota together
//! (`SpillwayLayer::fleet_store`, the `fleet` feature), where the static `global / tasks` split
//! would hold it to much less when the traffic reaches them unevenly.
//!
//! `cargo test -p spillway-tower --features fleet --test fleet_store -- --nocapture`. Each test
//! starts its own `redis-server` on a free loopback port (skipped, with a message, when the
//! binary is missing outside CI).

#[path = "../../spillway-proxy/tests/redis_support/mod.rs"]
mod redis_support;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Request, Response};
use spillway_core::controller::{AdmissionConfig, AdmissionController};
use spillway_core::quota::{CustomerQuota, QuotaBook, QuotaConfig, QuotaEnforcement};
use spillway_core::{Criticality, SystemClock};
use spillway_tower::lease::{instance_id, FleetStore, LeaseMode, Leaser};
use spillway_tower::server::SpillwayLayer;
use tower::{service_fn, Layer, Service, ServiceExt};

const GLOBAL: f64 = 20.0;
const LEASE: Duration = Duration::from_millis(100);

/// One service: `acme` has a global quota of 20 cost units/s at every criticality, split over
/// two tasks statically (10 each) unless a store shares it; every request costs 1.
fn layer(store: Option<&str>) -> SpillwayLayer {
    let quota = QuotaConfig {
        tasks: 2,
        enforcement: QuotaEnforcement::Always,
        ..QuotaConfig::default()
    }
    .with_customer("acme", CustomerQuota::uniform(GLOBAL));
    let cfg = AdmissionConfig {
        quota,
        ..AdmissionConfig::default()
    };
    let controller = AdmissionController::new(cfg, Arc::new(SystemClock)).expect("valid config");
    let layer = SpillwayLayer::new(controller)
        .trust_all(true)
        .metrics(false);
    match store {
        None => layer,
        Some(url) => layer
            .fleet_store_with(
                FleetStore::new(url)
                    .expect("url")
                    .lease_interval(LEASE)
                    .expect("interval"),
            )
            .expect("inside the runtime"),
    }
}

/// Sends `acme` requests to two services, 48/s to the first and 2/s to the second, for
/// `settle + measure`; returns what each admitted per second during `measure`.
async fn offer(
    a: &SpillwayLayer,
    b: &SpillwayLayer,
    settle: Duration,
    measure: Duration,
) -> [f64; 2] {
    let ok = service_fn(|_r: Request<String>| async {
        Ok::<_, Infallible>(Response::new(String::from("ok")))
    });
    let mut svcs = [a.layer(ok), b.layer(ok)];
    let tick = Duration::from_millis(20);
    let mut clock = tokio::time::interval(tick);
    let started = tokio::time::Instant::now();
    let (mut admitted, mut k) = ([0u64; 2], 0u64);
    loop {
        clock.tick().await;
        let elapsed = started.elapsed();
        if elapsed >= settle + measure {
            break;
        }
        // 50 ticks a second: one request to the first service on 48 of them (skipping
        // k ≡ 0 and 25), one to the second on those two.
        let target = usize::from(k % 25 == 0);
        k += 1;
        let req = Request::get("/")
            .header("x-spillway-customer", "acme")
            .header("x-spillway-criticality", "CRITICAL")
            .body(String::new())
            .expect("request");
        let svc = &mut svcs[target];
        let res = svc
            .ready()
            .await
            .expect("ready")
            .call(req)
            .await
            .expect("infallible");
        if elapsed >= settle && res.status() == 200 {
            admitted[target] += 1;
        }
    }
    admitted.map(|n| n as f64 / measure.as_secs_f64())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_services_sharing_a_store_hold_the_global_quota_together() {
    if redis_support::available().is_none() {
        return;
    }
    let redis = redis_support::RedisServer::start();
    let (settle, measure) = (Duration::from_secs(2), Duration::from_secs(4));

    // Static split: the busy service is held to 10/s, the quiet one uses 2 of its 10.
    let [fa, fb] = offer(&layer(None), &layer(None), settle, measure).await;
    let fixed = fa + fb;

    let (a, b) = (layer(Some(&redis.url())), layer(Some(&redis.url())));
    let [busy, quiet] = offer(&a, &b, settle, measure).await;
    let shared = busy + quiet;
    eprintln!(
        "admitted per second: static split {fixed:.1} ({fa:.1} + {fb:.1}), \
         shared store {shared:.1} ({busy:.1} + {quiet:.1})"
    );

    assert!(
        (fixed - 12.0).abs() <= 2.5,
        "static split: 10 + 2 expected, got {fixed:.1}"
    );
    assert!(
        (shared - GLOBAL).abs() <= 0.15 * GLOBAL,
        "shared: the global 20/s expected, got {shared:.1}"
    );
    // The quiet service keeps what it needs: its few arrivals per lease must not read as a
    // demand of nothing (it was refused outright when they did).
    assert!(quiet >= 1.5, "the quiet service's 2/s: {quiet:.1}");
    let status = a.fleet_status().expect("a lease round");
    assert_eq!(status.mode, LeaseMode::Leased, "{status:?}");
    assert_eq!(status.members, 2, "{status:?}");
    let critical = status
        .shares
        .iter()
        .find(|s| s.customer.as_deref() == Some("acme") && s.criticality == Criticality::Critical)
        .expect("acme's CRITICAL bucket is shared");
    // Max-min fair over demands 48 and 2: the quiet one keeps its 2, the busy one takes 18.
    assert!((critical.rate - 18.0).abs() <= 2.0, "{critical:?}");
    assert_ne!(status.instance, b.fleet_status().expect("b").instance);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_service_leaves_and_an_unreachable_store_is_the_static_split() {
    if redis_support::available().is_none() {
        return;
    }
    let mut redis = redis_support::RedisServer::start();
    let a = layer(Some(&redis.url()));
    let b = layer(Some(&redis.url()));
    tokio::time::sleep(LEASE * 5).await;
    assert_eq!(a.fleet_status().expect("a").members, 2);
    // The last clone of b goes: its task leaves the member set at its next round.
    drop(b);
    tokio::time::sleep(LEASE * 4).await;
    assert_eq!(a.fleet_status().expect("a").members, 1);
    // The store dies: holding, then decaying, then the static 20 / 2 split.
    redis.kill();
    tokio::time::sleep(LEASE * 8).await;
    let s = a.fleet_status().expect("a");
    assert_eq!(s.mode, LeaseMode::Static, "{s:?}");
    assert!(s.last_error.is_some() && s.errors > 0, "{s:?}");
    assert!(
        s.shares.iter().all(|x| (x.rate - 10.0).abs() < 1e-6),
        "{s:?}"
    );
}

#[test]
fn outside_a_runtime_the_store_is_refused_with_a_reason() {
    let e = SpillwayLayer::default()
        .fleet_store("redis://127.0.0.1:6379/0")
        .unwrap_err();
    assert!(e.to_string().contains("runtime"), "{e}");
    let e = SpillwayLayer::default()
        .fleet_store("http://127.0.0.1:6379/0")
        .unwrap_err();
    assert!(e.to_string().contains("quota.store"), "{e}");
}

/// After an outage the first lease round with the store back succeeds: a failed call drops the
/// connection, so the next round connects afresh rather than meeting the connection manager's
/// failed reconnect attempt, which cost every instance an extra interval to rejoin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_round_after_the_store_returns_is_leased() {
    if redis_support::available().is_none() {
        return;
    }
    let mut redis = redis_support::RedisServer::start();
    let cfg = QuotaConfig {
        tasks: 2,
        enforcement: QuotaEnforcement::Always,
        store: Some(redis.url()),
        lease_interval: LEASE,
        ..QuotaConfig::default()
    }
    .with_customer(
        "acme",
        CustomerQuota::unlimited().with(Criticality::Critical, Some(GLOBAL)),
    );
    let book = QuotaBook::new(cfg.clone(), Instant::now()).expect("a valid quota");
    let _ = book.try_charge(Instant::now(), "acme", Criticality::Critical, 1.0, true);
    let store = FleetStore::from_quota(&cfg).expect("a store is configured");
    let mut leaser = Leaser::new(instance_id());
    let s = leaser.step(&book, &store).await;
    assert_eq!(s.mode, LeaseMode::Leased, "{s:?}");
    redis.kill();
    let s = leaser.step(&book, &store).await;
    assert!(s.last_error.is_some(), "{s:?}");
    assert!(
        leaser.client().is_none(),
        "a failed call drops the connection"
    );
    // Long enough for a reconnect attempt begun by the failed call to have failed as well.
    tokio::time::sleep(LEASE * 10).await;
    redis.restart();
    let s = leaser.step(&book, &store).await;
    assert_eq!(s.mode, LeaseMode::Leased, "{s:?}");
}
