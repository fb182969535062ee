//! Bounded label *combinations* through a real proxy (issue 29): routes × customers ×
//! criticalities multiply past what the caps on values bound, so each per-request family keeps
//! at most `admin.max_series_per_family` series; the rest are recorded with the customer (then
//! the operation) as `other`, counted in `spillway_label_overflow_total`, and no request goes
//! uncounted.
//!
//! A test binary of its own: the cap is the process's (as the recorder is), and this file sets
//! it low. The worst case the issue names (100 routes × 100 customers × 4 criticalities, with the
//! default cap) is `#[ignore]`d, 40,000 requests through a debug build:
//! `cargo test -p spillway-proxy --test admin_label_combinations -- --ignored --nocapture`.

mod admin_support;

use std::collections::BTreeSet;
use std::net::SocketAddr;

use admin_support::{metrics, rss_kib, sample, stack, upstream, REQUEST_TIMEOUT};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use spillway_proxy::admin::AdminConfig;

/// The cap is the process's: the tests must not run at once.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const ADMITTED: &str = "spillway_requests_admitted_total";
const SHED: &str = "spillway_requests_shed_total";
const QUEUE_TIME: &str = "spillway_queue_time_seconds";
const OVERFLOW: &str = "spillway_label_overflow_total";
const ONE_MB: usize = 1 << 20;
const CRITICALITIES: [&str; 4] = ["CRITICAL_PLUS", "CRITICAL", "SHEDDABLE_PLUS", "SHEDDABLE"];

/// `routes` routes `/r{i}`, customers from a trusted header, then `extra` TOML.
fn config(up: SocketAddr, routes: usize, extra: &str) -> String {
    let mut s = format!(
        "[upstream]\naddresses = [\"{up}\"]\n\n[classify]\ntrusted = [\"127.0.0.0/8\"]\n\
         customer_from = \"header\"\n\n{extra}\n"
    );
    for i in 0..routes {
        s += &format!("[[routes]]\nname = \"r{i}\"\npath = \"/r{i}\"\n");
    }
    s
}

/// One request per route × customer × criticality, 8 at a time; every answer 200 or 503.
async fn send_all(proxy: SocketAddr, routes: usize, customers: usize) {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let all: Vec<(usize, usize, &str)> = (0..routes)
        .flat_map(|r| (0..customers).flat_map(move |c| CRITICALITIES.map(|k| (r, c, k))))
        .collect();
    let all = std::sync::Arc::new(all);
    let mut tasks = Vec::new();
    for t in 0..8 {
        let (client, all) = (client.clone(), std::sync::Arc::clone(&all));
        tasks.push(tokio::spawn(async move {
            for &(r, c, k) in all.iter().skip(t).step_by(8) {
                let req = Request::get(format!("http://{proxy}/r{r}/x"))
                    .header("x-spillway-customer", format!("k{c}"))
                    .header("x-spillway-criticality", k)
                    .body(Full::new(Bytes::new()))
                    .expect("request");
                let resp = tokio::time::timeout(REQUEST_TIMEOUT, client.request(req))
                    .await
                    .expect("answer in time")
                    .expect("answer");
                let status = resp.status();
                assert!(
                    status == StatusCode::OK || status == StatusCode::SERVICE_UNAVAILABLE,
                    "{status}"
                );
                let _ = resp.into_body().collect().await.expect("body");
            }
        }));
    }
    for t in tasks {
        t.await.expect("sender did not panic");
    }
}

/// The distinct label sets of `family`'s samples (a histogram's `_bucket` lines, without `le`).
fn label_sets(metrics: &str, family: &str) -> BTreeSet<String> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.strip_prefix(family)?;
            let rest = rest.strip_prefix("_bucket").unwrap_or(rest);
            let labels = rest.strip_prefix('{')?.split('}').next()?;
            let kept: Vec<&str> = labels
                .split(',')
                .filter(|p| !p.starts_with("le="))
                .collect();
            Some(kept.join(","))
        })
        .collect()
}

/// Requests counted in the admitted and shed families, all label sets together.
fn counted(metrics: &str) -> f64 {
    sample(metrics, ADMITTED, &[]).unwrap_or(0.0) + sample(metrics, SHED, &[]).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_combinations_past_the_cap_fold_into_other_and_every_request_is_counted() {
    let _one = SERIAL.lock().await;
    const ROUTES: usize = 20;
    const CUSTOMERS: usize = 25;
    const CAP: usize = 300;
    let up = upstream().await;
    let extra = format!("[admin]\nmax_series_per_family = {CAP}\n");
    let s = stack(&config(up.addr, ROUTES, &extra), AdminConfig::default()).await;
    let before = metrics(&s).await;
    // Every fixed label value starts at 0, with a HELP line.
    assert!(before.contains(&format!("# HELP {OVERFLOW} ")), "{before}");
    for family in [
        ADMITTED,
        SHED,
        QUEUE_TIME,
        "spillway_request_duration_seconds",
    ] {
        let line = format!("{OVERFLOW}{{family=\"{family}\"}} 0");
        assert!(before.contains(&line), "{line}\n{before}");
    }

    send_all(s.proxy_addr(), ROUTES, CUSTOMERS).await;
    let text = metrics(&s).await;
    let n = ROUTES * CUSTOMERS * CRITICALITIES.len();
    eprintln!(
        "{ROUTES} routes x {CUSTOMERS} customers x 4 criticalities, cap {CAP}: /metrics {} bytes, \
         {} lines",
        text.len(),
        text.lines().count()
    );
    // At most the cap, plus the always-kept (other, other, criticality) label sets.
    let admitted = label_sets(&text, ADMITTED);
    assert!(
        admitted.len() <= CAP + 4,
        "{} admitted label sets",
        admitted.len()
    );
    assert!(admitted.len() >= CAP, "the cap is used before folding");
    // Histograms: 17 series a label set.
    let queue = label_sets(&text, QUEUE_TIME);
    assert!(
        queue.len() <= CAP / 17 + 4,
        "{} queue-time label sets",
        queue.len()
    );
    // Past the cap, new label sets are recorded as (other, other, criticality): every
    // (other, operation) one would need a series the family no longer has.
    for k in CRITICALITIES {
        let l = format!("customer=\"other\",operation=\"other\",criticality=\"{k}\"");
        assert!(admitted.contains(&l), "{l} in {admitted:?}");
    }
    // Every request counted once, under its own labels or coarser ones.
    assert_eq!((counted(&text) - counted(&before)) as usize, n);
    // What was folded is counted: admitted requests beyond the cap, and their queue times.
    let overflow = sample(&text, OVERFLOW, &[("family", ADMITTED)]).unwrap_or(0.0);
    let folded = sample(&text, ADMITTED, &[("customer", "other")]).unwrap_or(0.0);
    assert!(overflow > 0.0);
    assert_eq!(overflow, folded, "every folded admitted request counted");
    assert!(sample(&text, OVERFLOW, &[("family", QUEUE_TIME)]).unwrap_or(0.0) > 0.0);
    // The dashboard reads the same capped series.
    let series = s.admin_get("/api/series?since=0").await;
    assert_eq!(series.status, StatusCode::OK);
    s.shutdown().await;
}

/// The worst case with the default caps: 100 routes × 100 customers × 4
/// criticalities keep `/metrics` under 1 MB and the process's RSS growth (proxy, upstream
/// and client together, so an upper bound for the proxy) under 20 MB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "40,000 requests through a debug build; run with --ignored --nocapture for the figures"]
async fn a_hundred_routes_customers_and_four_criticalities_keep_metrics_under_a_megabyte() {
    let _one = SERIAL.lock().await;
    const ROUTES: usize = 100;
    const CUSTOMERS: usize = 100;
    let up = upstream().await;
    let s = stack(&config(up.addr, ROUTES, ""), AdminConfig::default()).await;
    let before_metrics = metrics(&s).await;
    // Warm up connections, buffers and the allocator on one route.
    send_all(s.proxy_addr(), 1, 25).await;
    let _ = metrics(&s).await;
    let before = rss_kib().expect("VmRSS readable on Linux");
    let started = std::time::Instant::now();
    send_all(s.proxy_addr(), ROUTES, CUSTOMERS).await;
    let took = started.elapsed();
    let text = metrics(&s).await;
    let after = rss_kib().expect("VmRSS readable on Linux");
    let growth_kib = after.saturating_sub(before);
    eprintln!(
        "{ROUTES} routes x {CUSTOMERS} customers x 4 criticalities in {:.1} s: /metrics {} \
         bytes, {} lines, admitted label sets {}, overflow {:?}; RSS {before} KiB -> {after} \
         KiB (growth {:.1} MiB)",
        took.as_secs_f64(),
        text.len(),
        text.lines().count(),
        label_sets(&text, ADMITTED).len(),
        sample(&text, OVERFLOW, &[("family", ADMITTED)]),
        growth_kib as f64 / 1024.0
    );
    assert!(text.len() < ONE_MB, "/metrics is {} bytes", text.len());
    let n = ROUTES * CUSTOMERS * 4 + 25 * 4;
    assert_eq!((counted(&text) - counted(&before_metrics)) as usize, n);
    assert!(growth_kib < 20 * 1024, "RSS grew by {growth_kib} KiB");
    s.shutdown().await;
}
