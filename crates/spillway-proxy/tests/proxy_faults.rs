//! Upgrades, shedding order, slow clients, connection cap, large bodies.

mod proxy_support;

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use proxy_support::*;
use spillway_proxy::metrics::Fault;
use spillway_proxy::run::Running;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[tokio::test]
async fn websocket_style_upgrade_is_tunnelled() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = l.local_addr().unwrap();
    tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        let svc = service_fn(|mut req: hyper::Request<Incoming>| async move {
            let on = hyper::upgrade::on(&mut req);
            tokio::spawn(async move {
                if let Ok(u) = on.await {
                    let mut io = TokioIo::new(u);
                    let mut buf = [0u8; 64];
                    while let Ok(n) = io.read(&mut buf).await {
                        if n == 0 || io.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                }
            });
            let mut res = hyper::Response::new(Full::new(Bytes::new()));
            *res.status_mut() = hyper::StatusCode::SWITCHING_PROTOCOLS;
            res.headers_mut()
                .insert("connection", "upgrade".parse().unwrap());
            res.headers_mut().insert("upgrade", "echo".parse().unwrap());
            Ok::<_, Infallible>(res)
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(s), svc)
            .with_upgrades()
            .await;
    });
    let p = proxy_toml(&format!("[upstream]\naddresses = [\"{up}\"]\n")).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET /ws HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: echo\r\n\r\n")
        .await
        .unwrap();
    let head = read_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    for msg in [&b"ping"[..], b"pong!"] {
        s.write_all(msg).await.unwrap();
        let mut buf = vec![0u8; msg.len()];
        tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(buf, msg);
    }
}

/// A backend and a proxy in front of it whose header-read timeout is `ms`.
async fn with_header_timeout(ms: u64) -> (Backend, Running) {
    with_listen(&format!("header_read_timeout_ms = {ms}")).await
}

/// A backend and a proxy in front of it with these `[listen]` keys.
async fn with_listen(keys: &str) -> (Backend, Running) {
    let b = backend("b").await;
    let p = proxy_toml(&format!(
        "[upstream]\naddresses = [\"{}\"]\n[listen]\n{keys}\n",
        b.addr
    ))
    .await;
    (b, p)
}

#[tokio::test]
async fn slow_client_header_timeout_is_counted() {
    let (_b, p) = with_header_timeout(200).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n").await.unwrap();
    let mut buf = Vec::new();
    // The proxy closes the connection (hyper answers 408 or just closes).
    let r = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await;
    assert!(r.is_ok(), "connection closed by the header-read timeout");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(p.state.faults.get(Fault::HeaderTimeout), 1);
}

/// Sends `GET path` on `s` and reads the whole response (head and content-length body).
async fn get_on(s: &mut TcpStream, path: &str) -> String {
    s.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let head = read_head(s).await;
    let len = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse::<usize>().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await.unwrap();
    head
}

/// Reads until the proxy closes `s` (EOF or reset), failing after 5 s.
async fn closed_by_proxy(s: &mut TcpStream) {
    let mut buf = Vec::new();
    let r = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await;
    assert!(r.is_ok(), "the proxy closed the connection");
}

/// Waits (up to 10 s) until the proxy has counted one `fault` — a connection cut for a stall
/// — and checks that the admission slot the request held is free again.
async fn cut_and_freed(p: &Running, fault: Fault) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while p.state.faults.get(fault) == 0 {
        assert!(std::time::Instant::now() < deadline, "never cut");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        p.state.status().admission.in_flight,
        0,
        "the admission slot is free"
    );
}

/// Waits for the proxy to close `s`, then gives the count a moment to land and reads the
/// header timeouts counted so far.
async fn header_timeouts_once_closed(s: &mut TcpStream, p: &Running) -> u64 {
    closed_by_proxy(s).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    p.state.faults.get(Fault::HeaderTimeout)
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_and_counted() {
    // Before the proxy kept its own header timer, hyper-util's HTTP/1.1-or-h2 detection waited
    // for the first bytes with no timeout at all.
    let (_b, p) = with_header_timeout(200).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    assert_eq!(header_timeouts_once_closed(&mut s, &p).await, 1);
}

#[tokio::test]
async fn a_slow_head_on_a_kept_alive_connection_is_cut_and_counted() {
    let (_b, p) = with_header_timeout(200).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    assert!(get_on(&mut s, "/").await.starts_with("HTTP/1.1 200"));
    s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n").await.unwrap();
    assert_eq!(header_timeouts_once_closed(&mut s, &p).await, 1);
}

#[tokio::test]
async fn a_kept_alive_connection_outlives_the_header_timeout_and_closes_idle_uncounted() {
    // It used to be closed at the header timeout: a client reusing its pooled connection
    // after a pause longer than that raced the close and could lose the request.
    let (_b, p) = with_listen("header_read_timeout_ms = 200\nidle_timeout_ms = 1500").await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    assert!(get_on(&mut s, "/").await.starts_with("HTTP/1.1 200"));
    tokio::time::sleep(Duration::from_millis(700)).await; // 3.5 header timeouts
    assert!(get_on(&mut s, "/").await.starts_with("HTTP/1.1 200"));
    assert_eq!(
        header_timeouts_once_closed(&mut s, &p).await,
        0,
        "idle is not slow"
    );
}

#[tokio::test]
async fn at_the_connection_cap_an_idle_connection_makes_room_for_a_waiting_one() {
    let (_b, p) = with_listen("max_connections = 1\nheader_read_timeout_ms = 200").await;
    let mut idle = TcpStream::connect(p.addr).await.unwrap();
    assert!(get_on(&mut idle, "/").await.starts_with("HTTP/1.1 200"));
    // The cap is reached; this one waits in the backlog with its request. Without the
    // reclaim it would wait out the idle one's 75 s.
    let mut waiting = TcpStream::connect(p.addr).await.unwrap();
    let served = tokio::time::timeout(Duration::from_secs(5), get_on(&mut waiting, "/"))
        .await
        .expect("served once the idle connection gave its slot up");
    assert!(served.starts_with("HTTP/1.1 200"), "{served}");
    closed_by_proxy(&mut idle).await;
    assert_eq!(
        p.state.faults.get(Fault::HeaderTimeout),
        0,
        "idle is not slow"
    );
}

#[tokio::test]
async fn a_client_that_stops_reading_its_response_is_cut_and_its_slots_freed() {
    // It used to hold its connection, the upstream connection and its admission slot for as
    // long as it kept the socket open: a few such clients took the whole concurrency limit.
    let (_b, p) = with_listen("header_read_timeout_ms = 200\nsend_timeout_ms = 500").await;
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut s = sock.connect(p.addr).await.unwrap();
    s.write_all(b"GET /large-answer HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    // Nothing read: the proxy's writes fill the socket and stop.
    cut_and_freed(&p, Fault::SendTimeout).await;
    assert!(
        p.state.status().upstreams.iter().all(|u| u.in_flight == 0),
        "the upstream slot is free"
    );
    // What the client had not read ends short of the body: the connection was cut.
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got)).await;
    assert!(got.len() < BIG, "{} bytes", got.len());
    // A client that reads gets the whole of it through the same proxy.
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    let head = get_on(&mut s, "/large-answer").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
}

/// An HTTP/2 connection to `p` whose streams get `window` bytes of credit at first, with a
/// `/large-answer` request on it: the sender, the connection's task and the answer's body.
async fn large_answer_over_h2(
    p: &Running,
    window: u32,
) -> (
    hyper::client::conn::http2::SendRequest<http_body_util::Empty<Bytes>>,
    tokio::task::JoinHandle<hyper::Result<()>>,
    Incoming,
) {
    let io = TokioIo::new(TcpStream::connect(p.addr).await.unwrap());
    let (mut tx, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(window)
        .handshake::<_, http_body_util::Empty<Bytes>>(io)
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    let res = tx
        .send_request(empty_get(p.addr, "/large-answer"))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    (tx, conn, res.into_body())
}

#[tokio::test]
async fn an_http2_client_that_grants_no_flow_control_credit_is_cut_and_its_slots_freed() {
    // The socket never fills (the client reads it); the stream's window is spent after 1 KiB
    // and never granted again, so the proxy writes nothing and its body waits with data.
    let (_b, p) = with_listen("header_read_timeout_ms = 200\nsend_timeout_ms = 500").await;
    let (_tx, conn, held) = large_answer_over_h2(&p, 1024).await;
    cut_and_freed(&p, Fault::SendTimeout).await;
    let ended = tokio::time::timeout(Duration::from_secs(5), conn).await;
    assert!(ended.is_ok(), "the connection was closed");
    drop(held);
}

#[tokio::test]
async fn an_http2_stream_given_no_credit_is_cut_alone_while_its_connection_moves() {
    // One stream's window is spent and never granted again while the client keeps the
    // connection busy with other requests: the connection is never quiet, so only a rule for
    // the one stream frees the admission slot and upstream connection it holds.
    let (_b, p) = with_listen("header_read_timeout_ms = 200\nsend_timeout_ms = 500").await;
    let (mut tx, conn, held) = large_answer_over_h2(&p, 1024).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut served = 0;
    while p.state.faults.get(Fault::SendTimeout) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "never cut ({served} requests served beside it)"
        );
        let r = tx.send_request(empty_get(p.addr, "/")).await.unwrap();
        assert_eq!(r.status(), 200);
        r.into_body().collect().await.unwrap();
        served += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        p.state.status().admission.in_flight,
        0,
        "the admission slot is free"
    );
    assert!(
        p.state.status().upstreams.iter().all(|u| u.in_flight == 0),
        "the upstream slot is free"
    );
    // The connection goes on serving; the cut stream ends in a reset once read, not as a
    // body that looks complete.
    let r = tx.send_request(empty_get(p.addr, "/")).await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(!conn.is_finished(), "the connection was not cut");
    let read = tokio::time::timeout(Duration::from_secs(5), held.collect())
        .await
        .expect("the cut stream ends");
    assert!(read.is_err(), "a cut response must not read as complete");
}

/// Reads `/large-answer` over HTTP/2 `chunk` bytes at a time with `pause` between, for 3 s
/// (six send timeouts), the stream's window `window`; checks that nothing was cut.
async fn read_slowly_uncut(window: u32, chunk: usize, pause: Duration) {
    let (_b, p) = with_listen("header_read_timeout_ms = 200\nsend_timeout_ms = 500").await;
    let (_tx, conn, mut body) = large_answer_over_h2(&p, window).await;
    let started = std::time::Instant::now();
    let mut got = 0usize;
    while started.elapsed() < Duration::from_secs(3) {
        let mut this_tick = 0;
        while this_tick < chunk {
            match body.frame().await {
                Some(Ok(f)) => this_tick += f.data_ref().map_or(0, |d| d.len()),
                other => panic!("the slow reader's answer broke after {got} bytes: {other:?}"),
            }
        }
        got += this_tick;
        tokio::time::sleep(pause).await;
    }
    assert_eq!(
        p.state.faults.get(Fault::SendTimeout),
        0,
        "a live reader was cut"
    );
    assert!(!conn.is_finished());
    drop(body);
}

#[tokio::test]
async fn a_slow_but_live_http2_reader_is_not_cut() {
    // Reading a large answer a little at a time: the socket is full at most checks and the
    // body is polled only as hyper's buffers drain, at the client's pace — never a stall.
    read_slowly_uncut(256 * 1024, 64 * 1024, Duration::from_millis(100)).await;
}

#[tokio::test]
async fn a_reader_paced_by_small_http2_credit_is_not_cut() {
    // The client grants 16 KiB of stream credit at a time, every 200 ms: the socket is never
    // full, and the stream moves only as fast as the credit — slow, not stalled.
    read_slowly_uncut(16 * 1024, 16 * 1024, Duration::from_millis(200)).await;
}

#[tokio::test]
async fn a_client_that_stops_sending_a_streamed_body_is_cut_and_its_slots_freed() {
    // A body too large to buffer goes upstream as it comes; a client that stops sending it
    // used to hold the upstream connection and its admission slot for as long as it liked.
    let (b, p) = with_listen("header_read_timeout_ms = 200\nbody_read_timeout_ms = 500").await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"POST /upload HTTP/1.1\r\nhost: x\r\ncontent-length: 1000000\r\n\r\nfirst bytes")
        .await
        .unwrap();
    cut_and_freed(&p, Fault::BodyTimeout).await;
    closed_by_proxy(&mut s).await;
    assert!(
        b.accepted.load(std::sync::atomic::Ordering::SeqCst) >= 1,
        "it was streamed"
    );
}

#[tokio::test]
async fn an_http2_upload_the_client_stops_sending_is_cut_too() {
    // The same rule for a body that comes through hyper's server.
    let (_b, p) = with_listen("header_read_timeout_ms = 200\nbody_read_timeout_ms = 500").await;
    let io = TokioIo::new(TcpStream::connect(p.addr).await.unwrap());
    let (tx_frames, rx_frames) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(1);
    let body = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx_frames));
    let (mut tx, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    tx_frames
        .send(Ok(Frame::data(Bytes::from_static(b"first bytes"))))
        .await
        .unwrap();
    let req = hyper::Request::post(format!("http://{}/upload", p.addr))
        .header("content-length", "1000000")
        .body(body)
        .unwrap();
    let sent = tokio::spawn(tx.send_request(req));
    cut_and_freed(&p, Fault::BodyTimeout).await;
    let _ = tokio::time::timeout(Duration::from_secs(5), sent).await;
    let ended = tokio::time::timeout(Duration::from_secs(5), conn).await;
    assert!(ended.is_ok(), "the connection was closed");
    drop(tx_frames);
}

#[tokio::test]
async fn an_upstream_that_stops_mid_answer_is_cut_and_its_slots_freed() {
    // It used to hold the admission and upstream slots for as long as the upstream kept the
    // connection open, the client's too (or after the client had gone: nothing is written).
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let _ = read_head(&mut s).await;
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
                    .await;
                tokio::time::sleep(Duration::from_secs(30)).await;
            });
        }
    });
    let p = proxy_toml(&format!(
        "[upstream]\naddresses = [\"{up}\"]\nresponse_body_timeout_ms = 500\n\
         [listen]\nheader_read_timeout_ms = 200\n"
    ))
    .await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let r = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got)).await;
    assert!(r.is_ok(), "the proxy cut the answer it could not complete");
    let got = String::from_utf8_lossy(&got);
    assert!(
        got.starts_with("HTTP/1.1 200") && got.ends_with("partial"),
        "{got}"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(p.state.faults.get(Fault::UpstreamTimeout), 1);
    assert_eq!(
        p.state.status().admission.in_flight,
        0,
        "the admission slot is free"
    );
    let upstreams = p.state.status().upstreams;
    assert!(
        upstreams.iter().all(|u| u.in_flight == 0),
        "the upstream slot is free"
    );
    assert_eq!(
        upstreams[0].failures_total, 1,
        "the silent task is charged a failure"
    );
}

#[tokio::test]
async fn half_an_http2_preface_is_cut_and_counted() {
    // The first bytes of the preface used to exempt the connection from the timeout for good.
    let (_b, p) = with_header_timeout(200).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    assert_eq!(header_timeouts_once_closed(&mut s, &p).await, 1);
}

#[tokio::test]
async fn an_http2_connection_with_no_request_is_cut_and_an_idle_one_closed_uncounted() {
    let b = backend("b").await;
    let p = proxy_toml(&format!(
        "[upstream]\naddresses = [\"{}\"]\n[listen]\nheader_read_timeout_ms = 200\n\
         idle_timeout_ms = 400\n",
        b.addr
    ))
    .await;
    // Preface and SETTINGS, then nothing: a slot held without a request.
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    assert_eq!(header_timeouts_once_closed(&mut s, &p).await, 1);
    // A client that made a request and then went quiet: closed gracefully, not counted.
    let (mut tx, conn) = h2_connection(p.addr).await;
    let conn = tokio::spawn(conn);
    let res = tx.send_request(empty_get(p.addr, "/")).await.unwrap();
    assert_eq!(res.status(), 200);
    drop(res.into_body()); // the stream ends
    let ended = tokio::time::timeout(Duration::from_secs(5), conn)
        .await
        .expect("the proxy closes a quiet HTTP/2 connection")
        .unwrap();
    // With GOAWAY first: a connection dropped without one ends the client's in an error.
    assert!(ended.is_ok(), "{ended:?}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        p.state.faults.get(Fault::HeaderTimeout),
        1,
        "idle is not slow"
    );
}

#[tokio::test]
async fn a_response_slower_than_the_header_timeout_is_not_cut() {
    // `/slow` answers after 800 ms, four header timeouts: the request is in progress, not a
    // client failing to send its head; the connection stays usable after it.
    let (_b, p) = with_header_timeout(200).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    assert!(get_on(&mut s, "/slow").await.starts_with("HTTP/1.1 200"));
    assert!(get_on(&mut s, "/").await.starts_with("HTTP/1.1 200"));
    assert_eq!(p.state.faults.get(Fault::HeaderTimeout), 0);
}

#[tokio::test]
async fn connection_cap_stops_accepting() {
    let b = backend("b").await;
    let p = proxy_toml(&format!(
        "[upstream]\naddresses = [\"{}\"]\n[listen]\nmax_connections = 2\n",
        b.addr
    ))
    .await;
    let _c1 = TcpStream::connect(p.addr).await.unwrap();
    let _c2 = TcpStream::connect(p.addr).await.unwrap();
    let mut c3 = TcpStream::connect(p.addr).await.unwrap(); // sits in the kernel backlog
    c3.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 16];
    let r = tokio::time::timeout(Duration::from_millis(300), c3.read(&mut buf)).await;
    assert!(r.is_err(), "third connection not served while two are open");
    assert!(p.state.faults.get(Fault::ConnectionCap) >= 1);
    drop(_c1);
    let head = read_head(&mut c3).await;
    assert!(
        head.starts_with("HTTP/1.1 200"),
        "served once a slot frees: {head}"
    );
}

#[tokio::test]
async fn large_body_streamed_and_not_retried() {
    let b = backend("b").await;
    let dead = dead_addr().await;
    // Two tasks, the first dead. On a fresh proxy both score 0 and power-of-two-choices takes
    // the first listed, so the first request goes to the dead task.
    let cfg = format!(
        "[upstream]\naddresses = [\"{dead}\", \"{}\"]\nretry_buffer_bytes = 1024\n",
        b.addr
    );
    let post = |addr, n: usize| {
        hyper::Request::post(format!("http://{addr}/up"))
            .body(Full::new(Bytes::from(vec![b'x'; n])))
            .unwrap()
    };
    let c = client();
    // Small body: buffered, so the connection failure is retried on the live task.
    let p = proxy_toml(&cfg).await;
    let r = c.request(post(p.addr, 100)).await.unwrap();
    assert_eq!(r.status(), 200);
    let body = r.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&body).ends_with("body=100"));
    assert_eq!(p.state.faults.get(Fault::UpstreamConnect), 1);
    // Large body: streamed, never retried; the 502 names the cause.
    let p = proxy_toml(&cfg).await;
    let r = c.request(post(p.addr, 100_000)).await.unwrap();
    assert_eq!(r.status(), 502);
    let body = r.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&body).contains("refused the connection"));
    assert_eq!(p.state.faults.get(Fault::NotRetriedLargeBody), 1);
    // The next large body goes to the live task (the dead one is penalised) and streams through.
    let r = c.request(post(p.addr, 100_000)).await.unwrap();
    assert_eq!(r.status(), 200);
    let body = r.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&body).ends_with("body=100000"));
}

#[tokio::test]
async fn overload_sheds_lowest_criticality_first() {
    // Limit fixed at 10, no queue; 8 slow CRITICAL requests hold 8 slots (utilisation 0.8).
    // At a limit of 10 the headroom ladder (spillway-core `limiter::allowed_ladder`) lets
    // SHEDDABLE hold 8, SHEDDABLE_PLUS 9, CRITICAL 9 and CRITICAL_PLUS 10: with 8 CRITICAL
    // held, SHEDDABLE is refused, SHEDDABLE_PLUS and CRITICAL_PLUS still get in.
    let b = backend("b").await;
    let p = proxy_toml(&format!(
        r#"
[upstream]
addresses = ["{}"]
[classify]
trusted = ["127.0.0.0/8"]
[admission.limit]
algorithm = "fixed"
limit = 10
[admission.queue]
max_len = 0
"#,
        b.addr
    ))
    .await;
    let c = client();
    let mut slow = Vec::new();
    for _ in 0..8 {
        let (c, addr) = (c.clone(), p.addr);
        slow.push(tokio::spawn(async move {
            let (s, h, b) = get(&c, addr, "/slow", &[("x-spillway-criticality", "CRITICAL")]).await;
            if s != 200 {
                eprintln!("slow: {s} {h:?} {b}");
            }
            s
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(p.state.status().admission.in_flight, 8);
    for _ in 0..5 {
        let (s, h, _) = get(&c, p.addr, "/", &[("x-spillway-criticality", "SHEDDABLE")]).await;
        assert_eq!(s, 503);
        assert!(h.contains_key("retry-after"));
        let (s, _, _) = get(
            &c,
            p.addr,
            "/",
            &[("x-spillway-criticality", "SHEDDABLE_PLUS")],
        )
        .await;
        assert_eq!(s, 200);
        let (s, _, _) = get(
            &c,
            p.addr,
            "/",
            &[("x-spillway-criticality", "CRITICAL_PLUS")],
        )
        .await;
        assert_eq!(s, 200);
    }
    for t in slow {
        assert_eq!(t.await.unwrap(), 200, "every admitted request is answered");
    }
    assert_eq!(p.state.status().admission.in_flight, 0);
}

#[tokio::test]
async fn slow_body_gets_408_and_frees_its_slot() {
    let (b, p) = with_header_timeout(300).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"POST /up HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nabc")
        .await
        .unwrap();
    let head = read_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    assert_eq!(p.state.faults.get(Fault::BodyTimeout), 1);
    assert_eq!(p.state.status().admission.in_flight, 0);
    assert_eq!(
        b.max_active.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "nothing reached the upstream"
    );
}

#[tokio::test]
async fn malformed_request_line_gets_400_and_is_counted() {
    let b = backend("b").await;
    let p = proxy_toml(&format!("[upstream]\naddresses = [\"{}\"]\n", b.addr)).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"THIS IS NOT HTTP\r\n\r\n").await.unwrap();
    let head = read_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(p.state.faults.get(Fault::BadRequest), 1);
    assert_eq!(b.accepted.load(std::sync::atomic::Ordering::SeqCst), 0);
}
