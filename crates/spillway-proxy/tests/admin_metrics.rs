//! `/metrics` and `/status` over loopback after real requests went through the proxy: the
//! Prometheus text carries the tower layer's metrics and offered demand (which counts shed
//! requests too, so an autoscaler sees the demand that shedding hides).

mod admin_support;

use admin_support::{metrics, sample, stack, upstream};
use http::StatusCode;
use spillway_proxy::admin::AdminConfig;

fn config(upstream: std::net::SocketAddr) -> String {
    format!(
        r#"
[upstream]
addresses = ["{upstream}"]

[[routes]]
name = "batch"
path = "/batch/"
criticality = "SHEDDABLE"
cost = 2.5

[[routes]]
name = "api"
path = "/"
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_status_after_traffic() {
    let up = upstream().await;
    let s = stack(&config(up.addr), AdminConfig::default()).await;

    for i in 0..20 {
        let r = s.get_proxy(&format!("/api/{i}"), &[]).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        assert_eq!(r.text, format!("upstream:/api/{i}"));
    }
    // Shed every SHEDDABLE request: they are refused, yet still counted as offered demand.
    s.control(
        "/controls/shed-below",
        r#"{"criticality": "SHEDDABLE_PLUS"}"#,
    )
    .await;
    for _ in 0..8 {
        let r = s.get_proxy("/batch/job", &[]).await;
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.text);
    }
    assert_eq!(up.hits.load(std::sync::atomic::Ordering::Relaxed), 20);

    let m = s.admin_get("/metrics").await;
    assert_eq!(m.status, StatusCode::OK);
    assert!(
        m.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4"),
        "{:?}",
        m.headers
    );
    let text = &m.text;
    // Every non-comment line is `name{labels} value` or `name value`.
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let value = line.rsplit(' ').next().unwrap();
        assert!(value.parse::<f64>().is_ok(), "not a sample line: {line}");
    }
    let admitted = sample(text, "spillway_requests_admitted_total", &[]).unwrap_or(0.0);
    assert!(admitted >= 20.0, "admitted {admitted}\n{text}");
    let shed = sample(
        text,
        "spillway_requests_shed_total",
        &[("reason", "incident_shed")],
    )
    .unwrap_or(0.0);
    assert!(shed >= 8.0, "shed {shed}\n{text}");
    // Gauges sampled at scrape time from the controller and the upstream pool.
    assert!(
        sample(text, "spillway_concurrency_limit_requests", &[]).unwrap() >= 1.0,
        "{text}"
    );
    assert_eq!(
        sample(text, "spillway_in_flight_requests", &[]),
        Some(0.0),
        "{text}"
    );
    assert!(
        sample(text, "spillway_queued_requests", &[]).is_some(),
        "{text}"
    );
    assert!(
        sample(text, "spillway_utilisation_ratio", &[]).is_some(),
        "{text}"
    );
    let dest = up.addr.to_string();
    assert_eq!(
        sample(
            text,
            "spillway_throttle_probability_ratio",
            &[("destination", &dest)]
        ),
        Some(0.0),
        "{text}"
    );
    // Offered demand: 8 shed SHEDDABLE requests at cost 2.5 each are in it.
    let offered = sample(
        text,
        "spillway_offered_requests_total",
        &[("criticality", "SHEDDABLE")],
    )
    .unwrap();
    assert!(offered >= 8.0, "{text}");
    let cost = sample(
        text,
        "spillway_offered_cost_total",
        &[("criticality", "SHEDDABLE")],
    )
    .unwrap();
    assert!(cost >= 20.0, "8 × 2.5 = 20 cost units offered, got {cost}");
    let critical = sample(
        text,
        "spillway_offered_requests_total",
        &[("criticality", "CRITICAL")],
    )
    .unwrap();
    assert!(critical >= 20.0, "{text}");

    let st = s.admin_get("/status").await;
    assert_eq!(st.status, StatusCode::OK);
    let v = st.json();
    let adm = &v["admission"];
    for key in ["limit", "in_flight", "queued", "utilisation", "algorithm"] {
        assert!(adm.get(key).is_some(), "admission.{key} missing: {v}");
    }
    assert!(adm["limit"].as_u64().unwrap() >= 1);
    assert_eq!(v["upstreams"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["incident_controls"]["shed_below"], "SHEDDABLE_PLUS");
    assert!(v["offered_demand"]["SHEDDABLE"]["cost"].as_f64().unwrap() >= 20.0);
    let routes: Vec<_> = v["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(routes, ["batch", "api"]);

    s.shutdown().await;
}

/// An upstream that answers the first request on each connection (keep-alive) and closes the
/// connection under the second without answering: every reuse meets the keep-alive race.
async fn closes_under_the_second_request() -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut b = [0u8; 1024];
                for n in 0..2 {
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut b).await {
                            Ok(0) | Err(_) => return,
                            Ok(k) => buf.extend_from_slice(&b[..k]),
                        }
                    }
                    buf.clear();
                    if n == 0 {
                        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if s.write_all(ok).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_races_are_counted_per_upstream() {
    let up = closes_under_the_second_request().await;
    let s = stack(
        &format!("[upstream]\naddresses = [\"{up}\"]\n"),
        AdminConfig::default(),
    )
    .await;
    for i in 0..6 {
        let r = s.get_proxy("/", &[]).await;
        assert_eq!(
            (r.status, r.text.as_str()),
            (StatusCode::OK, "ok"),
            "GET {i}"
        );
    }
    let m = s.admin_get("/metrics").await;
    let dest = up.to_string();
    let races = sample(
        &m.text,
        "spillway_proxy_upstream_keepalive_races_total",
        &[("upstream", &dest)],
    )
    .unwrap_or(0.0);
    // Every GET after the first on a thread's connection met the race and was sent again.
    assert!(races >= 1.0, "races {races}\n{}", m.text);
    s.shutdown().await;
}

/// A loopback upstream that answers `200 ok` to each request `after` it arrives.
async fn answers_after(after: std::time::Duration) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                loop {
                    let Ok(n) = s.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        buf.clear();
                        tokio::time::sleep(after).await;
                        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if s.write_all(ok).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_of_abandoned_requests_are_counted() {
    let up = answers_after(std::time::Duration::from_millis(300)).await;
    let s = stack(
        &format!("[upstream]\naddresses = [\"{up}\"]\n"),
        AdminConfig::default(),
    )
    .await;
    let held = |m: &str| sample(m, "spillway_proxy_abandoned_held_requests", &[]);
    let ended =
        |m: &str, end: &str| sample(m, "spillway_proxy_abandoned_holds_total", &[("end", end)]);
    let m = metrics(&s).await;
    assert_eq!(held(&m), Some(0.0), "{m}");
    for end in ["answered", "failed", "timed_out"] {
        assert_eq!(ended(&m, end), Some(0.0), "{end}: {m}");
    }
    // The caller's 50 ms run out: answered 504 at once, the hold counted while the upstream works.
    let r = s.get_proxy("/", &[("x-spillway-deadline-ms", "50")]).await;
    assert_eq!(r.status, StatusCode::GATEWAY_TIMEOUT, "{}", r.text);
    assert_eq!(held(&metrics(&s).await), Some(1.0));
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let m = metrics(&s).await;
        if ended(&m, "answered") == Some(1.0) {
            assert_eq!(held(&m), Some(0.0), "{m}");
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "the hold never ended: {m}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    s.shutdown().await;
}
