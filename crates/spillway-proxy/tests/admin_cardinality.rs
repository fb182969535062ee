//! Bounded label cardinality through a real proxy: thousands of distinct trusted customers keep
//! `/metrics` small, the first `admin.max_customer_labels` keep series of their own, every other
//! request is counted under `customer="other"`, and no request goes uncounted.
//!
//! The 100,000-customer run with its RSS figure is `#[ignore]`d (about a minute in a debug
//! build on a busy machine):
//! `cargo test -p spillway-proxy --test admin_cardinality -- --ignored --nocapture`.

mod admin_support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Instant;

use admin_support::{metrics, rss_kib, sample, stack, upstream, REQUEST_TIMEOUT};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use spillway_proxy::admin::AdminConfig;

/// The metrics recorder is the process's: the two tests must not mix their counts.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const ADMITTED: &str = "spillway_requests_admitted_total";
const SHED: &str = "spillway_requests_shed_total";
const ONE_MB: usize = 1 << 20;

fn config(up: SocketAddr) -> String {
    format!(
        "[upstream]\naddresses = [\"{up}\"]\n\n[classify]\ntrusted = [\"127.0.0.0/8\"]\n\
         customer_from = \"header\"\n\n[admin]\nmax_customer_labels = 100\n\n\
         [[routes]]\nname = \"api\"\npath = \"/\"\n"
    )
}

/// Sends `GET /x` once per customer `{prefix}{i}` for `i` in `range`, `concurrency` at a time,
/// each task on its own keep-alive connection. Every answer must be 200, or 503 when the
/// adaptive limit sheds on a busy machine (counted too); returns how many were shed.
async fn send_customers(
    proxy: SocketAddr,
    prefix: &'static str,
    range: std::ops::Range<usize>,
    concurrency: usize,
) -> usize {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut tasks = Vec::new();
    for t in 0..concurrency {
        let client = client.clone();
        let range = range.clone();
        tasks.push(tokio::spawn(async move {
            let mut shed = 0;
            for i in range.skip(t).step_by(concurrency) {
                let req = Request::get(format!("http://{proxy}/x"))
                    .header("x-spillway-customer", format!("{prefix}{i}"))
                    .body(Full::new(Bytes::new()))
                    .expect("request");
                let resp = tokio::time::timeout(REQUEST_TIMEOUT, client.request(req))
                    .await
                    .expect("answer in time")
                    .expect("answer");
                let status = resp.status();
                assert!(
                    status == StatusCode::OK || status == StatusCode::SERVICE_UNAVAILABLE,
                    "customer {prefix}{i}: {status}"
                );
                shed += usize::from(status == StatusCode::SERVICE_UNAVAILABLE);
                let _ = resp.into_body().collect().await.expect("body");
            }
            shed
        }));
    }
    let mut shed = 0;
    for t in tasks {
        shed += t.await.expect("sender did not panic");
    }
    shed
}

/// The distinct `customer` label values of the admitted and shed counters starting with
/// `prefix` (the recorder is the process's: other tests' customers are there too).
fn customers(metrics: &str, prefix: &str) -> BTreeSet<String> {
    metrics
        .lines()
        .filter(|l| l.starts_with(ADMITTED) || l.starts_with(SHED))
        .filter_map(|l| l.split("customer=\"").nth(1))
        .filter_map(|rest| rest.split('"').next())
        .filter(|c| c.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

/// Requests counted for `customer` (admitted or shed), or for all with `None`.
fn counted(metrics: &str, customer: Option<&str>) -> f64 {
    let want: Vec<(&str, &str)> = customer.map(|c| ("customer", c)).into_iter().collect();
    sample(metrics, ADMITTED, &want).unwrap_or(0.0) + sample(metrics, SHED, &want).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_customers_keep_metrics_small_and_every_request_counted() {
    let _one = SERIAL.lock().await;
    const N: usize = 3_000;
    let up = upstream().await;
    let s = stack(&config(up.addr), AdminConfig::default()).await;
    let before = metrics(&s).await;
    let shed = send_customers(s.proxy_addr(), "t", 0..N, 8).await;

    let text = metrics(&s).await;
    eprintln!(
        "{N} customers ({shed} shed): /metrics {} bytes, {} lines",
        text.len(),
        text.lines().count()
    );
    assert!(text.len() < ONE_MB, "/metrics is {} bytes", text.len());
    // The configured default customer holds the first of the 100 places, callers the other
    // 99; everyone else is other.
    let seen = customers(&text, "t");
    assert_eq!(seen.len(), 99, "{seen:?}");
    for c in &seen {
        assert_eq!(counted(&text, Some(c)), 1.0, "{c} sent one request");
    }
    // Every request is counted once, under its customer or other; shed ones as shed.
    let all = counted(&text, None) - counted(&before, None);
    assert_eq!(all as usize, N, "no request lost or counted twice");
    let shed_counted =
        sample(&text, SHED, &[]).unwrap_or(0.0) - sample(&before, SHED, &[]).unwrap_or(0.0);
    assert_eq!(shed_counted as usize, shed);
    let other = counted(&text, Some("other"));
    let other_added = other - counted(&before, Some("other"));
    assert_eq!(
        other_added as usize,
        N - seen.len(),
        "every customer past the cap is in other"
    );
    // A customer with a series keeps it: more of its traffic lands there, not in other.
    let kept = seen.first().expect("a caller with a series").clone();
    let r = s.get_proxy("/x", &[("x-spillway-customer", &kept)]).await;
    assert!(r.status == StatusCode::OK || r.status == StatusCode::SERVICE_UNAVAILABLE);
    let text = metrics(&s).await;
    assert_eq!(counted(&text, Some(&kept)), 2.0, "{kept} kept its series");
    assert_eq!(counted(&text, Some("other")), other, "other did not move");
    // The dashboard reads the same capped series.
    let series = s.admin_get("/api/series?since=0").await;
    assert_eq!(series.status, StatusCode::OK);
    s.shutdown().await;
}

/// Every criticality, as the header spells them.
const CRITICALITIES: [&str; 4] = ["CRITICAL_PLUS", "CRITICAL", "SHEDDABLE_PLUS", "SHEDDABLE"];

/// Customers that each use three routes at all four criticalities: the per-customer series
/// multiply by twelve, and `/metrics` stays under 1 MB because only the counters are per
/// customer (a histogram, ~17 series, is per operation and criticality).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn customers_on_several_routes_at_every_criticality_keep_metrics_small() {
    let _one = SERIAL.lock().await;
    const N: usize = 300;
    let up = upstream().await;
    let config = config(up.addr).replace(
        "[[routes]]\nname = \"api\"\npath = \"/\"\n",
        "[[routes]]\nname = \"ra\"\npath = \"/a\"\n[[routes]]\nname = \"rb\"\npath = \"/b\"\n\
         [[routes]]\nname = \"rc\"\npath = \"/c\"\n",
    );
    let s = stack(&config, AdminConfig::default()).await;
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let proxy = s.proxy_addr();
    let mut tasks = Vec::new();
    for t in 0..4 {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            for i in (0..N).skip(t).step_by(4) {
                for route in ["a", "b", "c"] {
                    for c in CRITICALITIES {
                        let req = Request::get(format!("http://{proxy}/{route}/x"))
                            .header("x-spillway-customer", format!("m{i}"))
                            .header("x-spillway-criticality", c)
                            .body(Full::new(Bytes::new()))
                            .expect("request");
                        let resp = tokio::time::timeout(REQUEST_TIMEOUT, client.request(req))
                            .await
                            .expect("answer in time")
                            .expect("answer");
                        let _ = resp.into_body().collect().await.expect("body");
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("sender did not panic");
    }
    let text = metrics(&s).await;
    eprintln!(
        "{N} customers x 3 routes x 4 criticalities: /metrics {} bytes, {} lines",
        text.len(),
        text.lines().count()
    );
    assert!(text.len() < ONE_MB, "/metrics is {} bytes", text.len());
    // The customers kept their per-customer counters at every criticality of every route.
    let seen = customers(&text, "m");
    assert_eq!(seen.len(), 99, "{seen:?}");
    let kept = seen.first().expect("a customer with series");
    for c in CRITICALITIES {
        let want = [("customer", kept.as_str()), ("criticality", c)];
        let n = sample(&text, ADMITTED, &want).unwrap_or(0.0)
            + sample(&text, SHED, &want).unwrap_or(0.0);
        assert_eq!(n, 3.0, "{kept} at {c}: one request per route");
    }
    // The histograms have no customer label.
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("spillway_queue_time_seconds") && l.contains("customer=")),
        "queue-time histograms per customer"
    );
    s.shutdown().await;
}

/// 100,000 distinct customers: `/metrics` under 1 MB and the process's RSS growth (proxy,
/// upstream and client together, so an upper bound for the proxy) under 20 MB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "20-45 s in a debug build; run with --ignored --nocapture for the figures"]
async fn a_hundred_thousand_customers_keep_metrics_and_memory_bounded() {
    let _one = SERIAL.lock().await;
    const N: usize = 100_000;
    let up = upstream().await;
    let s = stack(&config(up.addr), AdminConfig::default()).await;
    let start = metrics(&s).await;
    // Warm up connections, buffers and the allocator with customers that get series, so the
    // measurement is of what the distinct customers add.
    let mut shed = send_customers(s.proxy_addr(), "h", 0..2_000, 16).await;
    let _ = metrics(&s).await;
    let before = rss_kib().expect("VmRSS readable on Linux");
    let started = Instant::now();
    shed += send_customers(s.proxy_addr(), "h", 2_000..2_000 + N, 16).await;
    let took = started.elapsed();
    let text = metrics(&s).await;
    let after = rss_kib().expect("VmRSS readable on Linux");
    let growth_kib = after.saturating_sub(before);
    eprintln!(
        "{N} more distinct customers in {:.1} s ({shed} shed): /metrics {} bytes, {} lines; \
         RSS {before} KiB -> {after} KiB (growth {:.1} MiB)",
        took.as_secs_f64(),
        text.len(),
        text.lines().count(),
        growth_kib as f64 / 1024.0
    );
    assert!(text.len() < ONE_MB, "/metrics is {} bytes", text.len());
    assert_eq!(
        customers(&text, "h").len(),
        99,
        "99 callers, the rest other"
    );
    let all = counted(&text, None) - counted(&start, None);
    assert_eq!(all as usize, N + 2_000, "every request counted once");
    assert!(
        growth_kib < 20 * 1024,
        "RSS grew by {growth_kib} KiB for {N} customers"
    );
    s.shutdown().await;
}
