//! An upgraded (WebSocket-style) tunnel holds its admission permit until both directions close,
//! so long-lived tunnels count toward the concurrency limit; an `h2c` upgrade is never tunnelled
//! (through it a client would send the upstream HTTP/2 requests the proxy never sees).

mod proxy_support;

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use proxy_support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A loopback upstream: an upgrade request gets 101 and an echo tunnel, anything else 200.
async fn upstream() -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let svc = service_fn(|mut req: hyper::Request<Incoming>| async move {
                let mut res = hyper::Response::new(Full::new(Bytes::new()));
                if req.headers().contains_key("upgrade") {
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
                    *res.status_mut() = hyper::StatusCode::SWITCHING_PROTOCOLS;
                    let h = res.headers_mut();
                    h.insert("connection", "upgrade".parse().unwrap());
                    h.insert("upgrade", "echo".parse().unwrap());
                }
                Ok::<_, Infallible>(res)
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .with_upgrades(),
            );
        }
    });
    addr
}

#[tokio::test]
async fn open_tunnel_holds_the_permit_until_it_closes() {
    let up = upstream().await;
    let p = proxy_toml(&format!(
        "[upstream]\naddresses = [\"{up}\"]\n[admission.limit]\nalgorithm = \"fixed\"\nlimit = 1\n[admission.queue]\nmax_len = 0\n"
    ))
    .await;
    let c = client();

    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET /ws HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: echo\r\n\r\n")
        .await
        .unwrap();
    let head = read_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    // The tunnel works (so it is really open while we test the limit).
    s.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut buf))
        .await
        .expect("echo in time")
        .unwrap();
    assert_eq!(&buf, b"ping");

    // While it is open, the one slot is taken: another request is refused (no queue).
    assert_eq!(
        p.state.status().admission.in_flight,
        1,
        "the tunnel is in flight"
    );
    let (status, headers, _) = get(&c, p.addr, "/", &[]).await;
    assert_eq!(status, 503, "{headers:?}");
    assert_eq!(headers["x-spillway-reason"], "concurrency_limit");

    // Closing the client side ends both directions; the slot comes back.
    drop(s);
    let mut freed = false;
    for _ in 0..100 {
        if p.state.status().admission.in_flight == 0 {
            freed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(freed, "the permit is released when the tunnel closes");
    let (status, _, _) = get(&c, p.addr, "/", &[]).await;
    assert_eq!(status, 200, "admitted once the tunnel is gone");
}

#[tokio::test]
async fn an_h2c_upgrade_is_forwarded_as_a_plain_request() {
    let up = upstream().await;
    let p = proxy_toml(&format!("[upstream]\naddresses = [\"{up}\"]\n")).await;
    for upgrade in ["h2c", "H2C", "h2c/1", "echo, h2c"] {
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        let req = format!(
            "GET /h2c HTTP/1.1\r\nhost: x\r\nconnection: upgrade, http2-settings\r\n\
             upgrade: {upgrade}\r\nhttp2-settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n"
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let head = read_head(&mut s).await;
        // The upstream upgrades whatever carries `upgrade`: a 200 means it never saw one.
        assert!(head.starts_with("HTTP/1.1 200"), "{upgrade}: {head}");
    }
}
