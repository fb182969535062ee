//! The dashboard through the real admin listener: embedded pages, the series API fed by the
//! sampler from traffic through the proxy, the calculator API, access rules.

#[path = "admin_support/mod.rs"]
mod admin_support;

use std::time::{Duration, Instant};

use admin_support::{stack, upstream, Stack, TOKEN};
use http::{Method, StatusCode};
use serde_json::Value;
use spillway_proxy::admin::AdminConfig;
use spillway_proxy::dashboard::assets::ASSETS;

fn config(up: std::net::SocketAddr) -> String {
    format!(
        r#"
[upstream]
addresses = ["{up}"]

[classify]
trusted = ["127.0.0.0/8"]

[[routes]]
name = "api"
path = "/"
[routes.degrade]
threshold = 0.9
body = "degraded"
"#
    )
}

/// Polls `/api/series` until a sample satisfies `pred` (the sampler runs once a second), for
/// at most 15 s.
async fn wait_sample(s: &Stack, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        let r = s.admin_get("/api/series?since=0").await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        let v = r.json();
        if let Some(hit) = v["samples"]
            .as_array()
            .and_then(|a| a.iter().rev().find(|x| pred(x)))
        {
            return hit.clone();
        }
        assert!(
            Instant::now() < until,
            "no sample with {what} within 15 s: {v}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_are_embedded_self_contained_and_only_for_browsers_at_root() {
    let up = upstream().await;
    let s = stack(&config(up.addr), AdminConfig::default()).await;
    let html = s
        .send(
            s.admin,
            Method::GET,
            "/",
            &[("accept", "text/html,*/*")],
            "",
        )
        .await;
    assert_eq!(html.status, StatusCode::OK);
    assert!(html.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    assert!(html.text.contains("/assets/dashboard.js"), "{}", html.text);
    assert!(html.headers.contains_key("content-security-policy"));
    // curl keeps the admin API's plain-text index.
    let plain = s.admin_get("/").await;
    assert!(plain.text.contains("/metrics"), "{}", plain.text);
    assert!(!plain.text.contains("<html"), "{}", plain.text);

    for a in ASSETS {
        let r = s
            .send(s.admin, Method::GET, a.path, &[("accept", "text/html")], "")
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", a.path);
        assert_eq!(r.headers["content-type"], a.content_type, "{}", a.path);
        // No CDN, no remote fonts: the machine may be offline.
        for remote in ["http://", "https://", "//cdn", "@import"] {
            assert!(!r.text.contains(remote), "{} refers to {remote}", a.path);
        }
        // Every script/style a page refers to is one we serve.
        for part in r.text.split("\"/assets/").skip(1) {
            let name = part.split('"').next().unwrap_or("");
            let path = format!("/assets/{name}");
            assert!(
                ASSETS.iter().any(|x| x.path == path),
                "{} refers to {path}, which is not embedded",
                a.path
            );
        }
    }
    let missing = s.admin_get("/assets/nope.js").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert!(missing.json()["error"]
        .as_str()
        .unwrap()
        .contains("/assets/nope.js"));
    let post = s.admin_post("/api/series", "", None).await;
    assert_eq!(post.status, StatusCode::METHOD_NOT_ALLOWED);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn series_follows_traffic_and_the_degradation_switch() {
    let up = upstream().await;
    let s = stack(&config(up.addr), AdminConfig::default()).await;
    let first = wait_sample(&s, "any sample", |_| true).await;
    assert_eq!(first["degradation_all_off"], false);
    assert!(first["limit"].as_u64().unwrap() >= 1, "{first}");

    // Send traffic until a sample shows it (bounded: at most 15 s of 20 requests at a time).
    let until = Instant::now() + Duration::from_secs(15);
    let busy = loop {
        for _ in 0..20 {
            let r = s
                .get_proxy("/x", &[("x-spillway-criticality", "SHEDDABLE")])
                .await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        }
        let v = s.admin_get("/api/series?since=0").await.json();
        let hit = v["samples"].as_array().and_then(|a| {
            a.iter()
                .find(|x| x["offered"].as_f64().unwrap_or(0.0) > 0.0)
                .cloned()
        });
        if let Some(h) = hit {
            break h;
        }
        assert!(
            Instant::now() < until,
            "traffic never showed in a sample: {v}"
        );
    };
    assert!(
        busy["offered_by_criticality"][0].as_f64().unwrap() > 0.0,
        "{busy}"
    );
    assert!(busy["admitted"].as_f64().unwrap() > 0.0, "{busy}");
    assert!(busy["goodput"].as_f64().unwrap() > 0.0, "{busy}");
    assert_eq!(busy["routes"][0]["name"], "api");
    assert_eq!(busy["routes"][0]["configured"], true);

    // `since` returns only newer samples.
    let t = busy["t"].as_u64().unwrap();
    let newer = s.admin_get(&format!("/api/series?since={t}")).await.json();
    for x in newer["samples"].as_array().unwrap() {
        assert!(x["t"].as_u64().unwrap() > t);
    }
    let bad = s.admin_get("/api/series?since=yesterday").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.json()["field"], "since");

    let r = s
        .admin_post("/degradation", r#"{"enabled": false}"#, None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let off = wait_sample(&s, "degradation off", |x| x["degradation_all_off"] == true).await;
    assert_eq!(off["routes"][0]["enabled"], false, "{off}");
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calc_api_gives_the_reference_figures_and_names_bad_fields() {
    let up = upstream().await;
    let s = stack(&config(up.addr), AdminConfig::default()).await;
    for (workers, want) in [(1, 0.36), (40, 0.004_116)] {
        let r = s
            .admin_get(&format!(
                "/api/calc?service_time_ms=40&workers={workers}&utilisation=0.9"
            ))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        let v = r.json();
        let wait = v["plan"]["without_shedding"]["mean_wait_secs"]
            .as_f64()
            .unwrap();
        assert!((wait - want).abs() < 5e-6, "{workers} workers: {wait}");
        assert!(v["curves"].as_array().unwrap().len() >= 6);
    }
    let r = s
        .admin_get("/api/calc?service_time_ms=40&workers=0&utilisation=0.9")
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json()["field"], "workers", "{}", r.text);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_protected_reads_the_data_needs_the_token_but_the_pages_do_not() {
    let up = upstream().await;
    let admin = AdminConfig {
        token: Some(TOKEN.into()),
        protect_reads: true,
        ..AdminConfig::default()
    };
    let s = stack(&config(up.addr), admin).await;
    let page = s
        .send(s.admin, Method::GET, "/assets/calc.html", &[], "")
        .await;
    assert_eq!(page.status, StatusCode::OK);
    let denied = s.admin_get("/api/series").await;
    assert_eq!(denied.status, StatusCode::UNAUTHORIZED, "{}", denied.text);
    let auth = format!("Bearer {TOKEN}");
    let ok = s
        .send(
            s.admin,
            Method::GET,
            "/api/series",
            &[("authorization", &auth)],
            "",
        )
        .await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.text);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_api_says_there_is_no_shared_store() {
    let up = upstream().await;
    let s = stack(&config(up.addr), AdminConfig::default()).await;
    let v = s.admin_get("/api/fleet").await;
    assert_eq!(v.status, StatusCode::OK, "{}", v.text);
    let v = v.json();
    // No store: the static split, and fleet controls refused (the page says both).
    assert!(v["quota_lease"].is_null(), "{v}");
    assert_eq!(v["fleet_controls"]["store"], false, "{v}");
    assert_eq!(
        v["fleet_controls"]["instance"],
        s.state.fleet_controls().instance(),
        "{v}"
    );
    assert_eq!(
        v["fleet_controls"]["effective"]["retries_enabled"], true,
        "{v}"
    );
    s.shutdown().await;
}
