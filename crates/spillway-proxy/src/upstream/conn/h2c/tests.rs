use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};

use super::{probe, Answer, H2cSupport, RETRY_AFTER};

/// A loopback server: HTTP/2 only, HTTP/1.1 only, or one that accepts and never answers.
async fn server(kind: &'static str) -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            let svc = service_fn(|_req| async {
                Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(b"ok"))))
            });
            match kind {
                "h2" => {
                    tokio::spawn(
                        hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                            .serve_connection(TokioIo::new(s), svc),
                    );
                }
                "h1" => {
                    tokio::spawn(
                        hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(s), svc),
                    );
                }
                _ => held.push(s),
            }
        }
    });
    addr
}

async fn ask(addr: std::net::SocketAddr, wait: Duration) -> Answer {
    probe(TcpStream::connect(addr).await.unwrap(), wait).await
}

#[tokio::test]
async fn an_http2_server_says_yes_an_http1_server_no_a_silent_one_nothing() {
    let wait = Duration::from_secs(5);
    assert_eq!(ask(server("h2").await, wait).await, Answer::Yes);
    assert_eq!(ask(server("h1").await, wait).await, Answer::No);
    assert_eq!(
        ask(server("silent").await, Duration::from_millis(100)).await,
        Answer::Silent
    );
}

#[test]
fn answers_are_kept_and_silence_only_for_a_while() {
    let s = H2cSupport::new(3);
    assert_eq!(s.known(0, || 0), None, "nothing asked yet");
    assert!(s.record(0, Answer::Yes, 10));
    assert!(!s.record(1, Answer::No, 10));
    assert!(!s.record(2, Answer::Silent, 10));
    let later = 10 + RETRY_AFTER.as_millis() as u64;
    assert_eq!(s.known(0, || later * 100), Some(true), "kept for good");
    assert_eq!(s.known(1, || later * 100), Some(false), "kept for good");
    assert_eq!(s.known(2, || later - 1), Some(false));
    assert_eq!(s.known(2, || later), None, "asked again after the pause");
    assert_eq!(
        s.known(7, || 0),
        None,
        "no such task: asked (and the connect fails)"
    );
}
