//! Each incident control, set through the admin API over loopback, changes what the proxy's
//! data path does: shed-below, admit-percent (bounded counts), exercise-degraded together with
//! the degradation off switch, and retries off.

mod admin_support;

use std::sync::atomic::Ordering;

use admin_support::{dead_addr, stack, upstream};
use http::StatusCode;
use spillway_proxy::admin::AdminConfig;

/// Routes: `/batch/` is SHEDDABLE, `/search` has a static degraded mode, the rest CRITICAL.
/// Loopback is trusted, so tests may send `x-spillway-criticality`.
fn config(upstreams: &[std::net::SocketAddr], ejection: u32) -> String {
    let list: Vec<String> = upstreams.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        r#"
[upstream]
addresses = [{}]
[upstream.ejection]
consecutive_failures = {ejection}

[classify]
trusted = ["127.0.0.0/8"]

[[routes]]
name = "batch"
path = "/batch/"
criticality = "SHEDDABLE"

[[routes]]
name = "search"
path = "/search"
[routes.degrade]
threshold = 5.0
body = "degraded:cached"

[[routes]]
name = "api"
path = "/"
"#,
        list.join(", ")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shed_below_refuses_lower_criticalities_with_dont_retry() {
    let up = upstream().await;
    let s = stack(&config(&[up.addr], 5), AdminConfig::default()).await;
    assert_eq!(s.get_proxy("/batch/1", &[]).await.status, StatusCode::OK);

    s.control(
        "/controls/shed-below",
        r#"{"criticality": "SHEDDABLE_PLUS"}"#,
    )
    .await;
    let r = s.get_proxy("/batch/2", &[]).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.text);
    assert_eq!(r.headers["x-spillway-dont-retry"], "1", "{:?}", r.headers);
    assert!(
        r.text.contains("SHEDDABLE_PLUS"),
        "body names the cut: {}",
        r.text
    );
    // SHEDDABLE_PLUS and above pass; the header is honoured from trusted loopback.
    for c in ["SHEDDABLE_PLUS", "CRITICAL", "CRITICAL_PLUS"] {
        let r = s
            .get_proxy("/api/x", &[("x-spillway-criticality", c)])
            .await;
        assert_eq!(r.status, StatusCode::OK, "{c}: {}", r.text);
    }
    let r = s
        .get_proxy("/api/x", &[("x-spillway-criticality", "SHEDDABLE")])
        .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);

    // One level up sheds SHEDDABLE_PLUS too; CRITICAL_PLUS is never shed by this control.
    s.control(
        "/controls/shed-below",
        r#"{"criticality": "CRITICAL_PLUS"}"#,
    )
    .await;
    assert_eq!(
        s.get_proxy("/api/x", &[]).await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let r = s
        .get_proxy("/api/x", &[("x-spillway-criticality", "CRITICAL_PLUS")])
        .await;
    assert_eq!(r.status, StatusCode::OK);
    // Health checks always pass.
    let r = s.get_proxy("/healthz", &[]).await;
    assert_ne!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.text);

    s.control("/controls/shed-below", r#"{"criticality": "off"}"#)
        .await;
    assert_eq!(s.get_proxy("/batch/3", &[]).await.status, StatusCode::OK);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admit_percent_passes_about_that_share_and_ramps_back() {
    let up = upstream().await;
    let s = stack(&config(&[up.addr], 5), AdminConfig::default()).await;
    s.control("/controls/admit-percent", r#"{"percent": 10}"#)
        .await;
    const N: usize = 400;
    let mut passed = 0;
    for i in 0..N {
        let r = s.get_proxy(&format!("/api/{i}"), &[]).await;
        match r.status {
            StatusCode::OK => passed += 1,
            StatusCode::SERVICE_UNAVAILABLE => {
                assert_eq!(r.headers["x-spillway-dont-retry"], "1");
            }
            other => panic!("unexpected {other}: {}", r.text),
        }
    }
    // Binomial(400, 0.1): mean 40, sd 6; [15, 70] is more than 4 sd either side.
    assert!((15..=70).contains(&passed), "{passed} of {N} passed at 10%");
    assert_eq!(
        up.hits.load(Ordering::Relaxed) as usize,
        passed,
        "refused never reach upstream"
    );

    // Exempting CRITICAL_PLUS lets all of it through, even at 0%.
    s.control(
        "/controls/admit-percent",
        r#"{"percent": 0, "exempt_from": "CRITICAL_PLUS"}"#,
    )
    .await;
    for _ in 0..20 {
        let ok = s
            .get_proxy("/api/x", &[("x-spillway-criticality", "CRITICAL_PLUS")])
            .await;
        assert_eq!(ok.status, StatusCode::OK);
        let no = s.get_proxy("/api/x", &[]).await;
        assert_eq!(no.status, StatusCode::SERVICE_UNAVAILABLE);
    }

    // A 1 ms ramp from 0%: finished by the time the next request arrives.
    let v = s
        .control("/controls/admit-percent", r#"{"ramp_seconds": 0.001}"#)
        .await;
    assert_eq!(v["admit_percent"]["from_percent"], 0.0);
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    for _ in 0..20 {
        assert_eq!(s.get_proxy("/api/x", &[]).await.status, StatusCode::OK);
    }
    let v = s.admin_get("/controls").await.json();
    assert_eq!(v["admit_percent"]["complete"], true, "{v}");
    assert_eq!(v["admit_percent"]["current_percent"], 100.0, "{v}");
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exercise_degraded_and_the_off_switch() {
    let up = upstream().await;
    let s = stack(&config(&[up.addr], 5), AdminConfig::default()).await;
    // Utilisation is far below the route's threshold: nothing degrades by itself.
    assert_eq!(s.get_proxy("/search", &[]).await.text, "upstream:/search");

    // Exercise the degraded path on every request of routes that have one.
    s.control("/controls/exercise-degraded", r#"{"fraction": 1}"#)
        .await;
    let r = s.get_proxy("/search", &[]).await;
    assert_eq!(r.text, "degraded:cached");
    assert_eq!(
        s.get_proxy("/api/x", &[]).await.text,
        "upstream:/api/x",
        "routes without a degraded mode are untouched"
    );

    // The off switch wins over exercising.
    let v = s
        .control("/degradation", r#"{"route": "search", "enabled": false}"#)
        .await;
    let search = v["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "search")
        .cloned()
        .unwrap();
    assert_eq!(search["degradation_enabled"], false, "{search}");
    assert_eq!(s.get_proxy("/search", &[]).await.text, "upstream:/search");
    s.control("/degradation?route=search&enabled=true", "")
        .await;
    assert_eq!(s.get_proxy("/search", &[]).await.text, "degraded:cached");
    // The switch for all routes.
    s.control("/degradation", r#"{"enabled": false}"#).await;
    assert_eq!(s.get_proxy("/search", &[]).await.text, "upstream:/search");
    s.control("/degradation", r#"{"enabled": true}"#).await;

    // A small fraction: roughly that share, bounded.
    s.control("/controls/exercise-degraded", r#"{"fraction": 0.1}"#)
        .await;
    let mut degraded = 0;
    for _ in 0..300 {
        if s.get_proxy("/search", &[]).await.text == "degraded:cached" {
            degraded += 1;
        }
    }
    // Binomial(300, 0.1): mean 30, sd 5.2.
    assert!(
        (8..=60).contains(&degraded),
        "{degraded} of 300 degraded at 10%"
    );
    let st = s.admin_get("/status").await.json();
    assert!(
        st.to_string().contains("exercise"),
        "exercised count in /status: {st}"
    );
    s.shutdown().await;
}

/// Connection failures to the dead task counted so far.
fn connect_faults(s: &admin_support::Stack) -> u64 {
    s.state
        .status()
        .faults
        .0
        .get("upstream_connect")
        .copied()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_off_stops_the_proxy_retrying_a_dead_task() {
    // One dead task, one live; ejection off. Balancing learns to avoid a failing task, so each
    // half of the test starts from a fresh proxy whose first picks include the dead task.
    let up = upstream().await;
    let dead = dead_addr().await;

    // Retries on (the default): the dead task is tried, yet every request succeeds elsewhere.
    let s = stack(&config(&[dead, up.addr], 0), AdminConfig::default()).await;
    for i in 0..40 {
        let r = s.get_proxy(&format!("/api/{i}"), &[]).await;
        assert_eq!(r.status, StatusCode::OK, "retries on: {}", r.text);
    }
    assert!(
        connect_faults(&s) > 0,
        "p2c never picked the dead task in 40 requests"
    );
    s.shutdown().await;

    // Retries off: the first request that lands on the dead task fails with 502.
    let s = stack(&config(&[dead, up.addr], 0), AdminConfig::default()).await;
    let v = s
        .control("/controls/retries", r#"{"enabled": false}"#)
        .await;
    assert_eq!(v["retries_enabled"], false);
    let mut saw_502 = false;
    for i in 0..40 {
        let before = connect_faults(&s);
        let r = s.get_proxy(&format!("/api/{i}"), &[]).await;
        if connect_faults(&s) > before {
            assert_eq!(r.status, StatusCode::BAD_GATEWAY, "not retried: {}", r.text);
            saw_502 = true;
            break;
        }
        assert_eq!(r.status, StatusCode::OK);
    }
    assert!(saw_502, "the dead task was not picked in 40 requests");
    s.shutdown().await;
}
