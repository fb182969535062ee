//! A refusal is cheap for the proxy only if it does not cost the client its connection: a
//! refused request whose body has arrived is answered on a connection that stays open for the
//! next request (HTTP/1.1 keep-alive), for both kinds of refusal — an incident control's 503
//! and the admission controller's (here a quota's 429, from
//! `spillway_tower::server::reject::refusal_response`) — with `Retry-After`.

mod proxy_support;

use proxy_support::{backend, proxy_toml, read_head};
use spillway_core::Criticality;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads one response (head and a `content-length` body) from `s`; returns the head and body.
async fn read_response(s: &mut TcpStream) -> (String, String) {
    let head = read_head(s).await;
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .expect("a content-length");
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await.expect("the body");
    (head, String::from_utf8_lossy(&body).into_owned())
}

async fn refused_then_served(addr: std::net::SocketAddr, status: &str) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    // A refused POST whose small body arrives with its head ...
    s.write_all(
        b"POST /up HTTP/1.1\r\nhost: x\r\nx-spillway-criticality: SHEDDABLE\r\n\
          content-length: 5\r\n\r\nhello",
    )
    .await
    .unwrap();
    let (head, body) = read_response(&mut s).await;
    assert!(head.starts_with(status), "{head}");
    let lower = head.to_ascii_lowercase();
    assert!(lower.contains("\r\nretry-after: "), "{head}");
    assert!(
        !lower.contains("connection: close"),
        "keep-alive kept: {head}"
    );
    assert!(!body.is_empty(), "the refusal names its cause");
    // ... then a second request on the same connection is served.
    s.write_all(b"GET /next HTTP/1.1\r\nhost: x\r\nx-spillway-criticality: CRITICAL\r\n\r\n")
        .await
        .unwrap();
    let (head, body) = read_response(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(body.contains("b GET /next"), "{body}");
}

#[tokio::test]
async fn an_incident_control_refusal_keeps_the_connection() {
    let b = backend("b").await;
    let p = proxy_toml(&format!(
        "[upstream]\naddresses = [\"{}\"]\n[classify]\ntrusted = [\"127.0.0.0/8\"]\n",
        b.addr
    ))
    .await;
    p.state
        .controls()
        .set_shed_below(Some(Criticality::SheddablePlus));
    refused_then_served(p.addr, "HTTP/1.1 503").await;
}

#[tokio::test]
async fn an_admission_refusal_keeps_the_connection() {
    let b = backend("b").await;
    let p = proxy_toml(&format!(
        r#"
[upstream]
addresses = ["{}"]
[classify]
trusted = ["127.0.0.0/8"]
[admission.quota]
enforcement = "always"
default_customer = {{ per_criticality = [0.0, 1e9, 1e9, 1e9] }}
"#,
        b.addr
    ))
    .await;
    refused_then_served(p.addr, "HTTP/1.1 429").await;
}
