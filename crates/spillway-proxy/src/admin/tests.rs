//! The admin API's handlers against a `ProxyState` built directly (no sockets): routing, the
//! token, every control endpoint and its errors, degradation, reload, `/config` redaction.

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use spillway_core::Criticality;

use super::*;
use crate::state::ProxyState;

pub(super) const TOKEN: &str = "test-token-0123456789";

const CONFIG: &str = r#"
[upstream]
addresses = ["127.0.0.1:9"]

[classify]
customer_from = "api_key"
api_keys = { "key-very-secret-1" = "acme" }

[[routes]]
name = "search"
path = "/search"
[routes.degrade]
threshold = 0.8
body = "cached results"

[[routes]]
name = "batch"
path = "/batch/"
criticality = "SHEDDABLE"
"#;

fn state() -> Arc<ProxyState> {
    let cfg = crate::config::parse(CONFIG, "test.toml").expect("test config parses");
    ProxyState::new(cfg, "test.toml", None).expect("state builds")
}

fn api_with(state: Arc<ProxyState>, cfg: AdminConfig) -> AdminApi {
    AdminApi::new(state, &cfg).expect("admin config valid")
}

pub(super) fn open_api() -> AdminApi {
    api_with(state(), AdminConfig::default())
}

pub(super) fn token_api(protect_reads: bool) -> AdminApi {
    api_with(
        state(),
        AdminConfig {
            token: Some(TOKEN.into()),
            protect_reads,
            ..AdminConfig::default()
        },
    )
}

pub(super) struct Reply {
    pub(super) status: StatusCode,
    pub(super) headers: http::HeaderMap,
    pub(super) text: String,
}

impl Reply {
    pub(super) fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }
}

pub(super) async fn call(
    api: &AdminApi,
    method: &str,
    uri: &str,
    body: &str,
    token: Option<&str>,
) -> Reply {
    // What curl sends to the default listener; POSTs as a script sends them (not a form).
    let mut b = Request::builder()
        .method(method)
        .uri(uri)
        .header("host", "127.0.0.1:9901");
    if method == "POST" {
        b = b.header(ADMIN_HEADER, "1");
    }
    if let Some(t) = token {
        b = b.header("authorization", format!("Bearer {t}"));
    }
    let req = b.body(Full::new(Bytes::from(body.to_string()))).unwrap();
    let resp = api.handle(req, None).await;
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        headers,
        text: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

pub(super) async fn get(api: &AdminApi, uri: &str) -> Reply {
    call(api, "GET", uri, "", None).await
}

async fn post(api: &AdminApi, uri: &str, body: &str) -> Reply {
    call(api, "POST", uri, body, None).await
}

#[tokio::test]
async fn index_unknown_paths_and_wrong_methods() {
    let api = open_api();
    let r = get(&api, "/").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.text.contains("/controls/admit-percent"), "{}", r.text);
    assert_eq!(get(&api, "/nope").await.status, StatusCode::NOT_FOUND);
    let r = post(&api, "/status", "").await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(r.headers["allow"], "GET");
    let r = get(&api, "/reload").await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(r.headers["allow"], "POST");
    let r = post(&api, "/controls/nope", "").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(r.json()["error"].as_str().unwrap().contains("shed-below"));
}

#[tokio::test]
async fn status_has_admission_routes_controls_and_offered_demand() {
    let api = open_api();
    metrics::record_offered(Criticality::Sheddable, 0.5);
    let r = get(&api, "/status").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.headers["content-type"], "application/json");
    let v = r.json();
    for key in [
        "admission",
        "upstreams",
        "routes",
        "incident_controls",
        "offered_demand",
        "config_origin",
        "reloads",
    ] {
        assert!(v.get(key).is_some(), "missing {key}: {v}");
    }
    assert_eq!(v["incident_controls"]["retries_enabled"], true);
    assert!(
        v["offered_demand"]["SHEDDABLE"]["requests"]
            .as_u64()
            .unwrap()
            >= 1
    );
    let routes: Vec<&str> = v["routes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert!(
        routes.contains(&"search") && routes.contains(&"batch"),
        "{v}"
    );
}

#[tokio::test]
async fn config_is_redacted() {
    let api = open_api();
    let r = get(&api, "/config").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!r.text.contains("key-very-secret-1"), "{}", r.text);
    assert!(!r.text.contains("acme"), "{}", r.text);
    let v = r.json();
    assert_eq!(v["upstream"]["addresses"][0], "127.0.0.1:9");
    assert_eq!(v["classify"]["api_keys"], "<redacted> (1 entries)");
}

#[tokio::test]
async fn token_guards_mutations_and_config_but_not_reads() {
    let api = token_api(false);
    for (m, uri, body) in [
        ("GET", "/config", ""),
        ("POST", "/reload", ""),
        ("POST", "/degradation", r#"{"enabled": false}"#),
        ("POST", "/controls/retries", r#"{"enabled": false}"#),
        ("POST", "/controls/reset", ""),
    ] {
        let r = call(&api, m, uri, body, None).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{m} {uri}");
        assert_eq!(
            r.headers["www-authenticate"],
            "Bearer realm=\"spillway-admin\""
        );
        let r = call(&api, m, uri, body, Some("wrong-token-0123456789")).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{m} {uri} wrong token");
    }
    // Nothing changed without the token.
    assert!(api.state().controls().retries_enabled());
    for uri in ["/metrics", "/status", "/controls", "/"] {
        assert_eq!(get(&api, uri).await.status, StatusCode::OK, "{uri}");
    }
    let r = call(&api, "POST", "/controls/retries", "enabled=x", Some(TOKEN)).await;
    assert_eq!(
        r.status,
        StatusCode::BAD_REQUEST,
        "authorised, then validated"
    );
    let r = call(
        &api,
        "POST",
        "/controls/retries?enabled=false",
        "",
        Some(TOKEN),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(!api.state().controls().retries_enabled());
    assert_eq!(
        call(&api, "GET", "/config", "", Some(TOKEN)).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn protect_reads_guards_everything() {
    let api = token_api(true);
    for uri in ["/metrics", "/status", "/controls", "/config", "/"] {
        assert_eq!(
            get(&api, uri).await.status,
            StatusCode::UNAUTHORIZED,
            "{uri}"
        );
        let r = call(&api, "GET", uri, "", Some(TOKEN)).await;
        assert_eq!(r.status, StatusCode::OK, "{uri}");
    }
}

#[tokio::test]
async fn shed_below_endpoint() {
    let api = open_api();
    let r = post(
        &api,
        "/controls/shed-below",
        r#"{"criticality": "sheddable-plus"}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.json()["shed_below"], "SHEDDABLE_PLUS");
    assert_eq!(
        api.state().controls().shed_below(),
        Some(Criticality::SheddablePlus)
    );
    let r = post(&api, "/controls/shed-below", r#"{"criticality": "urgent"}"#).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let v = r.json();
    assert_eq!(v["field"], "criticality");
    assert!(
        v["accepts"].as_str().unwrap().contains("SHEDDABLE_PLUS"),
        "{v}"
    );
    let r = post(&api, "/controls/shed-below", "").await;
    assert_eq!(r.json()["field"], "criticality", "missing field named");
    let r = post(&api, "/controls/shed-below?criticality=off", "").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json()["shed_below"], Value::Null);
}

#[tokio::test]
async fn admit_percent_endpoint() {
    let api = open_api();
    let r = post(
        &api,
        "/controls/admit-percent",
        r#"{"percent": 1, "exempt_from": "CRITICAL_PLUS"}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let v = r.json();
    assert_eq!(v["admit_percent"]["current_percent"], 1.0);
    assert_eq!(v["admit_percent"]["exempt_from"], "CRITICAL_PLUS");
    // Ramp alone: from the current share, exemption kept.
    let r = post(&api, "/controls/admit-percent", r#"{"ramp_seconds": 600}"#).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let v = r.json();
    assert_eq!(v["admit_percent"]["ramp_seconds"], 600.0);
    assert_eq!(v["admit_percent"]["exempt_from"], "CRITICAL_PLUS");
    assert!((v["admit_percent"]["from_percent"].as_f64().unwrap() - 1.0).abs() < 0.01);

    for (body, field) in [
        (r#"{"percent": 150}"#, "percent"),
        (r#"{"percent": "lots"}"#, "percent"),
        (r#"{"percent": 5, "ramp_seconds": 0}"#, "ramp_seconds"),
        (r#"{"percent": 5, "ramp_seconds": -3}"#, "ramp_seconds"),
        (r#"{"percent": 5, "ramp_seconds": 1e9}"#, "ramp_seconds"),
        (r#"{"percent": 5, "exempt_from": "VIP"}"#, "exempt_from"),
        (
            r#"{"ramp_seconds": 60, "exempt_from": "CRITICAL"}"#,
            "exempt_from",
        ),
        (r#"{"precent": 5}"#, "precent"),
        ("{}", "percent"),
    ] {
        let r = post(&api, "/controls/admit-percent", body).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}: {}", r.text);
        assert_eq!(r.json()["field"], field, "{body}: {}", r.text);
        assert!(!r.json()["accepts"].as_str().unwrap().is_empty(), "{body}");
    }
    let r = post(&api, "/controls/admit-percent", r#"{"percent": "off"}"#).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json()["admit_percent"], Value::Null);
    let r = post(&api, "/controls/admit-percent", r#"{"ramp_seconds": 60}"#).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "nothing to ramp from");
    assert_eq!(r.json()["field"], "percent");
}

#[tokio::test]
async fn retries_exercise_and_reset_endpoints() {
    let api = open_api();
    let r = post(&api, "/controls/retries", r#"{"enabled": false}"#).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json()["retries_enabled"], false);
    let r = post(&api, "/controls/retries", r#"{"enabled": "perhaps"}"#).await;
    assert_eq!(r.json()["field"], "enabled");
    let r = post(&api, "/controls/exercise-degraded", r#"{"fraction": 0.02}"#).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json()["exercise_degraded_fraction"], 0.02);
    let r = post(&api, "/controls/exercise-degraded", r#"{"fraction": 2}"#).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json()["field"], "fraction");
    let r = post(&api, "/controls/reset", r#"{"really": true}"#).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "reset takes no fields");
    let r = post(&api, "/controls/reset", "").await;
    assert_eq!(r.status, StatusCode::OK);
    let v = r.json();
    assert_eq!(v["retries_enabled"], true);
    assert_eq!(v["exercise_degraded_fraction"], 0.0);
    assert_eq!(get(&api, "/controls").await.json(), v);
}

#[tokio::test]
async fn bad_bodies_are_named() {
    let api = open_api();
    let r = post(&api, "/controls/retries", "{enabled: false").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json()["field"], "body");
    let api = api_with(
        state(),
        AdminConfig {
            max_body_bytes: 1024,
            ..AdminConfig::default()
        },
    );
    let big = format!("{{\"enabled\": false, \"pad\": \"{}\"}}", "x".repeat(2000));
    let r = post(&api, "/controls/retries", &big).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(r.text.contains("max_body_bytes"), "{}", r.text);
}

#[tokio::test]
async fn degradation_switch() {
    let api = open_api();
    let st = Arc::clone(api.state());
    assert!(st.degradation_enabled("search"));
    let r = post(
        &api,
        "/degradation",
        r#"{"route": "search", "enabled": false}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(!st.degradation_enabled("search"));
    assert!(st.degradation_enabled("batch"));
    let route = r.json()["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "search")
        .cloned()
        .unwrap();
    assert_eq!(route["degradation_enabled"], false, "{route}");
    let r = post(&api, "/degradation?enabled=false", "").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!st.degradation_enabled("batch"));
    assert_eq!(r.json()["degradation_all_off"], true);
    let r = post(&api, "/degradation?route=*&enabled=true", "").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(st.degradation_enabled("search") && st.degradation_enabled("batch"));
    let r = post(
        &api,
        "/degradation",
        r#"{"route": "serch", "enabled": false}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let v = r.json();
    assert_eq!(v["field"], "route");
    assert!(v["error"].as_str().unwrap().contains("serch"), "{v}");
    assert!(v["accepts"].as_str().unwrap().contains("search"), "{v}");
    let r = post(&api, "/degradation", r#"{"route": "search"}"#).await;
    assert_eq!(r.json()["field"], "enabled");
}

#[tokio::test]
async fn reload_from_body_valid_and_invalid() {
    let api = open_api();
    let st = Arc::clone(api.state());
    let new = CONFIG.replace("path = \"/batch/\"", "path = \"/jobs/\"");
    let r = post(&api, "/reload", &new).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let v = r.json();
    assert_eq!(v["reloaded"], true);
    assert_eq!(v["source"], "request body");
    assert_eq!(v["changed"], serde_json::json!(["routes[1].path"]));
    assert_eq!(st.config().routes[1].path, "/jobs/");

    let bad = new.replace("criticality = \"SHEDDABLE\"", "criticality = \"MEDIUM\"");
    let r = post(&api, "/reload", &bad).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    let v = r.json();
    let line = bad
        .lines()
        .position(|l| l.contains("MEDIUM"))
        .map(|i| i + 1)
        .unwrap();
    assert_eq!(v["line"], line, "{v}");
    assert!(v["error"].as_str().unwrap().contains("MEDIUM"), "{v}");
    assert!(v["kept"].as_str().unwrap().contains("previous"), "{v}");
    // A value of the right type that validation refuses: the key is named too.
    let bad = new.replace("threshold = 0.8", "threshold = 20.0");
    let r = post(&api, "/reload", &bad).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    let v = r.json();
    assert!(v["key"].as_str().unwrap().contains("threshold"), "{v}");
    let line = bad.lines().position(|l| l.contains("20.0")).map(|i| i + 1);
    assert_eq!(v["line"].as_u64().map(|l| l as usize), line, "{v}");
    assert_eq!(st.config().routes[1].path, "/jobs/", "old config kept");
    assert_eq!(
        st.config().routes[1].criticality,
        Some(Criticality::Sheddable)
    );
}

#[tokio::test]
async fn reload_from_file_and_without_one() {
    let api = open_api();
    let r = post(&api, "/reload", "").await;
    assert_eq!(
        r.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "no --config file"
    );
    assert!(r.json()["error"].as_str().unwrap().contains("--config"));

    let dir = std::env::temp_dir().join(format!("spillway-admin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("proxy.toml");
    std::fs::write(&path, CONFIG).unwrap();
    let st = ProxyState::from_file(path.clone()).unwrap();
    let api = api_with(Arc::clone(&st), AdminConfig::default());
    std::fs::write(&path, CONFIG.replace("threshold = 0.8", "threshold = 0.7")).unwrap();
    let r = post(&api, "/reload", "").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.json()["source"], "file");
    assert_eq!(
        r.json()["changed"],
        serde_json::json!(["routes[0].degrade.threshold"])
    );
    std::fs::write(&path, "[upstream]\naddresses = 7\n").unwrap();
    let r = post(&api, "/reload", "").await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(r.json()["line"], 2, "{}", r.text);
    assert_eq!(
        st.config().routes[0].degrade.as_ref().unwrap().threshold,
        0.7,
        "old config kept"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn metrics_is_prometheus_text_with_offered_demand() {
    let api = open_api();
    metrics::record_offered(Criticality::Critical, 2.0);
    ::metrics::counter!(spillway_tower::wire::metric::SHED, "reason" => "admin-unit-test")
        .increment(1);
    let r = get(&api, "/metrics").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    assert!(
        r.text
            .contains("# TYPE spillway_offered_cost_total counter"),
        "{}",
        r.text
    );
    assert!(
        r.text
            .contains("spillway_requests_shed_total{reason=\"admin-unit-test\"} 1"),
        "{}",
        r.text
    );
}

#[test]
fn admin_config_validation() {
    let ok = AdminConfig::default();
    assert!(ok.validate().is_ok());
    let remote = AdminConfig {
        listen: "0.0.0.0:9901".parse().unwrap(),
        ..AdminConfig::default()
    };
    assert_eq!(remote.validate().unwrap_err().field, "listen");
    let remote_with_token = AdminConfig {
        token: Some(TOKEN.into()),
        ..remote.clone()
    };
    assert!(remote_with_token.validate().is_ok());
    let short = AdminConfig {
        token: Some("abc".into()),
        ..AdminConfig::default()
    };
    assert_eq!(short.validate().unwrap_err().field, "token");
    let reads = AdminConfig {
        protect_reads: true,
        ..AdminConfig::default()
    };
    assert_eq!(reads.validate().unwrap_err().field, "protect_reads");
    let missing = AdminConfig {
        token_file: Some("/nonexistent/spillway-token".into()),
        ..AdminConfig::default()
    };
    assert_eq!(missing.validate().unwrap_err().field, "token_file");
    let zero = AdminConfig {
        max_connections: 0,
        ..AdminConfig::default()
    };
    assert_eq!(zero.validate().unwrap_err().field, "max_connections");
    // The TOML form, with defaults for what is left out.
    let parsed: AdminConfig = toml_edit::de::from_str("listen = \"127.0.0.1:0\"\n").unwrap();
    assert_eq!(parsed.max_connections, 64);
    assert!(toml_edit::de::from_str::<AdminConfig>("tokn = \"x\"\n").is_err());
}
