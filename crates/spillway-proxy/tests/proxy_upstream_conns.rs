//! The upstream connections (`spillway_proxy::upstream::Connections`, hyper's connection API
//! with an idle list per thread): reused when a response body ends, bounded, closed after the
//! idle timeout without traffic, never reused after a body cut short, replaced when the
//! upstream closed them (also while no request comes), a refused connection reported as a
//! connect error, and the task reading a response not woken by its own reads.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Body;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use spillway_proxy::upstream::{Connections, RequestBody, UpstreamBody};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A backend counting the connections it accepted and saw closed; `/big` answers 1 MiB.
struct Counted {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    closed: Arc<AtomicUsize>,
}

async fn counted() -> Counted {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (accepted, closed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (a, c) = (Arc::clone(&accepted), Arc::clone(&closed));
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            a.fetch_add(1, Ordering::SeqCst);
            let c = Arc::clone(&c);
            tokio::spawn(async move {
                let svc = service_fn(|r: http::Request<hyper::body::Incoming>| async move {
                    let body = if r.uri().path() == "/big" {
                        Bytes::from(vec![b'x'; 1 << 20])
                    } else {
                        Bytes::from_static(b"ok")
                    };
                    Ok::<_, Infallible>(http::Response::new(Full::new(body)))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
                c.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    Counted {
        addr,
        accepted,
        closed,
    }
}

fn conns(addr: SocketAddr, idle: Duration, max_idle: usize) -> Arc<Connections> {
    let a: Arc<str> = Arc::from(addr.to_string().as_str());
    Arc::new(Connections::new(
        &[a],
        Duration::from_secs(1),
        idle,
        max_idle,
    ))
}

fn get(path: &str, addr: SocketAddr) -> http::Request<RequestBody> {
    http::Request::get(path)
        .header(http::header::HOST, addr.to_string())
        .body(RequestBody::empty())
        .unwrap()
}

async fn send(c: &Arc<Connections>, path: &str, addr: SocketAddr) -> http::Response<UpstreamBody> {
    c.send(
        0,
        get(path, addr),
        false,
        false,
        &spillway_proxy::http1::AddedHeaders::none(),
    )
    .await
    .expect("response")
}

async fn wait_for(what: &str, f: impl Fn() -> bool) {
    for _ in 0..200 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what}: not within 2 s");
}

#[tokio::test]
async fn a_connection_is_reused_once_its_response_body_ends() {
    let b = counted().await;
    let c = conns(b.addr, Duration::from_secs(60), 4);
    for _ in 0..5 {
        let res = send(&c, "/", b.addr).await;
        assert_eq!(res.into_body().collect().await.unwrap().to_bytes(), "ok");
        assert_eq!(c.idle_here(0), 1, "back on this thread's idle list");
    }
    assert_eq!(b.accepted.load(Ordering::SeqCst), 1);
    // Another thread has idle lists of its own.
    let c2 = Arc::clone(&c);
    let there = std::thread::spawn(move || c2.idle_here(0)).join().unwrap();
    assert_eq!(there, 0);
}

#[tokio::test]
async fn idle_connections_beyond_the_bound_are_closed() {
    let b = counted().await;
    let c = conns(b.addr, Duration::from_secs(60), 1);
    // Three responses held at once: three connections.
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(send(&c, "/", b.addr).await);
    }
    assert_eq!(b.accepted.load(Ordering::SeqCst), 3);
    for res in held {
        let _ = res.into_body().collect().await.unwrap();
    }
    assert_eq!(c.idle_here(0), 1, "max_idle_per_task = 1");
    wait_for("two surplus connections closed", || {
        b.closed.load(Ordering::SeqCst) == 2
    })
    .await;
}

#[tokio::test]
async fn idle_connections_close_after_the_timeout_without_traffic() {
    let b = counted().await;
    let c = conns(b.addr, Duration::from_millis(100), 4);
    let _ = send(&c, "/", b.addr).await.into_body().collect().await;
    assert_eq!(b.closed.load(Ordering::SeqCst), 0);
    // No request comes: the connection's own driver closes it.
    wait_for("the idle connection closed", || {
        b.closed.load(Ordering::SeqCst) == 1
    })
    .await;
    // The dead entry is skipped: the next request opens a new connection and succeeds.
    let res = send(&c, "/", b.addr).await;
    assert_eq!(res.into_body().collect().await.unwrap().to_bytes(), "ok");
    assert_eq!(b.accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_body_cut_short_does_not_put_its_connection_back() {
    let b = counted().await;
    let c = conns(b.addr, Duration::from_secs(60), 4);
    let mut body = send(&c, "/big", b.addr).await.into_body();
    let first = body.frame().await.expect("a frame").expect("data");
    assert!(first.is_data());
    assert!(!body.is_end_stream());
    drop(body);
    assert_eq!(c.idle_here(0), 0);
    wait_for("the connection closed", || {
        b.closed.load(Ordering::SeqCst) == 1
    })
    .await;
    let res = send(&c, "/", b.addr).await;
    assert_eq!(res.into_body().collect().await.unwrap().to_bytes(), "ok");
    assert_eq!(b.accepted.load(Ordering::SeqCst), 2);
}

/// An upstream that answers one request per connection with keep-alive, then closes the
/// connection 50 ms later (as a server's own idle timeout would).
async fn closes_after_each() -> (SocketAddr, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let a = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            a.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut b = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut b).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&b[..n]),
                    }
                }
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            });
        }
    });
    (addr, accepted)
}

#[tokio::test]
async fn an_idle_connection_the_upstream_closed_is_replaced() {
    let (addr, accepted) = closes_after_each().await;
    let c = conns(addr, Duration::from_secs(60), 4);
    for round in 1..=3 {
        let res = send(&c, "/", addr).await;
        assert_eq!(res.into_body().collect().await.unwrap().to_bytes(), "ok");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(accepted.load(Ordering::SeqCst), round);
    }
}

#[tokio::test]
async fn a_refused_connection_is_a_connect_error() {
    let dead = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let c = conns(dead, Duration::from_secs(60), 4);
    let e = c
        .send(
            0,
            get("/", dead),
            false,
            false,
            &spillway_proxy::http1::AddedHeaders::none(),
        )
        .await
        .unwrap_err();
    assert!(e.is_connect(), "{e}");
    let text = std::error::Error::source(&e).map(ToString::to_string);
    assert!(
        text.as_deref().is_some_and(|t| t.contains("refused")),
        "{text:?}"
    );
}

/// Counts wake-ups.
struct Wakes(AtomicUsize);

impl std::task::Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Polls `poll` with `waker` (one task's) until it is ready, letting the runtime run in between
/// (so the socket's readiness arrives), and counts the wake-ups that happened *during* a poll:
/// a task woken while it runs is polled once more for nothing.
async fn self_wakes<R>(
    wakes: &Arc<Wakes>,
    mut poll: impl FnMut(&mut std::task::Context<'_>) -> std::task::Poll<R>,
) -> (R, usize) {
    let waker = std::task::Waker::from(Arc::clone(wakes));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut during = 0;
    for _ in 0..2_000 {
        let before = wakes.0.load(Ordering::SeqCst);
        let r = poll(&mut cx);
        during += wakes.0.load(Ordering::SeqCst) - before;
        if let std::task::Poll::Ready(r) = r {
            return (r, during);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("not ready within 2,000 polls");
}

#[tokio::test]
async fn reading_a_response_does_not_wake_the_task_reading_it() {
    let b = counted().await;
    let c = conns(b.addr, Duration::from_secs(60), 4);
    // Once on a new connection, once on the reused one.
    for _ in 0..2 {
        // One task's waker for the head and the body, as when the proxy serves.
        let wakes = Arc::new(Wakes(AtomicUsize::new(0)));
        let none = spillway_proxy::http1::AddedHeaders::none();
        let mut send = std::pin::pin!(c.send(0, get("/", b.addr), false, false, &none));
        let (res, head_wakes) = self_wakes(&wakes, |cx| send.as_mut().poll(cx)).await;
        let mut body = res.expect("response").into_body();
        let mut got = Vec::new();
        let ((), body_wakes) = self_wakes(&wakes, |cx| loop {
            match std::pin::Pin::new(&mut body).poll_frame(cx) {
                std::task::Poll::Ready(Some(f)) => {
                    got.extend_from_slice(&f.expect("frame").into_data().expect("data"))
                }
                std::task::Poll::Ready(None) => return std::task::Poll::Ready(()),
                std::task::Poll::Pending => return std::task::Poll::Pending,
            }
        })
        .await;
        assert_eq!(got, b"ok");
        assert_eq!(
            (head_wakes, body_wakes),
            (0, 0),
            "wake-ups during the task's own polls"
        );
        drop(body);
        assert_eq!(c.idle_here(0), 1);
    }
    assert_eq!(b.accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_idle_connection_the_upstream_closed_is_closed_without_traffic() {
    let (addr, _accepted) = closes_after_each().await;
    let c = conns(addr, Duration::from_secs(60), 4);
    let res = send(&c, "/", addr).await;
    assert_eq!(res.into_body().collect().await.unwrap().to_bytes(), "ok");
    assert_eq!(c.idle_here(0), 1);
    // The upstream closes it 50 ms later; nothing is sent: the thread's sweeper finds it
    // ended (within its one-second tick), long before the 60 s idle timeout.
    for _ in 0..300 {
        if c.idle_here(0) == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the closed connection is still on the idle list after 3 s");
}
