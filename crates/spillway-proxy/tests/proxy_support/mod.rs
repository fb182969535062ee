//! Loopback backends and a client for the proxy's integration tests.
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use spillway_proxy::run::{start, Running};
use spillway_proxy::{ProxyConfig, ProxyState};
use tokio::net::TcpListener;

/// The size of `/large-answer`'s answer: more than a loopback connection's socket buffers hold.
pub const BIG: usize = 32 << 20;

/// A loopback backend: echoes what it saw (method, path, version, the Spillway fields, the
/// authority asked for, the body's length); `/hang` answers after 30 s, `/slow` after 0.8 s,
/// `/large-answer` with [`BIG`] bytes;
/// `/busy` (or any path on a backend named `busy…`) answers 503; `/report` carries an ORCA report (utilisation 0.7) and a cost of 5.
pub struct Backend {
    pub addr: SocketAddr,
    pub task: tokio::task::JoinHandle<()>,
    /// Connections accepted so far.
    pub accepted: Arc<AtomicUsize>,
    /// Most requests ever in progress at once.
    pub max_active: Arc<AtomicUsize>,
}

impl Backend {
    pub fn kill(&self) {
        self.task.abort();
    }
}

async fn echo(
    req: Request<Incoming>,
    name: Arc<str>,
    active: Arc<AtomicUsize>,
    max_active: Arc<AtomicUsize>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let now = active.fetch_add(1, Ordering::SeqCst) + 1;
    max_active.fetch_max(now, Ordering::SeqCst);
    let res = echo_inner(req, name).await;
    active.fetch_sub(1, Ordering::SeqCst);
    res
}

async fn echo_inner(
    req: Request<Incoming>,
    name: Arc<str>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_string();
    if path == "/hang" {
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
    if path == "/slow" {
        tokio::time::sleep(Duration::from_millis(800)).await;
    }
    if path == "/large-answer" {
        return Ok(Response::new(Full::new(Bytes::from(vec![b'x'; BIG]))));
    }
    let h = |k: &str| {
        req.headers()
            .get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_string()
    };
    // The authority asked for: `host` over HTTP/1.1, `:authority` over HTTP/2.
    let host = req
        .uri()
        .authority()
        .map_or_else(|| h("host"), |a| a.to_string());
    let line = format!(
        "{name} {} {path} v={:?} crit={} cust={} attempt={} deadline={} host={host}",
        req.method(),
        req.version(),
        h("x-spillway-criticality"),
        h("x-spillway-customer"),
        h("x-spillway-attempt"),
        h("x-spillway-deadline-ms"),
    );
    let body = req
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let mut res = Response::new(Full::new(Bytes::from(format!(
        "{line} body={}",
        body.len()
    ))));
    if path == "/busy" || name.starts_with("busy") {
        *res.status_mut() = hyper::StatusCode::SERVICE_UNAVAILABLE;
    }
    if path == "/report" {
        let h = res.headers_mut();
        h.insert(
            "endpoint-load-metrics",
            "TEXT application_utilization=0.7".parse().unwrap(),
        );
        h.insert("x-spillway-cost", "5".parse().unwrap());
    }
    Ok(res)
}

pub async fn backend(name: &str) -> Backend {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let name: Arc<str> = Arc::from(name);
    let accepted = Arc::new(AtomicUsize::new(0));
    let max_active = Arc::new(AtomicUsize::new(0));
    let active = Arc::new(AtomicUsize::new(0));
    let (acc, maxa) = (Arc::clone(&accepted), Arc::clone(&max_active));
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let Ok((s, _)) = l.accept().await else { return };
            acc.fetch_add(1, Ordering::SeqCst);
            let name = Arc::clone(&name);
            let (active, maxa) = (Arc::clone(&active), Arc::clone(&maxa));
            conns.spawn(async move {
                let svc = service_fn(move |r| {
                    echo(r, Arc::clone(&name), Arc::clone(&active), Arc::clone(&maxa))
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    Backend {
        addr,
        task,
        accepted,
        max_active,
    }
}

/// An address nothing listens on.
pub async fn dead_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}

pub async fn proxy_toml(toml: &str) -> Running {
    let cfg = spillway_proxy::config::parse(toml, "test.toml").expect("valid config");
    proxy(cfg).await
}

pub async fn proxy(mut cfg: ProxyConfig) -> Running {
    cfg.admin.enabled = false;
    let state = ProxyState::new(cfg, "test", None).expect("state");
    start(state, Some("127.0.0.1:0".parse().unwrap()))
        .await
        .expect("start")
}

pub type Client = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Full<Bytes>,
>;

pub fn client() -> Client {
    hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .build(hyper_util::client::legacy::connect::HttpConnector::new())
}

pub fn h2_client() -> Client {
    hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build(hyper_util::client::legacy::connect::HttpConnector::new())
}

/// GET `path` with `headers`; returns status, headers and body text.
pub async fn get(
    c: &Client,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, http::HeaderMap, String) {
    let mut b = Request::get(format!("http://{addr}{path}"));
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let res = c
        .request(b.body(Full::new(Bytes::new())).unwrap())
        .await
        .expect("response");
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

/// Reads from `s` into `buf` until it holds `end`; the length up to and including it (`None`
/// if the stream ends or fails first).
pub async fn read_until(
    s: &mut tokio::net::TcpStream,
    buf: &mut Vec<u8>,
    end: &[u8],
) -> Option<usize> {
    loop {
        if let Some(i) = buf.windows(end.len()).position(|w| w == end) {
            return Some(i + end.len());
        }
        let mut b = [0u8; 4096];
        match tokio::io::AsyncReadExt::read(s, &mut b).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&b[..n]),
        }
    }
}

/// Reads a raw HTTP/1.1 response head (up to the blank line) from `s`, at most 5 s.
pub async fn read_head(s: &mut tokio::net::TcpStream) -> String {
    let mut buf = Vec::new();
    let mut b = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::io::AsyncReadExt::read(s, &mut b),
        )
        .await
        .expect("head in time")
        .unwrap();
        if n == 0 {
            break;
        }
        buf.push(b[0]);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// Writes `bytes` on a new connection to `proxy` and reads until the proxy closes it (the last
/// request asks it to).
pub async fn exchange(proxy: SocketAddr, bytes: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(proxy).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("the proxy closes the connection after the last answer")
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

/// One HTTP/2 connection to `addr` (prior knowledge): its sender and the connection's future,
/// which the caller drives (spawns) and may watch end.
pub async fn h2_connection(
    addr: SocketAddr,
) -> (
    hyper::client::conn::http2::SendRequest<http_body_util::Empty<Bytes>>,
    hyper::client::conn::http2::Connection<
        TokioIo<tokio::net::TcpStream>,
        http_body_util::Empty<Bytes>,
        TokioExecutor,
    >,
) {
    let io = TokioIo::new(tokio::net::TcpStream::connect(addr).await.unwrap());
    hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
        .await
        .unwrap()
}

/// `GET path` to `addr` with no body.
pub fn empty_get(addr: SocketAddr, path: &str) -> Request<http_body_util::Empty<Bytes>> {
    Request::get(format!("http://{addr}{path}"))
        .body(http_body_util::Empty::new())
        .unwrap()
}
