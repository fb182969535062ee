//! TLS and mTLS to the upstream (`[upstream.tls]`): HTTP/1.1 and h2 by ALPN, pooling, a wrong
//! CA or a missing client certificate refused with a 502 (not a hang), SNI, and reloads that
//! re-read the files. Run with `cargo test -p spillway-proxy --features tls`.
#![cfg(feature = "tls")]

mod proxy_support;
mod tls_support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use proxy_support::*;
use tls_support::*;

/// A GET through the proxy, bounded in time (a refusal must not hang).
async fn fetch(
    c: &Client,
    addr: std::net::SocketAddr,
    path: &str,
) -> (u16, http::HeaderMap, String) {
    tokio::time::timeout(Duration::from_secs(10), get(c, addr, path, &[]))
        .await
        .expect("an answer within 10 s")
}

#[tokio::test]
async fn https_upstream_over_http1_and_h2_with_pooled_connections() {
    let ca = Ca::new("upstream CA");
    let dir = Dir::new("h1h2");
    let ca_file = dir.write("ca.pem", &ca.pem());
    let b = tls_backend(server_config(&ca.leaf(&["127.0.0.1"]), None)).await;

    let p = proxy_toml(&format!(
        "[upstream]\naddresses = [\"{}\"]\nprotocol = \"http1\"\n[upstream.tls]\nca_file = \"{ca_file}\"\n",
        b.addr
    ))
    .await;
    let c = client();
    for _ in 0..3 {
        let (status, _, body) = fetch(&c, p.addr, "/one").await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("v=HTTP/1.1 alpn=http/1.1"), "{body}");
        // An IP address is checked against the certificate's IP SAN and sent as no SNI.
        assert!(body.contains("sni=-"), "{body}");
    }
    assert_eq!(
        b.handshakes.load(Ordering::SeqCst),
        1,
        "keep-alive: one connection (and handshake) for three requests"
    );

    let p2 = proxy_toml(&format!(
        "[upstream]\naddresses = [\"{}\"]\nprotocol = \"http2\"\n[upstream.tls]\nca_file = \"{ca_file}\"\n",
        b.addr
    ))
    .await;
    for _ in 0..3 {
        let (status, _, body) = fetch(&c, p2.addr, "/two").await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("v=HTTP/2.0 alpn=h2"), "{body}");
        assert!(body.contains("scheme=https"), "{body}");
    }
    assert_eq!(b.handshakes.load(Ordering::SeqCst), 2, "one h2 connection");

    // `auto`: an HTTP/2 client's requests go over h2 once ALPN says the task speaks it.
    let p3 = proxy_toml(&format!(
        "[upstream]\naddresses = [\"{}\"]\n[upstream.tls]\nca_file = \"{ca_file}\"\n",
        b.addr
    ))
    .await;
    let (status, _, body) = fetch(&h2_client(), p3.addr, "/three").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("v=HTTP/2.0 alpn=h2"), "{body}");
    let (status, _, body) = fetch(&c, p3.addr, "/four").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("v=HTTP/1.1 alpn=http/1.1"), "{body}");
}

#[tokio::test]
async fn an_untrusted_upstream_certificate_is_a_502_naming_tls() {
    let (ours, theirs) = (Ca::new("ours"), Ca::new("theirs"));
    let dir = Dir::new("wrongca");
    let ca_file = dir.write("ca.pem", &ours.pem());
    let b = tls_backend(server_config(&theirs.leaf(&["127.0.0.1"]), None)).await;
    let p = proxy_toml(&format!(
        "[upstream]\naddresses = [\"{}\"]\n[upstream.tls]\nca_file = \"{ca_file}\"\n",
        b.addr
    ))
    .await;
    let (status, headers, body) = fetch(&client(), p.addr, "/").await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(
        headers
            .get("x-spillway-reason")
            .map(|v| v.to_str().unwrap()),
        Some("upstream_connect")
    );
    assert!(body.contains("TLS handshake failed"), "{body}");
    assert!(b.failed.load(Ordering::SeqCst) >= 1);
    assert!(
        p.state
            .faults
            .get(spillway_proxy::metrics::Fault::UpstreamConnect)
            >= 1
    );
}

#[tokio::test]
async fn mtls_upstream_takes_the_client_certificate_and_refuses_without() {
    let (server_ca, client_ca) = (Ca::new("server CA"), Ca::new("client CA"));
    let dir = Dir::new("mtls");
    let ca_file = dir.write("ca.pem", &server_ca.pem());
    let me = client_ca.leaf(&["spillway.client"]);
    let (cert, key) = (dir.write("me.crt", &me.cert), dir.write("me.key", &me.key));
    let b = tls_backend(server_config(
        &server_ca.leaf(&["127.0.0.1"]),
        Some(&client_ca),
    ))
    .await;

    let with = proxy_toml(&format!(
        "[upstream]\naddresses = [\"{}\"]\n[upstream.tls]\nca_file = \"{ca_file}\"\n\
         client_cert_file = \"{cert}\"\nclient_key_file = \"{key}\"\n",
        b.addr
    ))
    .await;
    let (status, _, body) = fetch(&client(), with.addr, "/").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("client_cert=yes"), "{body}");

    let without = proxy_toml(&format!(
        "[upstream]\naddresses = [\"{}\"]\n[upstream.tls]\nca_file = \"{ca_file}\"\n",
        b.addr
    ))
    .await;
    let (status, _, body) = fetch(&client(), without.addr, "/").await;
    assert_eq!(status, 502, "{body}");
}

#[tokio::test]
async fn sni_is_the_configured_server_name_or_the_address_host() {
    let ca = Ca::new("sni CA");
    let dir = Dir::new("sni");
    let ca_file = dir.write("ca.pem", &ca.pem());
    let b = tls_backend(server_config(
        &ca.leaf(&["api.internal", "localhost"]),
        None,
    ))
    .await;

    let named = proxy_toml(&format!(
        "[upstream]\naddresses = [\"{}\"]\n[upstream.tls]\nca_file = \"{ca_file}\"\n\
         server_name = \"api.internal\"\n",
        b.addr
    ))
    .await;
    let (status, _, body) = fetch(&client(), named.addr, "/").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("sni=api.internal"), "{body}");

    let by_host = proxy_toml(&format!(
        "[upstream]\naddresses = [\"localhost:{}\"]\n[upstream.tls]\nca_file = \"{ca_file}\"\n",
        b.addr.port()
    ))
    .await;
    let (status, _, body) = fetch(&client(), by_host.addr, "/").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("sni=localhost"), "{body}");

    // A name the certificate does not carry is refused.
    let wrong = proxy_toml(&format!(
        "[upstream]\naddresses = [\"{}\"]\n[upstream.tls]\nca_file = \"{ca_file}\"\n\
         server_name = \"other.internal\"\n",
        b.addr
    ))
    .await;
    let (status, _, body) = fetch(&client(), wrong.addr, "/").await;
    assert_eq!(status, 502, "{body}");
}

/// SIGHUP (`reload_from_file`) re-reads the CA bundle although the configuration is
/// unchanged: new connections trust the new CA; a bad bundle refuses the reload and the old
/// one stays.
#[tokio::test]
async fn a_reload_rereads_the_upstream_ca_and_keeps_it_when_the_new_file_is_bad() {
    let (old_ca, new_ca) = (Ca::new("old"), Ca::new("new"));
    let dir = Dir::new("upreload");
    let ca_file = dir.write("ca.pem", &old_ca.pem());
    let b = tls_backend(server_config(&new_ca.leaf(&["127.0.0.1"]), None)).await;
    let cfg_file = dir.write(
        "proxy.toml",
        &format!(
            "[admin]\nenabled = false\n[upstream]\naddresses = [\"{}\"]\n\
             [upstream.tls]\nca_file = \"{ca_file}\"\n",
            b.addr
        ),
    );
    let state = spillway_proxy::ProxyState::from_file(cfg_file.into()).unwrap();
    let p = spillway_proxy::run::start(state, Some("127.0.0.1:0".parse().unwrap()))
        .await
        .unwrap();
    let c = client();
    assert_eq!(
        fetch(&c, p.addr, "/").await.0,
        502,
        "the old CA does not trust it"
    );

    dir.write("ca.pem", &new_ca.pem());
    p.state.reload_from_file().expect("reload");
    let (status, _, body) = fetch(&c, p.addr, "/").await;
    assert_eq!(status, 200, "new connections trust the new CA: {body}");

    dir.write("ca.pem", "not a certificate\n");
    let e = p.state.reload_from_file().unwrap_err().to_string();
    assert!(e.contains("ca.pem") && e.contains("no CERTIFICATE"), "{e}");
    // Drop the pooled connection: a new one must still be made with the good CA.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (status, _, body) = fetch(&c, p.addr, "/").await;
    assert_eq!(status, 200, "the old CA bundle stays: {body}");
}

#[test]
fn bad_upstream_tls_files_are_named_at_check() {
    let ca = Ca::new("check");
    let dir = Dir::new("check");
    let ca_file = dir.write("ca.pem", &ca.pem());
    let leaf = ca.leaf(&["a"]);
    let other = ca.leaf(&["b"]);
    let cert = dir.write("c.crt", &leaf.cert);
    let wrong_key = dir.write("wrong.key", &other.key);
    let empty = dir.write("empty.pem", "");
    let parse = |tls: &str| {
        spillway_proxy::config::parse(
            &format!("[upstream]\naddresses = [\"127.0.0.1:1\"]\n[upstream.tls]\n{tls}"),
            "t.toml",
        )
        .unwrap_err()
        .to_string()
    };
    let e = parse("ca_file = \"/nonexistent/ca.pem\"\n");
    assert!(
        e.contains("upstream.tls.ca_file") && e.contains("/nonexistent/ca.pem"),
        "{e}"
    );
    let e = parse(&format!("ca_file = \"{empty}\"\n"));
    assert!(
        e.contains("no CERTIFICATE") && e.contains("empty.pem"),
        "{e}"
    );
    let e = parse(&format!(
        "ca_file = \"{ca_file}\"\nclient_cert_file = \"{cert}\"\nclient_key_file = \"{wrong_key}\"\n"
    ));
    assert!(
        e.contains("do not make a client identity") && e.contains("wrong.key"),
        "{e}"
    );
    let e = parse(&format!(
        "ca_file = \"{ca_file}\"\nclient_cert_file = \"{cert}\"\n"
    ));
    assert!(e.contains("upstream.tls.client_key_file"), "{e}");
    let e = parse(&format!(
        "ca_file = \"{ca_file}\"\nserver_name = \"not a name\"\n"
    ));
    assert!(e.contains("upstream.tls.server_name"), "{e}");
    // `enabled = false` keeps the table and reads nothing.
    spillway_proxy::config::parse(
        "[upstream.tls]\nenabled = false\nca_file = \"/nonexistent\"\n",
        "t.toml",
    )
    .unwrap();
}
