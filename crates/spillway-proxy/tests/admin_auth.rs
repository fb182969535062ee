//! The admin token over a real socket: 401 (with `WWW-Authenticate`) without it or with a
//! wrong one on every mutating endpoint and `/config`; reads open unless `protect_reads`; a
//! refused call changes nothing. Plus the listener's own limits and shutdown.

mod admin_support;

use std::sync::Arc;

use admin_support::{stack, upstream, TOKEN};
use http::{Method, StatusCode};
use spillway_proxy::admin::{AdminConfig, AdminError, AdminServer};

fn config(up: std::net::SocketAddr) -> String {
    format!("[upstream]\naddresses = [\"{up}\"]\n\n[[routes]]\nname = \"api\"\npath = \"/\"\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_required_on_mutations_and_config() {
    let up = upstream().await;
    let s = stack(
        &config(up.addr),
        AdminConfig {
            token: Some(TOKEN.into()),
            ..AdminConfig::default()
        },
    )
    .await;
    let wrong = format!("{}x", TOKEN);
    let endpoints = [
        (
            Method::POST,
            "/controls/shed-below",
            r#"{"criticality": "CRITICAL_PLUS"}"#,
        ),
        (Method::POST, "/controls/admit-percent", r#"{"percent": 0}"#),
        (Method::POST, "/controls/retries", r#"{"enabled": false}"#),
        (
            Method::POST,
            "/controls/exercise-degraded",
            r#"{"fraction": 1}"#,
        ),
        (Method::POST, "/controls/reset", ""),
        (Method::POST, "/degradation", r#"{"enabled": false}"#),
        (Method::POST, "/reload", ""),
        (Method::GET, "/config", ""),
    ];
    for (method, path, body) in &endpoints {
        for auth in [
            None,
            Some(format!("Bearer {wrong}")),
            Some(format!("Basic {TOKEN}")),
        ] {
            let headers: Vec<(&str, &str)> = auth
                .as_deref()
                .map(|a| vec![("authorization", a)])
                .unwrap_or_default();
            let r = s.send(s.admin, method.clone(), path, &headers, body).await;
            assert_eq!(
                r.status,
                StatusCode::UNAUTHORIZED,
                "{method} {path} with {auth:?}"
            );
            assert_eq!(
                r.headers["www-authenticate"],
                "Bearer realm=\"spillway-admin\""
            );
            assert!(r.text.contains("Authorization: Bearer"), "{}", r.text);
        }
    }
    // Nothing was changed by the refused calls: traffic still flows, controls all off.
    assert_eq!(s.get_proxy("/x", &[]).await.status, StatusCode::OK);
    let c = s.admin_get("/controls").await;
    assert_eq!(c.status, StatusCode::OK, "reads are open by default");
    let c = c.json();
    assert_eq!(c["shed_below"], serde_json::Value::Null);
    assert_eq!(c["retries_enabled"], true);
    assert!(s.state.degradation_enabled("api"));
    for path in ["/metrics", "/status", "/"] {
        assert_eq!(s.admin_get(path).await.status, StatusCode::OK, "{path}");
    }

    // With the token: accepted.
    let r = s
        .admin_post(
            "/controls/shed-below",
            r#"{"criticality": "CRITICAL_PLUS"}"#,
            Some(TOKEN),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        s.get_proxy("/x", &[]).await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let auth = format!("Bearer {TOKEN}");
    let r = s
        .send(
            s.admin,
            Method::GET,
            "/config",
            &[("authorization", &auth)],
            "",
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        !r.text.contains(TOKEN),
        "the token never appears on /config"
    );
    s.shutdown().await;
}

/// Without a token, a web page the operator opens (a cross-origin form post, or DNS
/// rebinding) must not be able to change the proxy: changes need the admin's own Host/Origin
/// and a request a form cannot make. Reads stay open under any name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_browser_requests_cannot_change_the_proxy() {
    let up = upstream().await;
    let s = stack(&config(up.addr), AdminConfig::default()).await;
    let own_origin = format!("http://{}", s.admin);
    let form = ("content-type", "application/x-www-form-urlencoded");
    let script = ("x-spillway-admin", "1");
    let evil_host = format!("evil.example:{}", s.admin.port());
    // (why, path, headers, body)
    type Case<'a> = (&'a str, &'a str, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        (
            "cross-origin form post",
            "/controls/admit-percent?percent=0",
            vec![form, ("origin", "https://evil.example")],
            "percent=0",
        ),
        (
            "forged origin with the script header",
            "/controls/admit-percent?percent=0",
            vec![script, ("origin", "https://evil.example")],
            "",
        ),
        (
            "DNS rebinding (foreign Host)",
            "/controls/admit-percent?percent=0",
            vec![
                script,
                ("host", evil_host.as_str()),
                ("origin", "http://evil.example"),
            ],
            "",
        ),
        (
            "reload via DNS rebinding",
            "/reload",
            vec![
                ("host", evil_host.as_str()),
                ("content-type", "application/json"),
            ],
            "[classify]\ntrusted = [\"0.0.0.0/0\"]\n",
        ),
        (
            "simple form post from the admin's own origin",
            "/controls/shed-below",
            vec![form, ("origin", own_origin.as_str())],
            "criticality=CRITICAL_PLUS",
        ),
        (
            "text/plain post without an origin",
            "/controls/admit-percent?percent=0",
            vec![("content-type", "text/plain")],
            "",
        ),
    ];
    for (why, path, headers, body) in &cases {
        let r = s.send(s.admin, Method::POST, path, headers, body).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{why}: {}", r.text);
        let msg = r.json()["error"].as_str().unwrap_or_default().to_string();
        assert!(
            msg.contains("Host") || msg.contains("Origin") || msg.contains("X-Spillway-Admin"),
            "{why}: the 403 says what is missing: {msg}"
        );
    }
    // Nothing changed: traffic flows, controls off, the configuration is the original one.
    assert_eq!(s.get_proxy("/x", &[]).await.status, StatusCode::OK);
    let c = s.admin_get("/controls").await.json();
    assert_eq!(c["admit_percent"], serde_json::Value::Null);
    assert_eq!(c["shed_below"], serde_json::Value::Null);
    assert_eq!(s.state.status().reloads, 0);
    // Reads answer under any name (Prometheus, dashboards behind other names).
    for path in ["/metrics", "/status", "/controls", "/api/series?since=0"] {
        let r = s
            .send(
                s.admin,
                Method::GET,
                path,
                &[("host", evil_host.as_str())],
                "",
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{path}");
    }
    // The legitimate callers: a script (curl with the header), and the dashboard's JSON fetch.
    let r = s
        .admin_post(
            "/controls/shed-below",
            r#"{"criticality": "CRITICAL_PLUS"}"#,
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = s
        .send(
            s.admin,
            Method::POST,
            "/controls/reset",
            &[
                ("content-type", "application/json"),
                ("origin", own_origin.as_str()),
                ("sec-fetch-site", "same-origin"),
            ],
            "{}",
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protect_reads_puts_everything_behind_the_token() {
    let up = upstream().await;
    let s = stack(
        &config(up.addr),
        AdminConfig {
            token: Some(TOKEN.into()),
            protect_reads: true,
            ..AdminConfig::default()
        },
    )
    .await;
    let auth = format!("Bearer {TOKEN}");
    for path in ["/metrics", "/status", "/controls", "/config", "/"] {
        assert_eq!(
            s.admin_get(path).await.status,
            StatusCode::UNAUTHORIZED,
            "{path}"
        );
        let r = s
            .send(s.admin, Method::GET, path, &[("authorization", &auth)], "")
            .await;
        assert_eq!(r.status, StatusCode::OK, "{path}");
    }
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_to_start_open_on_a_public_address_and_reports_bind_errors() {
    let up = upstream().await;
    let cfg = spillway_proxy::config::parse(&config(up.addr), "t.toml").unwrap();
    let state = spillway_proxy::state::ProxyState::new(cfg, "t.toml", None).unwrap();
    let open = AdminConfig {
        listen: "0.0.0.0:0".parse().unwrap(),
        ..AdminConfig::default()
    };
    match AdminServer::bind(Arc::clone(&state), open).await {
        Err(AdminError::Config(e)) => {
            assert_eq!(e.field, "listen");
            assert!(e.to_string().contains("token"), "{e}");
        }
        other => panic!("expected a config error, got {other:?}"),
    }
    // A port already in use is named in the error.
    let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = taken.local_addr().unwrap();
    let busy = AdminConfig {
        listen: addr,
        ..AdminConfig::default()
    };
    match AdminServer::bind(state, busy).await {
        Err(e @ AdminError::Bind { .. }) => {
            assert!(e.to_string().contains(&addr.to_string()), "{e}");
        }
        other => panic!("expected a bind error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_cap_queues_and_shutdown_returns() {
    let up = upstream().await;
    let s = stack(
        &config(up.addr),
        AdminConfig {
            max_connections: 1,
            ..AdminConfig::default()
        },
    )
    .await;
    // Hold the only slot with an idle connection that never sends a request...
    let idle = tokio::net::TcpStream::connect(s.admin).await.unwrap();
    // ...then a second client waits in the accept queue until the idle one is closed.
    let pending = {
        let addr = s.admin;
        tokio::spawn(async move {
            let client =
                hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                    .build_http::<http_body_util::Full<bytes::Bytes>>();
            client
                .get(format!("http://{addr}/controls").parse().unwrap())
                .await
                .map(|r| r.status())
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(
        !pending.is_finished(),
        "served past the cap of 1 connection"
    );
    drop(idle);
    let status = tokio::time::timeout(admin_support::REQUEST_TIMEOUT, pending)
        .await
        .expect("served once the slot is free")
        .unwrap()
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    s.shutdown().await; // asserts the admin listener returns Ok within the timeout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_request_heads_are_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let up = upstream().await;
    let s = stack(
        &config(up.addr),
        AdminConfig {
            header_read_timeout_ms: 200,
            ..AdminConfig::default()
        },
    )
    .await;
    // Half a request head, then silence: the listener closes the connection by itself.
    let mut c = tokio::net::TcpStream::connect(s.admin).await.unwrap();
    c.write_all(b"GET /status HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(admin_support::REQUEST_TIMEOUT, c.read_to_end(&mut buf))
        .await
        .expect("closed well before the test's timeout");
    // EOF or a reset: either way the slow client no longer holds the connection.
    drop(read);
    // The listener is still serving others.
    assert_eq!(s.admin_get("/controls").await.status, StatusCode::OK);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reads_no_answers_loses_its_slot() {
    use tokio::io::AsyncWriteExt;
    let up = upstream().await;
    let s = stack(
        &config(up.addr),
        AdminConfig {
            max_connections: 1,
            send_timeout_ms: 300,
            ..AdminConfig::default()
        },
    )
    .await;
    // The one slot taken by a client that pipelines requests and reads nothing: its small
    // receive window and the proxy's send buffer fill, and the listener's writes stall.
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut c = sock.connect(s.admin).await.unwrap();
    let flood = tokio::spawn(async move {
        let req = b"GET /status HTTP/1.1\r\nhost: x\r\n\r\n".repeat(100);
        for _ in 0..200 {
            if c.write_all(&req).await.is_err() {
                break;
            }
        }
        c
    });
    // Another client gets the slot once the stalled connection is closed (with no send
    // timeout it would wait behind it for good, and this request would time out).
    assert_eq!(s.admin_get("/controls").await.status, StatusCode::OK);
    flood.abort();
    s.shutdown().await;
}
