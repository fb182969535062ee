//! Fleet-wide quotas end to end (issue 31): three proxies share customer acme's global quota
//! of 100 cost units/s through one private Redis.
//!
//! 300 requests/s of acme (cost 1, CRITICAL, quota enforced always) reach the proxies 80/15/5
//! — the uneven spread a static `global / tasks` split gets wrong (it would admit 33 + 33 + 15
//! = 81/s). With leases the fleet admits 100 ± 5 %/s; a second customer within its quota is
//! never refused; when one proxy stops the others take its share within 2 s; when Redis is
//! killed no request fails for it and each proxy falls back to the static split; when Redis
//! is back the shares converge again within 2 s. Redis sees one script call per proxy per
//! lease interval, whatever the request rate. Loopback only, about 30 s.

mod proxy_support;
mod redis_support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use proxy_support::{backend, client, proxy_toml};
use redis_support::RedisServer;
use spillway_proxy::lease::LeaseMode;
use spillway_proxy::run::Running;

const INTERVAL_MS: u64 = 500;

/// Outcomes per (proxy, customer): admitted (200), over quota (429), anything else.
#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    over: AtomicU64,
    failed: AtomicU64,
}

type Tallies = Arc<HashMap<(usize, &'static str), Tally>>;

fn config(backend: SocketAddr, store: &str) -> String {
    format!(
        r#"
[upstream]
addresses = ["{backend}"]
[classify]
trusted = ["127.0.0.0/8"]
[admission.limit]
algorithm = "fixed"
limit = 1000
[admission.quota]
tasks = 3
enforcement = "always"
store = "{store}"
lease_interval_ms = {INTERVAL_MS}
customers = [
  ["acme", {{ per_criticality = [100.0, 100.0, 100.0, 100.0] }}],
  ["calm", {{ per_criticality = [100.0, 100.0, 100.0, 100.0] }}],
]
"#
    )
}

/// Sends `rate`/s of `customer` to `addr`, paced, until `stop` is set.
fn load(
    addr: SocketAddr,
    proxy: usize,
    customer: &'static str,
    rate: f64,
    tallies: Tallies,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let c = client();
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
        // A busy host delays ticks; sending the missed ones in a burst would offer more than
        // `rate` inside a measuring window and read as an over-admitting fleet.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        while !stop.load(Ordering::Relaxed) {
            tick.tick().await;
            let (c, tallies) = (c.clone(), Arc::clone(&tallies));
            tokio::spawn(async move {
                let headers = [
                    ("x-spillway-customer", customer),
                    ("x-spillway-criticality", "CRITICAL"),
                ];
                let t = &tallies[&(proxy, customer)];
                let mut req = http::Request::get(format!("http://{addr}/"));
                for (k, v) in headers {
                    req = req.header(k, v);
                }
                let req = req.body(Full::new(Bytes::new())).expect("request");
                // Every outcome counted, a connection error too (as a failure).
                let status = tokio::time::timeout(Duration::from_secs(5), c.request(req))
                    .await
                    .map_err(|_| "timed out".to_string())
                    .and_then(|r| r.map_err(|e| e.to_string()))
                    .map(|r| r.status().as_u16());
                match status {
                    Ok(200) => t.ok.fetch_add(1, Ordering::Relaxed),
                    Ok(429) => t.over.fetch_add(1, Ordering::Relaxed),
                    other => {
                        eprintln!("proxy {proxy} {customer}: {other:?}");
                        t.failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            });
        }
    })
}

fn sum(t: &Tallies, customer: &str, f: fn(&Tally) -> &AtomicU64) -> u64 {
    t.iter()
        .filter(|((_, c), _)| *c == customer)
        .map(|(_, v)| f(v).load(Ordering::Relaxed))
        .sum()
}

/// acme's admitted rate over `secs` seconds from now, the fleet's and each proxy's.
async fn admitted_rate(t: &Tallies, secs: f64) -> (f64, [f64; 3]) {
    let each = || [0, 1, 2].map(|i| t[&(i, "acme")].ok.load(Ordering::Relaxed));
    let before = each();
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    let after = each();
    let dt = start.elapsed().as_secs_f64();
    let per = [0, 1, 2].map(|i| (after[i] - before[i]) as f64 / dt);
    (per.iter().sum(), per)
}

fn modes(proxies: &[Option<Running>]) -> Vec<Option<LeaseMode>> {
    proxies
        .iter()
        .map(|p| {
            p.as_ref()
                .and_then(|p| p.state.status().quota_lease)
                .map(|l| l.mode)
        })
        .collect()
}

/// acme's CRITICAL rate at each running proxy.
fn acme_rates(proxies: &[Option<Running>]) -> Vec<f64> {
    proxies
        .iter()
        .flatten()
        .filter_map(|p| p.state.status().quota_lease)
        .filter_map(|l| {
            l.shares
                .into_iter()
                .find(|s| {
                    s.customer.as_deref() == Some("acme")
                        && s.criticality == spillway_core::Criticality::Critical
                })
                .map(|s| s.rate)
        })
        .collect()
}

fn within(rate: f64, target: f64, tolerance: f64) -> bool {
    (rate - target).abs() <= target * tolerance
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_proxies_share_a_global_quota_through_redis() {
    if redis_support::available().is_none() {
        return;
    }
    let mut redis = RedisServer::start();
    let b = backend("b").await;
    let mut proxies = Vec::new();
    for _ in 0..3 {
        proxies.push(Some(proxy_toml(&config(b.addr, &redis.url())).await));
    }
    let addrs: Vec<SocketAddr> = proxies.iter().flatten().map(|p| p.addr).collect();
    let mut map = HashMap::new();
    for i in 0..3 {
        for c in ["acme", "calm"] {
            map.insert((i, c), Tally::default());
        }
    }
    let tallies: Tallies = Arc::new(map);
    let stops: Vec<_> = (0..3)
        .map(|_| Arc::new(std::sync::atomic::AtomicBool::new(false)))
        .collect();
    let mut loads = Vec::new();
    for (i, share) in [0.80, 0.15, 0.05].into_iter().enumerate() {
        let t = Arc::clone(&tallies);
        loads.push(load(
            addrs[i],
            i,
            "acme",
            300.0 * share,
            t,
            Arc::clone(&stops[i]),
        ));
        let t = Arc::clone(&tallies);
        loads.push(load(addrs[i], i, "calm", 10.0, t, Arc::clone(&stops[i])));
    }
    let calls_at_start = redis.calls("evalsha");
    let started = Instant::now();

    // 1. Leased shares: 42.5 + 42.5 + 15 = 100/s (the static split would give 81).
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        modes(&proxies)
            .iter()
            .all(|m| *m == Some(LeaseMode::Leased)),
        "{:?}",
        modes(&proxies)
    );
    let (fleet, each) = admitted_rate(&tallies, 5.0).await;
    eprintln!(
        "leased, three proxies: acme admitted {fleet:.1}/s {each:.1?}, rates {:?}",
        acme_rates(&proxies)
    );
    assert!(
        within(fleet, 100.0, 0.05),
        "fleet admitted {fleet:.1}/s, want 100 ± 5%"
    );

    // Redis work does not follow the request rate: one EVALSHA per proxy per interval.
    let calls = redis.calls("evalsha") - calls_at_start;
    let secs = started.elapsed().as_secs_f64();
    let requests = sum(&tallies, "acme", |x| &x.ok)
        + sum(&tallies, "acme", |x| &x.over)
        + sum(&tallies, "calm", |x| &x.ok);
    eprintln!(
        "redis: {calls} EVALSHA in {secs:.1} s ({:.1}/s) for {requests} requests ({:.0}/s)",
        calls as f64 / secs,
        requests as f64 / secs
    );
    let per_sec = calls as f64 / secs;
    assert!(
        per_sec <= 3.0 * 1000.0 / INTERVAL_MS as f64 * 1.2,
        "{per_sec:.1} lease calls/s for 3 proxies"
    );

    // 2. The 15 % proxy stops: the others (80 % and 5 %) take its share within 2 s.
    stops[1].store(true, Ordering::Relaxed);
    // Its load's last requests answered before it closes (they would find no listener).
    tokio::time::sleep(Duration::from_millis(300)).await;
    if let Some(p) = proxies[1].take() {
        p.shutdown().await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (fleet, each) = admitted_rate(&tallies, 3.0).await;
    eprintln!(
        "one proxy stopped: acme admitted {fleet:.1}/s {each:.1?}, rates {:?}",
        acme_rates(&proxies)
    );
    assert!(
        within(fleet, 100.0, 0.05),
        "after a stop {fleet:.1}/s, want 100 ± 5%"
    );

    // 3. Redis killed: nothing fails for it; each proxy holds its lease, then the static split.
    let failed_before = sum(&tallies, "acme", |x| &x.failed) + sum(&tallies, "calm", |x| &x.failed);
    redis.kill();
    tokio::time::sleep(Duration::from_millis(4 * INTERVAL_MS + 700)).await;
    assert!(
        modes(&proxies)
            .iter()
            .flatten()
            .all(|m| *m == LeaseMode::Static),
        "{:?}",
        modes(&proxies)
    );
    let rates = acme_rates(&proxies);
    assert!(
        rates.iter().all(|r| within(*r, 100.0 / 3.0, 0.01)),
        "static split 33.3 each: {rates:?}"
    );
    let (fleet, each) = admitted_rate(&tallies, 2.0).await;
    eprintln!("redis down: acme admitted {fleet:.1}/s {each:.1?}, rates {rates:?}");
    let status = proxies[0].as_ref().unwrap().state.status();
    let lease = status.quota_lease.expect("a store is configured");
    assert!(lease.errors > 0 && lease.last_error.is_some(), "{lease:?}");
    // One identity per proxy: the id it leases under is the setter id of its fleet controls.
    let setter = proxies[0]
        .as_ref()
        .unwrap()
        .state
        .fleet_controls()
        .instance();
    assert_eq!(lease.instance, setter, "{lease:?}");

    // 4. Redis back: shares converge within 2 s (85 + 15).
    redis.restart();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        modes(&proxies)
            .iter()
            .flatten()
            .all(|m| *m == LeaseMode::Leased),
        "{:?}",
        modes(&proxies)
    );
    let (fleet, each) = admitted_rate(&tallies, 3.0).await;
    eprintln!(
        "redis back: acme admitted {fleet:.1}/s {each:.1?}, rates {:?}",
        acme_rates(&proxies)
    );
    assert!(
        within(fleet, 100.0, 0.05),
        "after Redis returned {fleet:.1}/s, want 100 ± 5%"
    );

    for s in &stops {
        s.store(true, Ordering::Relaxed);
    }
    for l in loads {
        let _ = l.await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let failed = sum(&tallies, "acme", |x| &x.failed) + sum(&tallies, "calm", |x| &x.failed);
    assert_eq!(
        failed, failed_before,
        "no request failed because Redis went away"
    );
    assert_eq!(failed, 0, "no request failed at all");
    assert_eq!(
        sum(&tallies, "calm", |x| &x.over),
        0,
        "the customer within its quota was never refused"
    );
    assert!(sum(&tallies, "calm", |x| &x.ok) > 500);
    for p in proxies.into_iter().flatten() {
        p.shutdown().await;
    }
}

/// A store that asks for a password: `store_password_file` supplies it (first line), and a
/// wrong one leaves the proxy on the static split, counting errors, never failing requests.
#[tokio::test]
async fn the_store_password_comes_from_a_file() {
    if redis_support::available().is_none() {
        return;
    }
    let redis = RedisServer::start_with_password(Some("s3cret-pass"));
    let b = backend("b").await;
    let dir = std::env::temp_dir().join(format!("spillway-fleet-pw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good");
    let bad = dir.join("bad");
    std::fs::write(&good, "s3cret-pass\n").unwrap();
    std::fs::write(&bad, "wrong\n").unwrap();
    let with_file = |f: &std::path::Path| {
        format!(
            "{}store_password_file = \"{}\"\n",
            config(b.addr, &redis.url()),
            f.display()
        )
        .replace("lease_interval_ms = 500\n", "lease_interval_ms = 100\n")
    };
    let ok = proxy_toml(&with_file(&good)).await;
    let refused = proxy_toml(&with_file(&bad)).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let lease = ok
        .state
        .status()
        .quota_lease
        .expect("a store is configured");
    assert_eq!(lease.mode, LeaseMode::Leased, "{lease:?}");
    assert!(
        !format!("{lease:?}").contains("s3cret"),
        "the password is not shown"
    );
    let lease = refused
        .state
        .status()
        .quota_lease
        .expect("a store is configured");
    assert_eq!(lease.mode, LeaseMode::Static, "{lease:?}");
    assert!(lease.errors > 0 && lease.last_error.is_some(), "{lease:?}");
    // Its requests are still served, under the static split (100 / 3 per second, burst 1 s).
    let c = client();
    let h = [
        ("x-spillway-customer", "acme"),
        ("x-spillway-criticality", "CRITICAL"),
    ];
    for _ in 0..5 {
        assert_eq!(proxy_support::get(&c, refused.addr, "/", &h).await.0, 200);
    }
    assert!(redis.calls("evalsha") > 0);
    ok.shutdown().await;
    refused.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
