//! The service's own reports (ORCA utilisation, actual cost) and active health checks.

mod proxy_support;

use std::time::{Duration, Instant};

use proxy_support::*;

#[tokio::test]
async fn orca_report_feeds_a_signal_and_cost_header_charges_the_quota() {
    let b = backend("b").await;
    let p = proxy_toml(&format!(
        r#"
[upstream]
addresses = ["{}"]
[classify]
customer_from = "api_key"
api_keys = {{ "k1" = "one", "k2" = "two" }}
[admission.quota]
enforcement = "always"
burst_ms = 1000
customers = [["one", {{ per_criticality = [10.0, 10.0, 10.0, 10.0] }}], ["two", {{ per_criticality = [10.0, 10.0, 10.0, 10.0] }}]]
"#,
        b.addr
    ))
    .await;
    let c = client();
    let served_before_429 = |key: &'static str, path: &'static str| {
        let c = c.clone();
        let addr = p.addr;
        async move {
            let mut n = 0;
            for _ in 0..20 {
                match get(&c, addr, path, &[("x-api-key", key)]).await.0 {
                    200 => n += 1,
                    429 => return n,
                    s => panic!("unexpected {s}"),
                }
            }
            n
        }
    };
    // Estimated cost 1 per request: about 10 fit in the 1 s burst of a 10/s quota.
    let plain = served_before_429("k1", "/").await;
    // The service reports cost 5 per request: the same quota holds about 2.
    let reported = served_before_429("k2", "/report").await;
    assert!(plain >= 8, "plain={plain}");
    assert!(reported <= 4, "reported={reported}");
    // The signal's mean is recomputed at most once per refresh: read after one has passed.
    tokio::time::sleep(spillway_proxy::upstream::orca::REFRESH * 2).await;
    let st = p.state.status();
    assert!((st.upstreams[0].orca_utilisation - 0.7).abs() < 1e-9);
    let orca = st
        .admission
        .signals
        .iter()
        .find(|(n, _)| n == "upstream_orca")
        .expect("ORCA signal registered");
    assert!((orca.1 - 0.7).abs() < 1e-9, "{orca:?}");
}

#[tokio::test]
async fn ejected_task_is_readmitted_by_active_health_check() {
    let a = backend("a").await;
    let b = backend("b").await;
    let p = proxy_toml(&format!(
        r#"
[upstream]
addresses = ["{}", "{}"]
[upstream.retry]
max_attempts = 1
[upstream.ejection]
consecutive_failures = 3
base_ms = 30000
[upstream.health_check]
enabled = true
min_interval_ms = 50
max_interval_ms = 200
"#,
        a.addr, b.addr
    ))
    .await;
    let c = client();
    for _ in 0..10 {
        get(&c, p.addr, "/busy", &[]).await;
    }
    let st = p.state.status();
    let times: u32 = st.upstreams.iter().map(|u| u.times_ejected).sum();
    assert!(times >= 1, "a task was ejected: {:?}", st.upstreams);
    // Ejection lasts 30 s; the health check (every 200 ms for an idle task) ends it sooner.
    let start = Instant::now();
    loop {
        let st = p.state.status();
        if st.upstreams.iter().all(|u| !u.ejected) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "not readmitted: {:?}",
            st.upstreams
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn host_cpu_signal_is_sampled() {
    let b = backend("b").await;
    let p = proxy_toml(&format!(
        "[upstream]\naddresses = [\"{}\"]\n[signals]\nhost_cpu = true\n",
        b.addr
    ))
    .await;
    // Burn some CPU so the host is measurably busy, then read the signal.
    let spin = std::thread::spawn(|| {
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(700) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        x
    });
    tokio::time::sleep(Duration::from_millis(600)).await;
    let _ = spin.join();
    let st = p.state.status();
    let host = st
        .admission
        .signals
        .iter()
        .find(|(n, _)| n == "host_cpu")
        .expect("host_cpu registered");
    assert!(host.1 > 0.0 && host.1 <= 1.0, "{host:?}");
}
