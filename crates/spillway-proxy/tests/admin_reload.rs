//! `POST /reload` over loopback against a proxy started from a file: a valid new file takes
//! effect on the data path; an invalid one is refused with its key and line while the old
//! configuration keeps serving.

mod admin_support;

use admin_support::{stack_with, upstream};
use http::StatusCode;
use spillway_proxy::admin::AdminConfig;
use spillway_proxy::state::ProxyState;

fn config(up: std::net::SocketAddr, batch_criticality: &str, threshold: &str) -> String {
    format!(
        r#"[upstream]
addresses = ["{up}"]

[[routes]]
name = "batch"
path = "/batch/"
criticality = "{batch_criticality}"

[[routes]]
name = "search"
path = "/search"
[routes.degrade]
threshold = {threshold}
body = "degraded"
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_valid_applies_invalid_keeps_the_old_config() {
    let up = upstream().await;
    let dir = std::env::temp_dir().join(format!("spillway-admin-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("proxy.toml");
    std::fs::write(&path, config(up.addr, "CRITICAL", "0.9")).unwrap();
    let state = ProxyState::from_file(path.clone()).expect("starts from the file");
    let s = stack_with(state, AdminConfig::default()).await;

    // Shed SHEDDABLE: /batch/ is CRITICAL for now, so it passes.
    s.control(
        "/controls/shed-below",
        r#"{"criticality": "SHEDDABLE_PLUS"}"#,
    )
    .await;
    assert_eq!(s.get_proxy("/batch/1", &[]).await.status, StatusCode::OK);

    // Valid: /batch/ becomes SHEDDABLE, and the data path sheds it at once.
    std::fs::write(&path, config(up.addr, "SHEDDABLE", "0.9")).unwrap();
    let r = s.admin_post("/reload", "", None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let v = r.json();
    assert_eq!(v["reloaded"], true);
    assert_eq!(v["source"], "file");
    assert_eq!(v["changed"], serde_json::json!(["routes[0].criticality"]));
    assert_eq!(
        s.get_proxy("/batch/2", &[]).await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );

    // Invalid: a threshold out of range. Refused with key and line; old config kept.
    let bad = config(up.addr, "CRITICAL", "99");
    std::fs::write(&path, &bad).unwrap();
    let r = s.admin_post("/reload", "", None).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    let v = r.json();
    let line = bad
        .lines()
        .position(|l| l.starts_with("threshold"))
        .unwrap()
        + 1;
    assert_eq!(v["line"], line, "{v}");
    assert!(v["key"].as_str().unwrap().contains("threshold"), "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("proxy.toml"),
        "names the file: {v}"
    );
    assert!(v["kept"].as_str().unwrap().contains("previous"), "{v}");
    // Still the previous (SHEDDABLE) configuration.
    assert_eq!(
        s.get_proxy("/batch/3", &[]).await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let status = s.admin_get("/status").await.json();
    assert_eq!(status["reloads"], 1, "{status}");
    assert_eq!(status["reload_failures"], 1, "{status}");

    // A TOML body is reloaded as well (until the next file reload).
    let r = s
        .admin_post("/reload", &config(up.addr, "CRITICAL", "0.9"), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.json()["source"], "request body");
    assert_eq!(s.get_proxy("/batch/4", &[]).await.status, StatusCode::OK);
    let r = s.admin_post("/reload", "[upstream\n", None).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(r.json()["line"], 1, "{}", r.text);
    assert_eq!(s.get_proxy("/batch/5", &[]).await.status, StatusCode::OK);

    s.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
