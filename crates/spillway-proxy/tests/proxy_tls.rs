//! TLS on the listener (cargo feature `tls`): HTTP/1.1 and h2 negotiated by ALPN, and clear
//! errors for bad certificate files. Run with `cargo test -p spillway-proxy --features tls`.
#![cfg(feature = "tls")]

mod proxy_support;

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
