//! The proxy's client-facing HTTP/1.1 on the wire: requests served by its own fast path
//! (pipelined, HTTP/1.0 with and without keep-alive, `HEAD`, uploads of a declared length and
//! chunked — a large one whole, a refused one read past, an invalid one refused without reading
//! on), `Expect: 100-continue` (the client invited when its body is read, never when the
//! request is refused first), a request the fast path hands to hyper's server in the middle of
//! a connection (an upgrade) served there without a byte lost, and a client that
//! leaves while its request runs cancelling it; a broken upload is the client's fault whichever
//! protocol the upstream speaks; a `host` that cannot be forwarded and a `CONNECT` refused with
//! the connection kept, an absolute target's authority sent on as the host.

mod proxy_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proxy_support::*;
use spillway_proxy::metrics::Fault;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn echo_proxy() -> (Backend, spillway_proxy::run::Running) {
    let b = backend("b").await;
    let p = proxy_toml(&format!("[upstream]\naddresses = [\"{}\"]\n", b.addr)).await;
    (b, p)
}

/// [`echo_proxy`] with the upstream spoken to over HTTP/2.
async fn echo_proxy_h2() -> (Backend, spillway_proxy::run::Running) {
    let b = backend("b").await;
    let p = proxy_toml(&format!(
        "[upstream]\naddresses = [\"{}\"]\nprotocol = \"http2\"\n",
        b.addr
    ))
    .await;
    (b, p)
}

/// A POST to `path` with a body of `len` bytes and its `content-length`, head and body.
fn post(path: &str, len: usize) -> Vec<u8> {
    let mut req =
        format!("POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {len}\r\n\r\n").into_bytes();
    req.resize(req.len() + len, b'x');
    req
}

/// The answers in `wire`, each as (head, body) — bodies framed by `content-length`, none after
/// the answers to `HEAD` requests (`head_at`: their positions).
fn answers(wire: &str, head_at: &[usize]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = wire;
    while let Some(end) = rest.find("\r\n\r\n") {
        let head = &rest[..end];
        let len: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length: ")
                    .map(str::to_string)
            })
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no content-length in {head}"));
        let len = if head_at.contains(&out.len()) { 0 } else { len };
        let body = &rest[end + 4..end + 4 + len];
        out.push((head.to_string(), body.to_string()));
        rest = &rest[end + 4 + len..];
    }
    assert!(rest.is_empty(), "left over: {rest:?}");
    out
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order_on_one_connection() {
    let (b, p) = echo_proxy().await;
    let wire = exchange(
        p.addr,
        b"GET /1 HTTP/1.1\r\nhost: x\r\n\r\n\
          HEAD /2 HTTP/1.1\r\nhost: x\r\n\r\n\
          GET /3 HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    let got = answers(&wire, &[1]);
    assert_eq!(got.len(), 3, "{wire}");
    assert!(
        got.iter()
            .all(|(h, _)| h.starts_with("HTTP/1.1 200 OK\r\n")),
        "{got:?}"
    );
    assert!(got[0].1.starts_with("b GET /1 "), "{got:?}");
    assert!(got[1].1.is_empty(), "{got:?}");
    assert!(got[2].1.starts_with("b GET /3 "), "{got:?}");
    assert!(got[2].0.contains("connection: close"), "{got:?}");
    assert_eq!(
        b.accepted.load(Ordering::SeqCst),
        1,
        "one upstream connection, reused"
    );
}

#[tokio::test]
async fn uploads_of_every_framing_mid_connection_arrive_whole() {
    let (_b, p) = echo_proxy().await;
    let wire = exchange(
        p.addr,
        b"GET /a HTTP/1.1\r\nhost: x\r\n\r\n\
          POST /b HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhello\
          POST /c HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n4;x=y\r\ndefg\r\n0\r\n\r\n\
          GET /d HTTP/1.1\r\nhost: x\r\n\r\n\
          DELETE /e HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
    )
    .await;
    let got = answers(&wire, &[]);
    assert_eq!(got.len(), 5, "{wire}");
    for (head, _) in &got {
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    }
    assert!(
        got[0].1.starts_with("b GET /a ") && got[0].1.ends_with("body=0"),
        "{got:?}"
    );
    assert!(
        got[1].1.starts_with("b POST /b ") && got[1].1.ends_with("body=5"),
        "{got:?}"
    );
    assert!(
        got[2].1.starts_with("b POST /c ") && got[2].1.ends_with("body=7"),
        "{got:?}"
    );
    assert!(got[3].1.starts_with("b GET /d "), "{got:?}");
    assert!(got[4].1.starts_with("b DELETE /e "), "{got:?}");
}

#[tokio::test]
async fn an_expect_continue_upload_sent_without_waiting_is_served_without_a_byte_lost() {
    let (_b, p) = echo_proxy().await;
    let wire = exchange(
        p.addr,
        b"GET /a HTTP/1.1\r\nhost: x\r\n\r\n\
          PUT /b HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 4\r\n\r\nwxyz\
          GET /c HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    // The body is asked for when its reader finds none yet: the invitation may come first.
    let wire = wire.replacen("HTTP/1.1 100 Continue\r\n\r\n", "", 1);
    let got = answers(&wire, &[]);
    assert_eq!(got.len(), 3, "{wire}");
    assert!(got[0].1.starts_with("b GET /a "), "{got:?}");
    assert!(
        got[1].1.starts_with("b PUT /b ") && got[1].1.ends_with("body=4"),
        "{got:?}"
    );
    assert!(got[2].1.starts_with("b GET /c "), "{got:?}");
}

/// A client that waits for `100 Continue` before its body, as curl does for larger uploads;
/// the connection then carries the next request.
async fn waits_to_be_invited(proxy: std::net::SocketAddr, version: &str) {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(
        b"PUT /up HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 5\r\n\r\n",
    )
    .await
    .unwrap();
    // Read byte by byte: nothing past the interim answer, which must come before the body.
    assert_eq!(read_head(&mut s).await, "HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(b"hello").await.unwrap();
    let mut got = Vec::new();
    let answered = tokio::time::timeout(
        Duration::from_secs(10),
        read_until(&mut s, &mut got, b"body=5"),
    )
    .await
    .expect("answered in time");
    assert!(answered.is_some(), "{}", String::from_utf8_lossy(&got));
    let wire = String::from_utf8_lossy(&got).into_owned();
    assert!(wire.starts_with("HTTP/1.1 200 OK\r\n"), "{wire}");
    assert!(wire.contains(&format!("b PUT /up v={version}")), "{wire}");
    s.write_all(b"GET /next HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut rest))
        .await
        .unwrap()
        .unwrap();
    let rest = String::from_utf8_lossy(&rest);
    assert!(rest.contains("b GET /next "), "{rest}");
}

#[tokio::test]
async fn a_client_waiting_for_100_continue_is_invited_and_its_connection_goes_on() {
    let (_b1, p1) = echo_proxy().await;
    waits_to_be_invited(p1.addr, "HTTP/1.1").await;
    // The body read by an HTTP/2 upstream connection's task, which asks from there.
    let (_b2, p2) = echo_proxy_h2().await;
    waits_to_be_invited(p2.addr, "HTTP/2.0").await;
}

#[tokio::test]
async fn an_upload_refused_before_it_was_invited_is_answered_and_the_connection_closed() {
    let (_b, p) = echo_proxy().await;
    // Refused before forwarding (a malformed deadline): the body is never asked for, so the
    // client is never invited and may never send it — the connection cannot go on.
    let wire = exchange(
        p.addr,
        b"PUT /up HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 5\r\nx-spillway-deadline-ms: soon\r\n\r\n",
    )
    .await;
    assert!(wire.starts_with("HTTP/1.1 400 "), "{wire}");
    assert!(!wire.contains("100 Continue"), "{wire}");
    assert!(wire.contains("connection: close"), "{wire}");
}

#[tokio::test]
async fn an_upload_with_invalid_chunked_coding_fails_and_its_connection_closes() {
    let (_b, p) = echo_proxy().await;
    // What follows the bad chunk must never be taken for a request of its own.
    let wire = exchange(
        p.addr,
        b"POST /bad HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n\
          GET /smuggled HTTP/1.1\r\nhost: x\r\n\r\n",
    )
    .await;
    assert!(!wire.contains("/smuggled"), "{wire}");
    // The client's fault, answered and counted as such; the upstream is not blamed.
    assert!(wire.starts_with("HTTP/1.1 400 "), "{wire}");
    assert!(wire.contains("x-spillway-reason: bad_body"), "{wire}");
    assert!(wire.contains("chunked coding is invalid"), "{wire}");
    assert_eq!(p.state.faults.get(Fault::BadRequest), 1);
    assert_eq!(p.state.faults.get(Fault::UpstreamReset), 0);
}

#[tokio::test]
async fn bodies_of_a_declared_length_arrive_whole_and_a_refused_one_is_read_past() {
    let (_b, p) = echo_proxy().await;
    // 1 MiB: sixteen times what the fast path holds between the client and the upstream.
    let mut req = post("/big", 1 << 20);
    // Refused before forwarding (a malformed deadline): its body is discarded, the connection
    // kept.
    req.extend_from_slice(
        b"PUT /bad HTTP/1.1\r\nhost: x\r\nx-spillway-deadline-ms: soon\r\ncontent-length: 6\r\n\r\nignore",
    );
    req.extend_from_slice(
        b"POST /after HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
    );
    let wire = exchange(p.addr, &req).await;
    let got = answers(&wire, &[]);
    assert_eq!(got.len(), 3, "{wire}");
    assert!(got[0].0.starts_with("HTTP/1.1 200 OK\r\n"), "{got:?}");
    assert!(
        got[0].1.starts_with("b POST /big ") && got[0].1.ends_with("body=1048576"),
        "{got:?}"
    );
    assert!(got[1].0.starts_with("HTTP/1.1 400 "), "{got:?}");
    assert!(
        got[2].1.starts_with("b POST /after ") && got[2].1.ends_with("body=2"),
        "{got:?}"
    );
}

#[tokio::test]
async fn http_1_0_is_answered_in_1_0_and_closed_unless_it_asks_to_keep_alive() {
    let (_b, p) = echo_proxy().await;
    let wire = exchange(p.addr, b"GET /old HTTP/1.0\r\n\r\n").await;
    let got = answers(&wire, &[]);
    assert_eq!(got.len(), 1, "{wire}");
    assert!(got[0].0.starts_with("HTTP/1.0 200 OK\r\n"), "{got:?}");
    assert!(got[0].1.contains("GET /old"), "{got:?}");

    let mut s = TcpStream::connect(p.addr).await.unwrap();
    for path in ["/one", "/two"] {
        let req = format!("GET {path} HTTP/1.0\r\nconnection: keep-alive\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let head = read_head(&mut s).await;
        assert!(head.starts_with("HTTP/1.0 200 OK\r\n"), "{head}");
        assert!(head.contains("connection: keep-alive\r\n"), "{head}");
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap();
        let mut body = vec![0; len];
        s.read_exact(&mut body).await.unwrap();
        assert!(String::from_utf8_lossy(&body).contains(path));
    }
}

#[tokio::test]
async fn an_upgrade_after_plain_requests_is_still_tunnelled() {
    // An upstream that answers one GET, then switches protocols and echoes bytes.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut b = [0u8; 4096];
                loop {
                    let n = match s.read(&mut b).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    buf.extend_from_slice(&b[..n]);
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                    buf.drain(..end + 4);
                    if head.contains("upgrade: echo") {
                        let _ = s
                            .write_all(b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: echo\r\n\r\n")
                            .await;
                        loop {
                            match s.read(&mut b).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => {
                                    if s.write_all(&b[..n]).await.is_err() {
                                        return;
                                    }
                                }
                            }
                        }
                    }
                    let _ = s
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                        .await;
                }
            });
        }
    });
    let p = proxy_toml(&format!("[upstream]\naddresses = [\"{up}\"]\n")).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET /plain HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let head = read_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    let mut ok = [0u8; 2];
    s.read_exact(&mut ok).await.unwrap();
    assert_eq!(&ok, b"ok");
    s.write_all(b"GET /tunnel HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: echo\r\n\r\n")
        .await
        .unwrap();
    let head = read_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    s.write_all(b"ping through the tunnel").await.unwrap();
    let mut back = [0u8; 23];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut back))
        .await
        .expect("echo in time")
        .unwrap();
    assert_eq!(&back, b"ping through the tunnel");
}

/// An upstream that never answers, counting the requests that reached it and the connections
/// the proxy closed.
async fn silent_upstream() -> (std::net::SocketAddr, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = l.local_addr().unwrap();
    let (seen, closed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (seen2, closed2) = (Arc::clone(&seen), Arc::clone(&closed));
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let (seen, closed) = (Arc::clone(&seen2), Arc::clone(&closed2));
            tokio::spawn(async move {
                let mut b = [0u8; 4096];
                let mut first = true;
                loop {
                    match s.read(&mut b).await {
                        Ok(0) | Err(_) => break,
                        Ok(_) if first => {
                            first = false;
                            seen.fetch_add(1, Ordering::SeqCst);
                        }
                        Ok(_) => {}
                    }
                }
                closed.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    (up, seen, closed)
}

/// A client sends a request to a silent upstream through a proxy with `upstream` keys added,
/// then leaves once the request has reached the upstream; how long (bounded by 10 s) until the
/// proxy closed the upstream connection.
async fn upstream_closed_after_the_client_left(upstream: &str) -> Duration {
    let (up, seen, closed) = silent_upstream().await;
    let p = proxy_toml(&format!("[upstream]\naddresses = [\"{up}\"]\n{upstream}")).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET /never HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while seen.load(Ordering::SeqCst) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the request never reached the upstream"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(closed.load(Ordering::SeqCst), 0);
    let left = tokio::time::Instant::now();
    drop(s);
    while closed.load(Ordering::SeqCst) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the upstream request outlived its client and the upstream timeout"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        p.state.status().admission.in_flight,
        0,
        "its slot was freed"
    );
    left.elapsed()
}

#[tokio::test]
async fn a_client_that_leaves_while_its_request_runs_cancels_it_upstream_when_told_to() {
    // `hold_abandoned = false`: the upstream exchange is cut when the client leaves.
    let took = upstream_closed_after_the_client_left("hold_abandoned = false\n").await;
    assert!(
        took < Duration::from_millis(1500),
        "cut {took:?} after the client left"
    );
}

#[tokio::test]
async fn a_client_that_leaves_while_its_request_runs_leaves_it_held_until_the_upstream_timeout() {
    // The default: the upstream still works on the request, so it keeps its slots until it
    // answers — this one never does, so until the upstream timeout (2 s here).
    let took = upstream_closed_after_the_client_left("request_timeout_ms = 2000\n").await;
    assert!(
        took >= Duration::from_millis(1500),
        "cut {took:?} after the client left"
    );
}

#[tokio::test]
async fn uploads_reach_an_http2_upstream_whole() {
    // The body is then read by the HTTP/2 connection's task, not the client connection's.
    let (_b, p) = echo_proxy_h2().await;
    let mut req = post("/big", 300 * 1024);
    req.extend_from_slice(
        b"POST /chunked HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    );
    let wire = exchange(p.addr, &req).await;
    let got = answers(&wire, &[]);
    assert_eq!(got.len(), 2, "{wire}");
    assert!(
        got[0].1.starts_with("b POST /big v=HTTP/2.0") && got[0].1.ends_with("body=307200"),
        "{got:?}"
    );
    assert!(
        got[1].1.starts_with("b POST /chunked v=HTTP/2.0") && got[1].1.ends_with("body=5"),
        "{got:?}"
    );
}

#[tokio::test]
async fn a_broken_upload_to_an_http2_upstream_is_the_clients_fault() {
    // The body breaks inside hyper's HTTP/2 client (which resets the stream): still answered
    // 400 and counted as a bad request, the healthy upstream not blamed.
    let (_b, p) = echo_proxy_h2().await;
    let wire = exchange(
        p.addr,
        b"POST /bad HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n",
    )
    .await;
    assert!(wire.starts_with("HTTP/1.1 400 "), "{wire}");
    assert!(wire.contains("x-spillway-reason: bad_body"), "{wire}");
    assert!(wire.contains("chunked coding is invalid"), "{wire}");
    assert_eq!(p.state.faults.get(Fault::BadRequest), 1);
    assert_eq!(p.state.faults.get(Fault::UpstreamReset), 0);
}

#[tokio::test]
async fn a_request_with_two_hosts_or_none_is_refused_and_an_absolute_target_names_the_host() {
    let (b, p) = echo_proxy().await;
    // Two hosts: the upstream might read the other one than the routes did.
    let wire = exchange(
        p.addr,
        b"GET /two HTTP/1.1\r\nhost: a.example\r\nhost: b.example\r\n\r\n\
          GET /none HTTP/1.1\r\n\r\n\
          GET /bad HTTP/1.1\r\nhost: a.example/evil\r\n\r\n\
          GET http://target.example:81/abs HTTP/1.1\r\nhost: other.example\r\n\r\n\
          GET /old HTTP/1.0\r\n\r\n",
    )
    .await;
    let got = answers(&wire, &[]);
    assert_eq!(got.len(), 5, "{wire}");
    for (i, what) in [
        (0, "more than one host"),
        (1, "needs a host"),
        (2, "host[:port]"),
    ] {
        assert!(got[i].0.starts_with("HTTP/1.1 400 "), "{got:?}");
        assert!(got[i].0.contains("x-spillway-reason: bad_host"), "{got:?}");
        assert!(got[i].1.contains(what), "{got:?}");
    }
    // The connection went on after each refusal (the framing was sound): the absolute target
    // reached the upstream in origin form with its own authority as the host.
    assert!(
        got[3].1.starts_with("b GET /abs ") && got[3].1.contains(" host=target.example:81 "),
        "{got:?}"
    );
    // HTTP/1.0 may leave the host out; the upstream gets the task's address.
    let task = format!(" host={} ", b.addr);
    assert!(
        got[4].1.starts_with("b GET /old ") && got[4].1.contains(&task),
        "{got:?}"
    );
    assert_eq!(p.state.faults.get(Fault::BadRequest), 3);
}

#[tokio::test]
async fn an_http2_upstream_gets_the_host_the_client_asked_for() {
    let (_b, p) = echo_proxy_h2().await;
    let wire = exchange(
        p.addr,
        b"GET /h HTTP/1.1\r\nhost: svc.example:8080\r\nconnection: close\r\n\r\n",
    )
    .await;
    let got = answers(&wire, &[]);
    assert!(
        got[0].1.starts_with("b GET /h v=HTTP/2.0") && got[0].1.contains(" host=svc.example:8080 "),
        "{got:?}"
    );
}

#[tokio::test]
async fn a_connect_is_refused_and_never_reaches_the_upstream() {
    let (_b, p) = echo_proxy().await;
    let wire = exchange(
        p.addr,
        b"CONNECT evil.example:443 HTTP/1.1\r\nhost: evil.example:443\r\n\r\n\
          GET /after HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    let got = answers(&wire, &[]);
    assert_eq!(got.len(), 2, "{wire}");
    assert!(got[0].0.starts_with("HTTP/1.1 501 "), "{got:?}");
    assert!(
        got[0].0.contains("x-spillway-reason: connect_unsupported"),
        "{got:?}"
    );
    // Not taken for a tunnel: the connection goes on with the next request.
    assert!(got[1].1.starts_with("b GET /after "), "{got:?}");
    assert_eq!(p.state.faults.get(Fault::BadRequest), 1);
}

#[tokio::test]
async fn a_connection_idle_past_its_timer_checks_serves_its_next_requests() {
    // The connection's timer checks every 50 ms (a quarter of the 200 ms header timeout); idle
    // for several checks, the connection lets go of its buffers (listener::http1) and reads
    // the next requests, pipelined, into new ones.
    let b = backend("b").await;
    let p = proxy_toml(&format!(
        "[listen]\nheader_read_timeout_ms = 200\n[upstream]\naddresses = [\"{}\"]\n",
        b.addr
    ))
    .await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET /1 HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut wire = Vec::new();
    let mut buf = [0u8; 4096];
    while answers(&String::from_utf8_lossy(&wire), &[]).is_empty()
        || !String::from_utf8_lossy(&wire).contains("b GET /1 ")
    {
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("the first answer within 5 s")
            .unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&wire));
        wire.extend_from_slice(&buf[..n]);
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    s.write_all(
        b"GET /2 HTTP/1.1\r\nhost: x\r\n\r\n\
          GET /3 HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await
    .unwrap();
    let mut rest = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut rest))
        .await
        .expect("the answers within 5 s")
        .unwrap();
    let got = answers(&rest, &[]);
    assert_eq!(got.len(), 2, "{rest}");
    assert!(got[0].1.starts_with("b GET /2 "), "{got:?}");
    assert!(got[1].1.starts_with("b GET /3 "), "{got:?}");
}
