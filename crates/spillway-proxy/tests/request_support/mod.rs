//! For the `[request]` tests (`proxy_paths`, `proxy_lookalike_headers`): an upstream that
//! answers with what it received, and one-request clients over raw HTTP/1.1 bytes and HTTP/2.
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;

use crate::proxy_support::{exchange, h2_connection};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

/// An upstream (HTTP/1.1 and h2c) that answers with what it received: the criticality it was
/// told, the target as sent, its version and the names of the header fields.
pub async fn upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else { return };
            tokio::spawn(async move {
                let svc = service_fn(|req: hyper::Request<hyper::body::Incoming>| async move {
                    let crit = req
                        .headers()
                        .get("x-spillway-criticality")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("-")
                        .to_string();
                    let target = req
                        .uri()
                        .path_and_query()
                        .map_or("", |p| p.as_str())
                        .to_string();
                    let mut names: Vec<&str> = req.headers().keys().map(|n| n.as_str()).collect();
                    names.sort_unstable();
                    let text = format!(
                        "crit={crit} target={target} v={:?} names={}",
                        req.version(),
                        names.join(",")
                    );
                    Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(text))))
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    addr
}

/// What the upstream should see, or the proxy's refusal.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Want {
    /// Forwarded with this criticality and this target.
    Sent(&'static str, &'static str),
    /// 400 with this `x-spillway-reason`.
    Refused(&'static str),
}
use Want::{Refused, Sent};

/// The answer: status, `x-spillway-reason`, body.
pub struct Answer {
    pub status: u16,
    pub reason: String,
    pub body: String,
}

impl Answer {
    pub fn check(&self, want: Want, what: &str) {
        match want {
            Sent(crit, target) => {
                assert_eq!(self.status, 200, "{what}: {}", self.body);
                let seen = format!("crit={crit} target={target} ");
                assert!(
                    self.body.starts_with(&seen),
                    "{what}: want {seen:?}, upstream saw {:?}",
                    self.body
                );
            }
            Refused(reason) => {
                assert_eq!(self.status, 400, "{what}: {}", self.body);
                assert_eq!(self.reason, reason, "{what}: {}", self.body);
                assert!(
                    !self.body.starts_with("crit="),
                    "{what} reached the upstream"
                );
            }
        }
    }
}

/// One request over HTTP/1.1, its target written as it is.
pub async fn h1(proxy: SocketAddr, method: &str, target: &str, extra: &str) -> Answer {
    let req = format!(
        "{method} {target} HTTP/1.1\r\nhost: example.com\r\n{extra}connection: close\r\n\r\n"
    );
    let text = exchange(proxy, req.as_bytes()).await;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let reason = head
        .lines()
        .find_map(|l| l.strip_prefix("x-spillway-reason: "))
        .unwrap_or("")
        .to_string();
    Answer {
        status,
        reason,
        body: body.to_string(),
    }
}

/// One request over HTTP/2 (prior knowledge) on a new connection.
pub async fn h2(proxy: SocketAddr, target: &str, headers: &[(&str, &str)]) -> Answer {
    let (mut send, conn) = h2_connection(proxy).await;
    tokio::spawn(conn);
    let mut b = hyper::Request::get(format!("http://{proxy}{target}"));
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let res = send
        .send_request(b.body(http_body_util::Empty::new()).unwrap())
        .await
        .expect("an answer");
    let status = res.status().as_u16();
    let reason = res
        .headers()
        .get("x-spillway-reason")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        reason,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}
