//! A refusal is cheap for the proxy only if it does not cost the client its connection: a
//! refused request whose body has arrived is answered on a connection that stays open for the
//! next request (HTTP/1.1 keep-alive), for both kinds of refusal — an incident control's 503
//! and the admission controller's (here a quota's 429, from
//! `spillway_tower::server::reject::refusal_response`) — with `Retry-After`.

mod proxy_support;
#[path = "../../spillway-tower/tests/upload_support/mod.rs"]
mod upload_support;

use proxy_support::{backend, proxy_toml, read_head};
use spillway_core::Criticality;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use upload_support::{answered_during_upload, content_length};

/// Reads one response (head and a `content-length` body) from `s`; returns the head and body.
async fn read_response(s: &mut TcpStream) -> (String, String) {
    let head = read_head(s).await;
    let mut body = vec![0u8; content_length(&head)];
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
    next_request_is_served(&mut s).await;
}

/// A CRITICAL request on connection `s` is forwarded and answered 200.
async fn next_request_is_served(s: &mut TcpStream) {
    s.write_all(b"GET /next HTTP/1.1\r\nhost: x\r\nx-spillway-criticality: CRITICAL\r\n\r\n")
        .await
        .unwrap();
    let (head, body) = read_response(s).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(body.contains("b GET /next"), "{body}");
}

/// A backend and a proxy in front of it whose incident control sheds below SHEDDABLE_PLUS.
async fn shedding_below_sheddable_plus() -> (proxy_support::Backend, spillway_proxy::run::Running) {
    let b = backend("b").await;
    let p = proxy_toml(&format!(
        "[upstream]\naddresses = [\"{}\"]\n[classify]\ntrusted = [\"127.0.0.0/8\"]\n",
        b.addr
    ))
    .await;
    p.state
        .controls()
        .set_shed_below(Some(Criticality::SheddablePlus));
    (b, p)
}

#[tokio::test]
async fn an_incident_control_refusal_keeps_the_connection() {
    let (_b, p) = shedding_below_sheddable_plus().await;
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

/// A refused upload much larger than what arrives with its head: the 503 comes back before the
/// client has finished sending, the proxy reads the rest behind it, and the connection then
/// serves the next request. (Dropped unread, hyper closed the connection with the rest in its
/// receive buffer, and the kernel's reset could destroy the 503 before the client read it:
/// `wrk` counted a socket error after every refusal of a 256 KB POST.)
#[tokio::test]
async fn a_large_refused_upload_is_read_behind_the_answer() {
    let (_b, p) = shedding_below_sheddable_plus().await;
    let (head, mut s) = answered_during_upload(p.addr, "SHEDDABLE").await;
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    next_request_is_served(&mut s).await;
}

/// The same for an upload that was admitted and streamed toward a task the proxy then could
/// not reach (nothing listens at its address): the body was inside the upstream request when
/// the connection attempt failed. The client gets the 502 naming the cause and keeps its
/// connection, which answers the next request.
#[tokio::test]
async fn a_streamed_upload_that_reaches_no_task_is_read_behind_the_answer() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = dead.local_addr().unwrap();
    drop(dead);
    let p = proxy_toml(&format!(
        "[upstream]\naddresses = [\"{addr}\"]\n[classify]\ntrusted = [\"127.0.0.0/8\"]\n"
    ))
    .await;
    let (head, mut s) = answered_during_upload(p.addr, "CRITICAL").await;
    assert!(head.starts_with("HTTP/1.1 502"), "{head}");
    s.write_all(b"GET /next HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let (next, body) = read_response(&mut s).await;
    assert!(
        next.starts_with("HTTP/1.1 50"),
        "answered on the same connection: {next}"
    );
    assert!(!body.is_empty(), "{next}");
}
