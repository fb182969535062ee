//! Body framing on the wire, both ways, over raw HTTP/1.1 sockets: a repeated `content-length`
//! (`35, 35`, or two fields of 35) is forwarded as one field and lengths that disagree are
//! refused (RFC 9110 §8.6: 400 from a client, 502 from an upstream); a bare LF in the chunked
//! coding and chunk extensions beyond their cap are refused from either side, and what was
//! refused never reaches the other side as a complete message.

mod proxy_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use proxy_support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Everything an upstream read, per connection, as bytes.
type Seen = Arc<Mutex<Vec<Vec<u8>>>>;

/// An upstream that answers every request head with `answer` (then closes) and records the raw
/// bytes it read on each connection (the head and its body, or what of it arrived).
async fn upstream(answer: &'static [u8]) -> (std::net::SocketAddr, Seen) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let s2 = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let seen = Arc::clone(&s2);
            tokio::spawn(async move {
                let i = {
                    let mut v = seen.lock().unwrap();
                    v.push(Vec::new());
                    v.len() - 1
                };
                let mut buf = Vec::new();
                if read_until(&mut s, &mut buf, b"\r\n\r\n").await.is_none() {
                    seen.lock().unwrap()[i] = buf;
                    return;
                }
                // The body: to its length, or to a chunked body's last chunk, or as much as
                // comes before the proxy gives up on it (closes, or sends nothing for 2 s).
                let head_len = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                let head = String::from_utf8_lossy(&buf[..head_len]).to_ascii_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .and_then(|v| v.trim().parse::<usize>().ok());
                let whole = |buf: &[u8]| match length {
                    Some(n) => buf.len() >= head_len + n,
                    None => !head.contains("chunked") || buf.ends_with(b"0\r\n\r\n"),
                };
                let mut b = [0u8; 65536];
                while !whole(&buf) {
                    match tokio::time::timeout(Duration::from_secs(2), s.read(&mut b)).await {
                        Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&b[..n]),
                        _ => break,
                    }
                }
                seen.lock().unwrap()[i] = buf;
                let _ = s.write_all(answer).await;
            });
        }
    });
    (addr, seen)
}

const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok";

fn toml(addr: std::net::SocketAddr) -> String {
    // No retry buffer: a request goes on as it arrives, so what the upstream sees is what the
    // proxy forwarded from the client's bytes as they came.
    format!("[upstream]\naddresses = [\"{addr}\"]\nretry_buffer_bytes = 0\n")
}

/// The bytes the proxy answers `req` with, read until it closes (or 10 s pass).
async fn send(proxy: std::net::SocketAddr, req: &[u8]) -> String {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(req).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

fn lower(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_ascii_lowercase()
}

#[tokio::test]
async fn a_clients_repeated_length_reaches_the_upstream_as_one_field() {
    for req in [
        &b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 5, 5\r\nconnection: close\r\n\r\nhello"[..],
        b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\nconnection: close\r\nContent-Length: 5\r\n\r\nhello",
    ] {
        let (addr, seen) = upstream(OK).await;
        let p = proxy_toml(&toml(addr)).await;
        let answer = send(p.addr, req).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let seen = lower(&seen.lock().unwrap()[0]);
        assert_eq!(seen.matches("content-length").count(), 1, "{seen}");
        assert!(seen.contains("\r\ncontent-length: 5\r\n"), "{seen}");
        assert!(seen.ends_with("\r\n\r\nhello"), "{seen}");
    }
}

#[tokio::test]
async fn a_clients_lengths_that_disagree_get_a_400_and_reach_nobody() {
    let (addr, seen) = upstream(OK).await;
    let p = proxy_toml(&toml(addr)).await;
    for req in [
        &b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 5, 6\r\n\r\nhello!"[..],
        b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\nhello!",
    ] {
        let answer = send(p.addr, req).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    }
    assert!(seen.lock().unwrap().is_empty());
}

/// A chunked upload whose framing is broken by `bad` (bytes after a good first chunk): the
/// client gets a 400, and the upstream never gets a complete body.
async fn refused_upload(bad: &[u8]) {
    let (addr, seen) = upstream(OK).await;
    let p = proxy_toml(&toml(addr)).await;
    let mut req = b"POST /up HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n\
                    5\r\nhello\r\n"
        .to_vec();
    req.extend_from_slice(bad);
    let answer = send(p.addr, &req).await;
    // Here the body breaks before anything went upstream: the proxy answers it itself.
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("x-spillway-reason: bad_body"), "{answer}");
    assert!(answer.contains("chunked coding is invalid"), "{answer}");
    for got in seen.lock().unwrap().iter() {
        let got = lower(got);
        assert!(!got.ends_with("0\r\n\r\n"), "a whole body went on: {got}");
        assert!(!got.contains("world"), "{got}");
    }
}

#[tokio::test]
async fn a_bare_lf_in_a_clients_chunked_body_is_refused() {
    // After a chunk size, after the last chunk, in the trailer section.
    refused_upload(b"5\nworld\r\n0\r\n\r\n").await;
    refused_upload(b"5;x=1\nworld\r\n0\r\n\r\n").await;
    refused_upload(b"0\nworld: 1\r\n\r\n").await;
    refused_upload(b"0\r\nworld: 1\n\r\n").await;
}

#[tokio::test]
async fn a_clients_chunk_extensions_beyond_the_cap_are_refused() {
    // One line longer than 4 KiB, and 17 lines of 1 KiB of extensions (16 KiB a body).
    let mut long = format!("5;{}\r\nworld\r\n0\r\n\r\n", "e".repeat(5000)).into_bytes();
    refused_upload(&long).await;
    long.clear();
    for _ in 0..17 {
        long.extend_from_slice(format!("1;{}\r\nw\r\n", "e".repeat(1022)).as_bytes());
    }
    long.extend_from_slice(b"5\r\nworld\r\n0\r\n\r\n");
    refused_upload(&long).await;
    // Under the cap, the same body passes.
    let (addr, seen) = upstream(OK).await;
    let p = proxy_toml(&toml(addr)).await;
    let req = format!(
        "POST /up HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n\
         5;{}\r\nhello\r\n0\r\n\r\n",
        "e".repeat(1000)
    );
    let answer = send(p.addr, req.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(lower(&seen.lock().unwrap()[0]).contains("hello"));
}

/// The proxy's answer to a GET whose upstream answers `res`.
async fn answered(res: &'static [u8]) -> String {
    let (addr, _) = upstream(res).await;
    let p = proxy_toml(&toml(addr)).await;
    send(
        p.addr,
        b"GET /r HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await
}

#[tokio::test]
async fn an_upstreams_repeated_length_reaches_the_client_as_one_field() {
    for res in [
        &b"HTTP/1.1 200 OK\r\ncontent-length: 2, 2\r\nx-a: 1\r\n\r\nok"[..],
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-a: 1\r\nContent-Length: 2\r\n\r\nok",
    ] {
        let res: &'static [u8] = res;
        let answer = answered(res).await.to_ascii_lowercase();
        assert!(answer.starts_with("http/1.1 200"), "{answer}");
        assert_eq!(answer.matches("content-length").count(), 1, "{answer}");
        assert!(answer.contains("\r\ncontent-length: 2\r\n"), "{answer}");
        assert!(answer.ends_with("\r\n\r\nok"), "{answer}");
    }
    // And to an HTTP/2 client, whose framing has no lists.
    let (addr, _) = upstream(b"HTTP/1.1 200 OK\r\ncontent-length: 2, 2\r\n\r\nok").await;
    let p = proxy_toml(&toml(addr)).await;
    let (status, headers, body) = get(&h2_client(), p.addr, "/", &[]).await;
    assert_eq!((status, body.as_str()), (200, "ok"));
    let all: Vec<_> = headers.get_all("content-length").iter().collect();
    assert_eq!(all, ["2"]);
}

#[tokio::test]
async fn an_upstreams_lengths_that_disagree_get_a_502() {
    for res in [
        &b"HTTP/1.1 200 OK\r\ncontent-length: 2, 3\r\n\r\nok!"[..],
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nok!",
    ] {
        let res: &'static [u8] = res;
        let answer = answered(res).await;
        assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
        assert!(answer.contains("conflicting content-length"), "{answer}");
    }
}

/// A chunked answer whose framing breaks after its first chunk: the client never gets a
/// complete body (the head may have gone out already; then the connection is cut).
async fn refused_answer(res: &'static [u8]) {
    let answer = answered(res).await;
    assert!(!answer.ends_with("0\r\n\r\n"), "{answer}");
    assert!(!answer.contains("world"), "{answer}");
}

#[tokio::test]
async fn a_bare_lf_in_an_upstreams_chunked_body_is_refused() {
    refused_answer(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\nworld\r\n0\r\n\r\n")
        .await;
    refused_answer(
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n5\nworld\r\n0\r\n\r\n",
    )
    .await;
    refused_answer(
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nworld: 1\n\r\n",
    )
    .await;
}

#[tokio::test]
async fn an_upstreams_chunk_extensions_beyond_the_cap_are_refused() {
    let long: &'static [u8] = Box::leak(
        format!(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n5;{}\r\nworld\r\n0\r\n\r\n",
            "e".repeat(5000)
        )
        .into_bytes()
        .into_boxed_slice(),
    );
    refused_answer(long).await;
    let mut many = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..17 {
        many.extend_from_slice(format!("1;{}\r\nw\r\n", "e".repeat(1022)).as_bytes());
    }
    many.extend_from_slice(b"5\r\nworld\r\n0\r\n\r\n");
    refused_answer(Box::leak(many.into_boxed_slice())).await;
}
