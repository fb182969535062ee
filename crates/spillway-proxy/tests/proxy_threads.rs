//! The thread-per-core data plane of `spillway proxy` (`run::start_threads`): one listening
//! socket per thread on one port (`SO_REUSEPORT`) without letting a second process join it,
//! requests served on every thread with per-thread upstream connections, one connection cap for
//! the process, graceful drain, and the `threads` setting.

mod proxy_support;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use proxy_support::{backend, empty_get, h2_connection, read_head, Backend};
use spillway_proxy::listener::bind_per_thread;
use spillway_proxy::run::{load, start_threads, DataPlane, Source};
use spillway_proxy::ProxyState;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn data_plane(toml: &str) -> (Arc<ProxyState>, DataPlane) {
    let mut cfg = spillway_proxy::config::parse(toml, "test.toml").expect("valid config");
    cfg.admin.enabled = false;
    cfg.listen.address = "127.0.0.1:0".parse().unwrap();
    let state = ProxyState::new(cfg, "test", None).expect("state");
    let dp = start_threads(&state).expect("data plane");
    (state, dp)
}

/// A data plane of two threads in front of a loopback backend.
async fn two_threads() -> (Backend, DataPlane) {
    let b = backend("b").await;
    let (_state, dp) = data_plane(&format!(
        "[upstream]\naddresses = [\"{}\"]\n[listen]\nthreads = 2\n",
        b.addr
    ));
    (b, dp)
}

/// Waits until `b` has a request in progress.
async fn until_the_backend_has_it(b: &Backend) {
    tokio::time::timeout(Duration::from_secs(5), async {
        while b.max_active.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("request reached the backend");
}

async fn shutdown(dp: DataPlane) {
    tokio::task::spawn_blocking(move || dp.shutdown())
        .await
        .unwrap();
}

#[test]
fn one_port_for_all_threads_and_a_taken_port_is_refused() {
    let b = bind_per_thread("127.0.0.1:0".parse().unwrap(), 3).unwrap();
    assert_ne!(b.addr.port(), 0);
    #[cfg(target_os = "linux")]
    {
        assert_eq!(b.sockets.len(), 3, "one socket per thread");
        assert!(b.shared_because.is_none());
    }
    for s in &b.sockets {
        assert_eq!(s.local_addr().unwrap(), b.addr);
    }
    // SO_REUSEPORT would let a second group join silently; the plain bind first refuses it.
    let e = bind_per_thread(b.addr, 2).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse, "{e}");
    assert!(std::net::TcpListener::bind(b.addr).is_err());
    // And a port a plain listener holds is refused too.
    let plain = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let e = bind_per_thread(plain.local_addr().unwrap(), 2).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_thread_serves_with_its_own_upstream_connections() {
    let (b, dp) = two_threads().await;
    assert_eq!(dp.threads(), 2);
    let addr = dp.addr;
    // A new client connection each time: the kernel spreads them over both sockets (by a
    // hash of the 4-tuple; all 40 on one of two sockets has odds 2^-39).
    for i in 0..40 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /x HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(out.starts_with("HTTP/1.1 200"), "request {i}: {out}");
        assert!(
            out.contains("b GET /x"),
            "request {i} reached the backend: {out}"
        );
    }
    // Sequential requests: one pooled upstream connection would do for a shared pool; each
    // thread opened its own.
    let upstream_conns = b.accepted.load(Ordering::SeqCst);
    assert!(
        upstream_conns >= 2,
        "each data-plane thread opens its own upstream connections: {upstream_conns}"
    );
    shutdown(dp).await;
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "no listener left after shutdown"
    );
}

/// Indexes of the connections in `conns` that are answered: waits up to 5 s for `want` answers,
/// then 300 ms more for any surplus (each connection read once: `done` marks the answered).
async fn answered(conns: &mut [TcpStream], done: &mut [bool], want: usize) -> Vec<usize> {
    let mut got = Vec::new();
    let mut end = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut extended = false;
    while tokio::time::Instant::now() < end {
        if got.len() >= want && !extended {
            extended = true;
            end = tokio::time::Instant::now() + Duration::from_millis(300);
        }
        for (i, c) in conns.iter_mut().enumerate() {
            if done[i] {
                continue;
            }
            let mut buf = [0u8; 12];
            if let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_millis(10), c.read(&mut buf)).await
            {
                assert!(
                    buf[..n].starts_with(b"HTTP/1.1 200"),
                    "{}",
                    String::from_utf8_lossy(&buf[..n])
                );
                done[i] = true;
                got.push(i);
            }
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_cap_is_one_for_all_threads() {
    let b = backend("b").await;
    let (state, dp) = data_plane(&format!(
        "[upstream]\naddresses = [\"{}\"]\n[listen]\nthreads = 2\nmax_connections = 2\n",
        b.addr
    ));
    // Twelve connections, each with a request, spread by the kernel over both threads' sockets
    // (all on one: odds 2^-11). With a cap per thread, up to four would be served.
    let mut conns = Vec::new();
    for _ in 0..12 {
        let mut c = TcpStream::connect(dp.addr).await.unwrap();
        c.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        conns.push(c);
    }
    let mut done = vec![false; conns.len()];
    // Which two get the slots depends on accept order across the sockets; that two do and no
    // more, is the cap. (Answered connections stay open, keep-alive, holding their slots.)
    let mut served = answered(&mut conns, &mut done, 2).await;
    assert_eq!(served.len(), 2, "exactly the cap is served: {served:?}");
    assert!(
        state
            .faults
            .get(spillway_proxy::metrics::Fault::ConnectionCap)
            >= 1
    );
    // Closing one served connection lets exactly one waiting connection in.
    let closed = served.remove(0);
    drop(std::mem::replace(
        &mut conns[closed],
        TcpStream::connect(b.addr).await.unwrap(),
    ));
    let next = answered(&mut conns, &mut done, 1).await;
    assert_eq!(next.len(), 1, "one slot freed, one more served: {next:?}");
    drop(conns);
    shutdown(dp).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_requests_in_flight() {
    let (b, dp) = two_threads().await;
    let mut c = TcpStream::connect(dp.addr).await.unwrap();
    c.write_all(b"GET /slow HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    // Once the backend has the request, stop the proxy.
    until_the_backend_has_it(&b).await;
    let stopping = tokio::task::spawn_blocking(move || dp.shutdown());
    let head = read_head(&mut c).await;
    assert!(head.starts_with("HTTP/1.1 200"), "drained, not cut: {head}");
    stopping.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_an_http2_stream_in_flight() {
    // HTTP/2 connections are hyper's: told to close gracefully (GOAWAY), they finish the
    // streams they have.
    let (b, dp) = two_threads().await;
    let (mut tx, conn) = h2_connection(dp.addr).await;
    tokio::spawn(conn);
    let answer = tokio::spawn(tx.send_request(empty_get(dp.addr, "/slow")));
    until_the_backend_has_it(&b).await;
    let stopping = tokio::task::spawn_blocking(move || dp.shutdown());
    let res = answer.await.unwrap().expect("drained, not cut");
    assert_eq!(res.status(), 200);
    stopping.await.unwrap();
}

#[test]
fn threads_default_flag_and_validation() {
    let flags = |threads| Source::Flags {
        listen: "127.0.0.1:0".parse().unwrap(),
        upstreams: vec!["127.0.0.1:9".into()],
        threads,
    };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(load(&flags(None)).unwrap().config().listen.threads, cpus);
    assert_eq!(load(&flags(Some(3))).unwrap().config().listen.threads, 3);
    let e = load(&flags(Some(0))).unwrap_err().to_string();
    assert!(
        e.contains("listen.threads") && e.contains("1 ..= 1024"),
        "{e}"
    );
    let e = spillway_proxy::config::parse("[listen]\nthreads = 5000\n", "c.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("listen.threads") && e.contains("5000"), "{e}");
}
