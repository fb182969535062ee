//! The proxy's own HTTP/1.1 upstream client on the wire, against an upstream that writes its
//! answers byte by byte as scripted: chunked and close-delimited responses, bodiless ones
//! (HEAD, 204), a chunked upload of unknown length, garbage, a body cut short, an answer sent
//! before the upload was read, announced trailers, a response with both framings, an HTTP/2
//! client's cookie fields — each delivered (or refused) as RFC 9112 and RFC 9113 say, and a
//! connection reused only after a complete exchange.

mod proxy_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use proxy_support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the scripted upstream saw: each request's head and body (de-chunked).
type Seen = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// An upstream answering each request with `answer(head, n)` (`n`: the request's number on its
/// connection, from 0): the bytes to write, and whether to close the connection after them
/// (nothing and close: the request read and left unanswered). `read_body = false` answers
/// without reading the body.
struct Scripted {
    addr: std::net::SocketAddr,
    accepted: Arc<AtomicUsize>,
    seen: Seen,
}

async fn scripted(answer: fn(&str, usize) -> (Vec<u8>, bool), read_body: bool) -> Scripted {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let seen: Seen = Arc::default();
    let (a, s2) = (Arc::clone(&accepted), Arc::clone(&seen));
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            a.fetch_add(1, Ordering::SeqCst);
            let seen = Arc::clone(&s2);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                for n in 0.. {
                    let Some(end) = read_until(&mut s, &mut buf, b"\r\n\r\n").await else {
                        return;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                    buf.drain(..end);
                    let mut body = Vec::new();
                    if read_body {
                        if head.contains("transfer-encoding: chunked") {
                            let Some(e) = read_until(&mut s, &mut buf, b"0\r\n\r\n").await else {
                                return;
                            };
                            body = dechunk(&buf[..e]);
                            buf.drain(..e);
                        } else if let Some(n) = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length: "))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                        {
                            while buf.len() < n {
                                let mut b = [0u8; 65536];
                                match s.read(&mut b).await {
                                    Ok(0) | Err(_) => return,
                                    Ok(k) => buf.extend_from_slice(&b[..k]),
                                }
                            }
                            body = buf.drain(..n).collect();
                        }
                    }
                    let (out, close) = answer(&head, n);
                    seen.lock().unwrap().push((head, body));
                    if s.write_all(&out).await.is_err() || close {
                        return;
                    }
                }
            });
        }
    });
    Scripted {
        addr,
        accepted,
        seen,
    }
}

/// The data of a whole chunked body (sizes without extensions, as the proxy writes them).
fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let nl = b.windows(2).position(|w| w == b"\r\n").expect("size line");
        let n = usize::from_str_radix(std::str::from_utf8(&b[..nl]).unwrap(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[nl + 2..nl + 2 + n]);
        b = &b[nl + 2 + n + 2..];
    }
}

/// A scripted upstream's answer to anything: `200 ok`, the connection kept.
fn ok(_: &str, _: usize) -> (Vec<u8>, bool) {
    (
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec(),
        false,
    )
}

fn upstream_toml(addr: std::net::SocketAddr) -> String {
    format!("[upstream]\naddresses = [\"{addr}\"]\nmax_idle_per_task = 4\n")
}

#[tokio::test]
async fn a_chunked_upload_of_unknown_length_arrives_chunked_and_whole() {
    let up = scripted(ok, true).await;
    let p = proxy_toml(&upstream_toml(up.addr)).await;
    // The rest of the body only after a pause: while the proxy decides where the request goes
    // its length is unknown (a body already whole when it looks is buffered and sent with its
    // length instead, which is also right).
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"POST /up HTTP/1.1\r\nhost: x\r\nconnection: close\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    s.write_all(b"6;ext=1\r\n world\r\n0\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("answer in time")
        .unwrap();
    let answer = String::from_utf8_lossy(&out);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("ok"), "{answer}");
    let seen = up.seen.lock().unwrap();
    let (head, body) = &seen[0];
    assert!(head.starts_with("post /up http/1.1\r\n"), "{head}");
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    assert!(!head.contains("content-length"), "{head}");
    assert_eq!(body, b"hello world");
}

#[tokio::test]
async fn chunked_and_close_delimited_responses_pass_through() {
    let up = scripted(
        |head, _| {
            if head.starts_with("get /close ") {
                (b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil the end".to_vec(), true)
            } else {
                let body = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n4;x=y\r\ndefg\r\n0\r\nx-t: 1\r\n\r\n";
                (body.to_vec(), false)
            }
        },
        true,
    )
    .await;
    let p = proxy_toml(&upstream_toml(up.addr)).await;
    let c = client();
    for _ in 0..3 {
        let (status, _, body) = get(&c, p.addr, "/chunked", &[]).await;
        assert_eq!((status, body.as_str()), (200, "abcdefg"));
    }
    assert_eq!(
        up.accepted.load(Ordering::SeqCst),
        1,
        "one connection, reused"
    );
    let (status, _, body) = get(&c, p.addr, "/close", &[]).await;
    assert_eq!((status, body.as_str()), (200, "until the end"));
    let (status, _, body) = get(&c, p.addr, "/chunked", &[]).await;
    assert_eq!((status, body.as_str()), (200, "abcdefg"));
    assert_eq!(
        up.accepted.load(Ordering::SeqCst),
        2,
        "the close-delimited answer's connection is not reused"
    );
}

#[tokio::test]
async fn head_and_no_content_answers_have_no_body() {
    let up = scripted(
        |head, _| {
            if head.starts_with("head ") {
                (
                    b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n".to_vec(),
                    false,
                )
            } else {
                (b"HTTP/1.1 204 No Content\r\n\r\n".to_vec(), false)
            }
        },
        true,
    )
    .await;
    let p = proxy_toml(&upstream_toml(up.addr)).await;
    let c = client();
    for _ in 0..2 {
        let req = http::Request::head(format!("http://{}/h", p.addr))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let res = c.request(req).await.expect("response");
        assert_eq!(res.status(), 200);
        assert_eq!(res.headers()["content-length"], "9");
        assert!(res
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .is_empty());
        let (status, _, body) = get(&c, p.addr, "/none", &[]).await;
        assert_eq!((status, body.as_str()), (204, ""));
    }
    assert_eq!(
        up.accepted.load(Ordering::SeqCst),
        1,
        "one connection, reused"
    );
}

#[tokio::test]
async fn an_upstream_speaking_garbage_gets_a_502_that_says_so() {
    let up = scripted(
        |_, _| (b"SSH-2.0-OpenSSH_9.2\r\n\r\n".to_vec(), false),
        true,
    )
    .await;
    let p = proxy_toml(&upstream_toml(up.addr)).await;
    let (status, headers, body) = get(&client(), p.addr, "/", &[]).await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(headers["x-spillway-reason"], "upstream_invalid", "{body}");
    assert!(
        body.contains(&format!(
            "upstream {} sent an invalid response: response head",
            up.addr
        )),
        "{body}"
    );
    // Counted as the upstream's fault of its own kind, not as a broken connection.
    let faults = p.state.status().faults.0;
    assert_eq!(
        (faults["upstream_invalid"], faults["upstream_reset"]),
        (1, 0)
    );
}

#[tokio::test]
async fn a_body_cut_short_is_an_error_and_its_connection_not_reused() {
    let up = scripted(
        |head, _| {
            if head.starts_with("get /cut ") {
                (
                    b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhello".to_vec(),
                    true,
                )
            } else {
                (
                    b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec(),
                    false,
                )
            }
        },
        true,
    )
    .await;
    let p = proxy_toml(&upstream_toml(up.addr)).await;
    let c = client();
    let res = c
        .request(
            http::Request::get(format!("http://{}/cut", p.addr))
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await;
    // 5 of 10 bytes: the client must not see a complete answer — either the connection ends
    // before the head (the proxy's server had not flushed it yet) or the body fails.
    if let Ok(res) = res {
        assert_eq!(res.status(), 200);
        assert!(
            res.into_body().collect().await.is_err(),
            "a body cut short must fail, not end"
        );
    }
    let (status, _, body) = get(&c, p.addr, "/", &[]).await;
    assert_eq!((status, body.as_str()), (200, "ok"));
    assert_eq!(up.accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_answer_before_the_upload_was_read_reaches_the_client() {
    // The upstream refuses a 256 KiB upload without reading it, and keeps the connection.
    let up = scripted(
        |_, _| {
            (
                b"HTTP/1.1 413 Content Too Large\r\ncontent-length: 8\r\n\r\ntoo big!".to_vec(),
                false,
            )
        },
        false,
    )
    .await;
    let p = proxy_toml(&upstream_toml(up.addr)).await;
    let c = client();
    let req = http::Request::post(format!("http://{}/up", p.addr))
        .body(Full::new(Bytes::from(vec![b'u'; 256 * 1024])))
        .unwrap();
    let res = tokio::time::timeout(Duration::from_secs(10), c.request(req))
        .await
        .expect("in time")
        .expect("response");
    assert_eq!(res.status(), 413);
    assert_eq!(
        res.into_body().collect().await.unwrap().to_bytes(),
        "too big!"
    );
    // Whether the upload was still being written when the answer came (then the connection
    // is closed) or had all gone into the socket's buffers (then it is complete and reused),
    // the next request is answered.
    let (status, _, _) = get(&c, p.addr, "/", &[]).await;
    assert_eq!(status, 413);
}

#[tokio::test]
async fn a_safe_request_caught_by_the_keep_alive_race_is_sent_again_an_unsafe_one_is_not() {
    // Each connection's first request is answered (keep-alive); its second is read and the
    // connection closed under it without a byte of answer: the race, made certain.
    let up = scripted(
        |_, n| match n {
            0 => (
                b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec(),
                false,
            ),
            _ => (Vec::new(), true),
        },
        true,
    )
    .await;
    let p = proxy_toml(&upstream_toml(up.addr)).await;
    let c = client();
    for round in 1..=3 {
        // The first GET opens a connection; the second goes out on it, is read and dropped
        // unanswered, and is answered on a new connection.
        let (status, _, body) = get(&c, p.addr, "/", &[]).await;
        assert_eq!((status, body.as_str()), (200, "ok"), "round {round}");
    }
    assert!(up.accepted.load(Ordering::SeqCst) >= 3);
    // A POST meeting the same race is not sent twice: the client gets the 502.
    let mut saw_502 = false;
    for _ in 0..3 {
        let req = http::Request::post(format!("http://{}/", p.addr))
            .body(Full::new(Bytes::from_static(b"once")))
            .unwrap();
        let res = c.request(req).await.expect("response");
        if res.status() == 502 {
            let body = res.into_body().collect().await.unwrap().to_bytes();
            let text = String::from_utf8_lossy(&body);
            assert!(
                text.contains("closed the connection before the response head"),
                "{text}"
            );
            saw_502 = true;
        }
    }
    assert!(
        saw_502,
        "one of three POSTs goes out on a connection that is then closed"
    );
}

/// `req`'s answers (read until the proxy closes the connection) through a proxy in front of an
/// upstream answering every request with `answer`'s bytes; and what the upstream saw.
async fn through(answer: fn(&str, usize) -> (Vec<u8>, bool), req: &[u8]) -> (Seen, String) {
    let up = scripted(answer, true).await;
    let p = proxy_toml(&upstream_toml(up.addr)).await;
    let wire = exchange(p.addr, req).await;
    (up.seen, wire)
}

#[tokio::test]
async fn announced_trailers_reach_an_http1_client_that_takes_them() {
    let (seen, wire) = through(
        |_, _| {
            let r = b"HTTP/1.1 200 OK\r\ntrailer: x-sum\r\ntransfer-encoding: chunked\r\n\r\n\
                      3\r\nabc\r\n0\r\nx-sum: 42\r\nx-other: 1\r\n\r\n";
            (r.to_vec(), false)
        },
        b"GET /t HTTP/1.1\r\nhost: x\r\nte: trailers\r\nconnection: close\r\n\r\n",
    )
    .await;
    let lower = wire.to_ascii_lowercase();
    assert!(lower.contains("\r\ntrailer: x-sum\r\n"), "{wire}");
    // The announced one arrives in the trailer section; the unannounced one does not (hyper's
    // server's rule, kept by the proxy's own).
    assert!(lower.ends_with("0\r\nx-sum: 42\r\n\r\n"), "{wire}");
    // The client's `te: trailers` reached the upstream.
    assert!(seen.lock().unwrap()[0].0.contains("te: trailers"));
}

#[tokio::test]
async fn a_response_with_both_framings_is_sent_on_without_its_content_length() {
    // Chunked wins over a length (RFC 9112 §6.3); the length, left in, would make the client
    // read the chunked body's 2 bytes as a 5-byte one and take the next answer's start for it.
    let (_, wire) = through(
        |_, _| {
            let r = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n\
                      2\r\nok\r\n0\r\n\r\n";
            (r.to_vec(), false)
        },
        b"GET /a HTTP/1.1\r\nhost: x\r\n\r\nGET /b HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    let lower = wire.to_ascii_lowercase();
    assert!(!lower.contains("content-length: 5"), "{wire}");
    assert_eq!(lower.matches("http/1.1 200 ok").count(), 2, "{wire}");
    assert_eq!(
        lower.matches("\r\n2\r\nok\r\n0\r\n\r\n").count(),
        2,
        "{wire}"
    );
}

#[tokio::test]
async fn a_transfer_coding_the_proxy_cannot_pass_on_gets_a_502_not_coded_bytes() {
    // `gzip` as a transfer coding: the bytes used to reach the client with nothing saying
    // they were coded (the field is hop-by-hop, and an HTTP/2 client has no transfer codings).
    let up = scripted(
        |_, _| {
            let r = b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n\x1f\x8bcoded";
            (r.to_vec(), true)
        },
        true,
    )
    .await;
    let p = proxy_toml(&upstream_toml(up.addr)).await;
    let (status, headers, body) = get(&client(), p.addr, "/", &[]).await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(headers["x-spillway-reason"], "upstream_invalid", "{body}");
    assert!(
        body.contains("transfer-encoding other than chunked"),
        "{body}"
    );
}

#[tokio::test]
async fn an_http2_clients_cookie_fields_reach_an_http1_upstream_as_one() {
    let up = scripted(ok, true).await;
    let p = proxy_toml(&format!(
        "[upstream]\naddresses = [\"{}\"]\nprotocol = \"http1\"\n",
        up.addr
    ))
    .await;
    let (status, _, _) = get(
        &h2_client(),
        p.addr,
        "/c",
        &[("cookie", "a=1"), ("cookie", "b=2")],
    )
    .await;
    assert_eq!(status, 200);
    let head = up.seen.lock().unwrap()[0].0.clone();
    // RFC 9113 §8.2.3: one field, crumbs joined by "; ".
    assert_eq!(head.matches("cookie:").count(), 1, "{head}");
    assert!(head.contains("\r\ncookie: a=1; b=2\r\n"), "{head}");
}

#[tokio::test]
async fn in_auto_mode_an_http2_client_reaches_an_upstream_that_speaks_only_http1() {
    let up = scripted(ok, true).await;
    // The default protocol, `auto`, as the zero-config form has it.
    let p = proxy_toml(&format!("[upstream]\naddresses = [\"{}\"]\n", up.addr)).await;
    let c = h2_client();
    for _ in 0..3 {
        let (status, _, body) = get(&c, p.addr, "/x", &[]).await;
        assert_eq!((status, body.as_str()), (200, "ok"));
    }
    let seen = up.seen.lock().unwrap().clone();
    // Asked once (the HTTP/2 preface, which this upstream reads as two heads and answers),
    // then every request over HTTP/1.1.
    assert!(seen[0].0.starts_with("pri * http/2.0"), "{seen:?}");
    let count = |p: &str| seen.iter().filter(|(h, _)| h.starts_with(p)).count();
    assert_eq!(count("pri * http/2.0"), 1, "{seen:?}");
    assert_eq!(count("get /x http/1.1"), 3, "{seen:?}");
}

/// An answer with end-to-end fields in mixed case and trailing space, hop-by-hop ones, a
/// length, a date and a cost report; with `X-Hop` named by `connection` from the second
/// request on a connection.
fn mixed(_: &str, n: usize) -> (Vec<u8>, bool) {
    let connection = if n == 0 {
        "keep-alive"
    } else {
        "keep-alive, X-Hop"
    };
    let r = format!(
        "HTTP/1.1 200 OK\r\nServer: Scripted\r\nX-Mixed-Case: Value  \r\n\
         Connection: {connection}\r\nX-Hop: secret\r\nKeep-Alive: timeout=5\r\n\
         Proxy-Connection: keep-alive\r\nContent-Length: 2\r\n\
         Date: Tue, 01 Dec 2026 00:00:00 GMT\r\nx-spillway-cost: 0.25\r\n\r\nok"
    );
    (r.into_bytes(), false)
}

#[tokio::test]
async fn an_upstreams_fields_reach_an_http1_client_as_written_and_hop_by_hop_ones_do_not() {
    // Two pipelined requests on one connection: both answers whole, the second closing it.
    let (_, wire) = through(
        mixed,
        b"GET /a HTTP/1.1\r\nhost: x\r\n\r\nGET /b HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    let answers: Vec<&str> = wire.split("HTTP/1.1 200 OK\r\n").skip(1).collect();
    assert_eq!(answers.len(), 2, "{wire}");
    for (i, a) in answers.iter().enumerate() {
        let (head, body) = a.split_once("\r\n\r\n").expect("a whole head");
        assert_eq!(body, "ok", "{wire}");
        let lines: Vec<&str> = head.split("\r\n").collect();
        let has = |f: &str| lines.iter().any(|l| l.eq_ignore_ascii_case(f));
        for f in [
            "Server: Scripted",
            "X-Mixed-Case: Value",
            "Content-Length: 2",
            "Date: Tue, 01 Dec 2026 00:00:00 GMT",
            "x-spillway-cost: 0.25",
        ] {
            assert!(has(f), "{f:?} in {lines:?}");
            // The first answer's fields pass as the upstream spelt them; the second's, with a
            // field named for removal, go through the map (lower-cased names).
            assert_eq!(
                lines.contains(&f),
                i == 0 || f.starts_with("x-"),
                "{f:?} in {lines:?}"
            );
        }
        let count = |name: &str| {
            lines
                .iter()
                .filter(|l| l.to_ascii_lowercase().starts_with(&format!("{name}:")))
                .count()
        };
        assert_eq!(
            (count("content-length"), count("date")),
            (1, 1),
            "{lines:?}"
        );
        let hop = if i == 0 { 1 } else { 0 };
        assert_eq!(
            count("x-hop"),
            hop,
            "x-hop removed only when named: {lines:?}"
        );
        for hop in ["keep-alive", "proxy-connection"] {
            assert_eq!(count(hop), 0, "{hop} removed: {lines:?}");
        }
        let close = if i == 1 { 1 } else { 0 };
        assert_eq!(count("connection"), close, "{lines:?}");
    }
}

#[tokio::test]
async fn an_http2_client_gets_the_same_end_to_end_fields() {
    let up = scripted(mixed, true).await;
    let p = proxy_toml(&upstream_toml(up.addr)).await;
    let (status, headers, body) = get(&h2_client(), p.addr, "/a", &[]).await;
    assert_eq!((status, body.as_str()), (200, "ok"));
    for (name, value) in [
        ("server", "Scripted"),
        ("x-mixed-case", "Value"),
        ("content-length", "2"),
        ("date", "Tue, 01 Dec 2026 00:00:00 GMT"),
        ("x-spillway-cost", "0.25"),
        ("x-hop", "secret"),
    ] {
        assert_eq!(
            headers.get(name).map(|v| v.as_bytes()),
            Some(value.as_bytes()),
            "{name}"
        );
    }
    for hop in ["keep-alive", "proxy-connection", "connection"] {
        assert!(!headers.contains_key(hop), "{hop} removed: {headers:?}");
    }
}
