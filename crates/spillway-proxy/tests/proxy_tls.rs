//! TLS on the listener (cargo feature `tls`): HTTP/1.1 and h2 negotiated by ALPN, clear
//! errors for bad certificate files, and the certificate swapped by a reload without dropping
//! a connection. Run with `cargo test -p spillway-proxy --features tls`.
#![cfg(feature = "tls")]

mod proxy_support;
mod tls_support;

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use proxy_support::*;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");

fn client_config(alpn: &[u8]) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    let cert = CertificateDer::from_pem_file(format!("{DATA}/localhost.crt")).unwrap();
    roots.add(cert).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut c = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    c.alpn_protocols = vec![alpn.to_vec()];
    Arc::new(c)
}

#[tokio::test]
async fn https_h1_and_h2() {
    let b = backend("b").await;
    let p = proxy_toml(&format!(
        "[listen.tls]\ncert = \"{DATA}/localhost.crt\"\nkey = \"{DATA}/localhost.key\"\n[upstream]\naddresses = [\"{}\"]\n",
        b.addr
    ))
    .await;
    for (alpn, want) in [(&b"http/1.1"[..], "v=HTTP/1.1"), (b"h2", "v=HTTP/2.0")] {
        let tcp = tokio::net::TcpStream::connect(p.addr).await.unwrap();
        let tls = tokio_rustls::TlsConnector::from(client_config(alpn))
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .unwrap();
        let req = hyper::Request::get(format!("https://localhost:{}/tls", p.addr.port()))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let res = if alpn == b"h2" {
            let (mut s, c) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                    .await
                    .unwrap();
            tokio::spawn(c);
            s.send_request(req).await.unwrap()
        } else {
            let (mut s, c) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
                .await
                .unwrap();
            tokio::spawn(c);
            s.send_request(req).await.unwrap()
        };
        assert_eq!(res.status(), 200);
        let body = res.into_body().collect().await.unwrap().to_bytes();
        let body = String::from_utf8_lossy(&body);
        assert!(body.contains(want), "{body}");
    }
}

#[test]
fn bad_certificate_files_are_named() {
    let e = spillway_proxy::config::parse(
        "[listen.tls]\ncert = \"/nonexistent.crt\"\nkey = \"/nonexistent.key\"\n",
        "t.toml",
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(msg.starts_with("t.toml:1: listen.tls"), "{msg}");
    assert!(msg.contains("/nonexistent.crt"), "{msg}");
}

/// A TLS connection to `addr` trusting `cas`, and the certificate the server presented.
async fn handshake(
    addr: std::net::SocketAddr,
    cas: &[&tls_support::Ca],
) -> (
    hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    CertificateDer<'static>,
) {
    let mut roots = RootCertStore::empty();
    for ca in cas {
        roots
            .add(CertificateDer::from_pem_slice(ca.pem().as_bytes()).unwrap())
            .unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut c = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(c))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let presented = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    let (s, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    (s, presented)
}

async fn ok(s: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>) -> bool {
    let req = hyper::Request::get("/reload")
        .header("host", "localhost")
        .body(Full::new(Bytes::new()))
        .unwrap();
    match s.send_request(req).await {
        Ok(res) => res.status() == 200 && res.into_body().collect().await.is_ok(),
        Err(_) => false,
    }
}

/// What SIGHUP runs (`reload_from_file`): new handshakes get the new certificate, a connection
/// opened before keeps working, and a bad new file keeps the current one.
#[tokio::test]
async fn a_reload_swaps_the_listener_certificate_without_dropping_connections() {
    use tls_support::{Ca, Dir};
    let (old_ca, new_ca) = (Ca::new("old"), Ca::new("new"));
    let (old, new) = (old_ca.leaf(&["localhost"]), new_ca.leaf(&["localhost"]));
    let dir = Dir::new("listener-reload");
    let cert = dir.write("l.crt", &old.cert);
    let key = dir.write("l.key", &old.key);
    let b = backend("b").await;
    let cfg_file = dir.write(
        "proxy.toml",
        &format!(
            "[admin]\nenabled = false\n[listen.tls]\ncert = \"{cert}\"\nkey = \"{key}\"\n\
             [upstream]\naddresses = [\"{}\"]\n",
            b.addr
        ),
    );
    let state = spillway_proxy::ProxyState::from_file(cfg_file.into()).unwrap();
    let p = spillway_proxy::run::start(state, Some("127.0.0.1:0".parse().unwrap()))
        .await
        .unwrap();
    let pem_der = |pem: &str| CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();

    let (mut before, presented) = handshake(p.addr, &[&old_ca, &new_ca]).await;
    assert_eq!(presented, pem_der(&old.cert));
    assert!(ok(&mut before).await);

    dir.write("l.crt", &new.cert);
    dir.write("l.key", &new.key);
    p.state.reload_from_file().expect("reload");
    let (mut after, presented) = handshake(p.addr, &[&old_ca, &new_ca]).await;
    assert_eq!(
        presented,
        pem_der(&new.cert),
        "a new handshake sees the new certificate"
    );
    assert!(ok(&mut after).await);
    assert!(
        ok(&mut before).await,
        "the connection opened before the reload keeps working"
    );

    // A key that does not belong to the certificate: refused, the current pair stays.
    dir.write("l.key", &old.key);
    let e = p.state.reload_from_file().unwrap_err().to_string();
    assert!(e.contains("listen.tls") && e.contains("l.key"), "{e}");
    dir.write("l.crt", "garbage\n");
    let e = p.state.reload_from_file().unwrap_err().to_string();
    assert!(e.contains("l.crt") && e.contains("no CERTIFICATE"), "{e}");
    let (mut again, presented) = handshake(p.addr, &[&old_ca, &new_ca]).await;
    assert_eq!(
        presented,
        pem_der(&new.cert),
        "the last good certificate stays"
    );
    assert!(ok(&mut again).await && ok(&mut before).await);
    assert_eq!(p.state.status().reload_failures, 2);
}
