//! The admin API's guards without sockets: changes only from the admin's own address and never
//! as a request a web form can make, `allowed_hosts` and label-cap validation, the warning
//! without a token, and the probes (`/ready`, `/live`). Helpers are the sibling `tests`'.

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};

use super::tests::{call, get, open_api, token_api, Reply, TOKEN};
use super::*;

async fn raw(api: &AdminApi, method: &str, uri: &str, headers: &[(&str, &str)]) -> Reply {
    let mut b = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let resp = api
        .handle(b.body(Full::new(Bytes::new())).unwrap(), None)
        .await;
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        headers,
        text: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

#[tokio::test]
async fn changes_need_the_admin_address_and_a_request_no_form_can_make() {
    let api = open_api();
    let own = ("host", "127.0.0.1:9901");
    let script = (ADMIN_HEADER, "1");
    for (why, headers) in [
        ("foreign host", vec![("host", "evil.example:9901"), script]),
        ("no host", vec![script]),
        (
            "foreign origin",
            vec![own, script, ("origin", "https://evil.example")],
        ),
        ("null origin", vec![own, script, ("origin", "null")]),
        (
            "form post",
            vec![own, ("content-type", "application/x-www-form-urlencoded")],
        ),
        ("text/plain post", vec![own, ("content-type", "text/plain")]),
    ] {
        let r = raw(&api, "POST", "/controls/admit-percent?percent=0", &headers).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{why}: {}", r.text);
        assert!(!r.json()["error"].as_str().unwrap().is_empty(), "{why}");
        assert!(
            api.state()
                .controls()
                .snapshot(std::time::Instant::now())
                .admit_percent
                .is_none(),
            "{why}"
        );
    }
    // /config describes the deployment: addressed like a change.
    let r = raw(&api, "GET", "/config", &[("host", "evil.example:9901")]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    // Reads answer whatever name they were sent to.
    for uri in ["/metrics", "/status", "/controls", "/api/series?since=0"] {
        let r = raw(&api, "GET", uri, &[("host", "evil.example:9901")]).await;
        assert_eq!(r.status, StatusCode::OK, "{uri}");
    }
    // The legitimate forms: the header, a JSON body, the dashboard's same-origin fetch.
    for headers in [
        vec![own, script],
        vec![
            ("host", "localhost:9901"),
            ("content-type", "application/json"),
        ],
        vec![
            own,
            ("content-type", "application/json"),
            ("origin", "http://127.0.0.1:9901"),
            ("sec-fetch-site", "same-origin"),
        ],
    ] {
        let r = raw(&api, "POST", "/controls/reset", &headers).await;
        assert_eq!(r.status, StatusCode::OK, "{headers:?}: {}", r.text);
    }
}

#[test]
fn allowed_hosts_and_label_caps_are_validated() {
    let bad = AdminConfig {
        allowed_hosts: vec!["http://admin.example".into()],
        ..AdminConfig::default()
    };
    assert_eq!(bad.validate().unwrap_err().field, "allowed_hosts");
    let bad = AdminConfig {
        max_customer_labels: 10_001,
        ..AdminConfig::default()
    };
    assert_eq!(bad.validate().unwrap_err().field, "max_customer_labels");
    let ok = AdminConfig {
        allowed_hosts: vec!["admin.example:9901".into()],
        max_customer_labels: 0,
        ..AdminConfig::default()
    };
    assert!(ok.validate().is_ok());
}

#[test]
fn a_listener_without_a_token_is_warned_about() {
    let w = AdminConfig::default()
        .no_token_warning()
        .expect("no token: a warning");
    assert!(
        w.contains("127.0.0.1:9901") && w.contains("token_file"),
        "{w}"
    );
    let with_token = AdminConfig {
        token: Some(TOKEN.into()),
        ..AdminConfig::default()
    };
    assert_eq!(with_token.no_token_warning(), None);
    let disabled = AdminConfig {
        enabled: false,
        ..AdminConfig::default()
    };
    assert_eq!(disabled.no_token_warning(), None);
}

#[tokio::test]
async fn probes_need_no_token_and_ready_follows_draining() {
    // protect_reads: everything else needs the token; an orchestrator's probe has none.
    let api = token_api(true);
    let r = get(&api, "/live").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    // The test upstream (127.0.0.1:9) refuses connections: not ready, and the body says why.
    let r = get(&api, "/ready").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.text);
    assert_eq!(r.json()["ready"], false);
    assert!(r.json()["reason"].as_str().unwrap().contains("127.0.0.1:9"));
    api.state().begin_draining();
    let r = get(&api, "/ready").await;
    assert!(r.json()["reason"].as_str().unwrap().contains("draining"));
    assert_eq!(get(&api, "/status").await.status, StatusCode::UNAUTHORIZED);
    let r = call(&api, "POST", "/ready", "", Some(TOKEN)).await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
}
