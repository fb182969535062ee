//! Shared harness for the `admin_*` integration tests: a real upstream, the proxy's data
//! listener and its admin listener, all on loopback with ephemeral ports, each request bounded
//! by a timeout so a hung test fails instead of hanging.

#![allow(dead_code)] // each test binary uses a different part

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;
use spillway_proxy::admin::{AdminConfig, AdminServer};
use spillway_proxy::run::{start, Running};
use spillway_proxy::state::ProxyState;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Every request in these tests finishes well within this, or the test fails.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A token long enough to be accepted.
pub const TOKEN: &str = "integration-test-token-0123456789";

/// A loopback HTTP/1.1 upstream answering `200 upstream:<path>` and counting requests.
pub struct Upstream {
    /// Its address.
    pub addr: SocketAddr,
    /// Requests served.
    pub hits: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts an upstream on an ephemeral loopback port.
pub async fn upstream() -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind upstream");
    let addr = listener.local_addr().expect("upstream addr");
    let hits = Arc::new(AtomicU64::new(0));
    let h = Arc::clone(&hits);
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let h = Arc::clone(&h);
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                    h.fetch_add(1, Ordering::Relaxed);
                    let body = format!("upstream:{}", req.uri().path());
                    async move { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(body)))) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Upstream { addr, hits, task }
}

/// A loopback address nothing listens on (bound, then closed): connections are refused.
pub async fn dead_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let a = l.local_addr().expect("addr");
    drop(l);
    a
}

/// The proxy and its admin listener, running in this test's runtime.
pub struct Stack {
    /// The data listener.
    pub proxy: Option<Running>,
    /// The admin listener's address.
    pub admin: SocketAddr,
    /// The shared state.
    pub state: Arc<ProxyState>,
    admin_stop: Option<oneshot::Sender<()>>,
    admin_task: Option<JoinHandle<Result<(), spillway_proxy::admin::AdminError>>>,
    client: Client<HttpConnector, Full<Bytes>>,
}

/// An HTTP response, read whole.
pub struct Reply {
    /// Status.
    pub status: StatusCode,
    /// Headers.
    pub headers: HeaderMap,
    /// Body as text.
    pub text: String,
}

impl Reply {
    /// The body as JSON (panics with the body if it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }
}

/// Builds a state from `toml` and starts both listeners on ephemeral loopback ports.
pub async fn stack(toml: &str, admin: AdminConfig) -> Stack {
    let cfg = spillway_proxy::config::parse(toml, "test.toml").expect("test config parses");
    let state = ProxyState::new(cfg, "test.toml", None).expect("state builds");
    stack_with(state, admin).await
}

/// Starts both listeners for `state`. The admin listener is bound first, so the metrics
/// recorder is installed before any request goes through the proxy.
pub async fn stack_with(state: Arc<ProxyState>, admin: AdminConfig) -> Stack {
    let admin_cfg = AdminConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        ..admin
    };
    let server = AdminServer::bind(Arc::clone(&state), admin_cfg)
        .await
        .expect("admin binds");
    let admin_addr = server.local_addr().expect("admin addr");
    let (tx, rx) = oneshot::channel::<()>();
    let admin_task = tokio::spawn(server.serve(async move {
        let _ = rx.await;
    }));
    let proxy = start(
        Arc::clone(&state),
        Some("127.0.0.1:0".parse().expect("addr")),
    )
    .await
    .expect("proxy starts");
    Stack {
        proxy: Some(proxy),
        admin: admin_addr,
        state,
        admin_stop: Some(tx),
        admin_task: Some(admin_task),
        client: Client::builder(TokioExecutor::new()).build_http(),
    }
}

impl Stack {
    /// The data listener's address.
    pub fn proxy_addr(&self) -> SocketAddr {
        self.proxy.as_ref().expect("running").addr
    }

    /// Sends one request to `addr` and reads the whole response.
    pub async fn send(
        &self,
        addr: SocketAddr,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Reply {
        let mut b = Request::builder()
            .method(method)
            .uri(format!("http://{addr}{path}"));
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let req = b
            .body(Full::new(Bytes::from(body.to_string())))
            .expect("request");
        let resp = tokio::time::timeout(REQUEST_TIMEOUT, self.client.request(req))
            .await
            .unwrap_or_else(|_| panic!("{path}: no response within {REQUEST_TIMEOUT:?}"))
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = tokio::time::timeout(REQUEST_TIMEOUT, resp.into_body().collect())
            .await
            .expect("body in time")
            .expect("body")
            .to_bytes();
        Reply {
            status,
            headers,
            text: String::from_utf8_lossy(&bytes).into_owned(),
        }
    }

    /// `GET` on the data listener with extra headers.
    pub async fn get_proxy(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        self.send(self.proxy_addr(), Method::GET, path, headers, "")
            .await
    }

    /// `GET` on the admin listener, without a token.
    pub async fn admin_get(&self, path: &str) -> Reply {
        self.send(self.admin, Method::GET, path, &[], "").await
    }

    /// `POST` on the admin listener as a script sends it (`x-spillway-admin: 1`), with the
    /// token if `token` is set.
    pub async fn admin_post(&self, path: &str, body: &str, token: Option<&str>) -> Reply {
        let auth = token.map(|t| format!("Bearer {t}"));
        let mut headers: Vec<(&str, &str)> = vec![("x-spillway-admin", "1")];
        if let Some(a) = auth.as_deref() {
            headers.push(("authorization", a));
        }
        self.send(self.admin, Method::POST, path, &headers, body)
            .await
    }

    /// `POST` on the admin listener that must succeed; returns the JSON answer.
    pub async fn control(&self, path: &str, body: &str) -> Value {
        let r = self.admin_post(path, body, None).await;
        assert_eq!(r.status, StatusCode::OK, "{path} {body}: {}", r.text);
        r.json()
    }

    /// Stops both listeners and waits for them (bounded).
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.admin_stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.admin_task.take() {
            let r = tokio::time::timeout(REQUEST_TIMEOUT, t)
                .await
                .expect("admin listener stops in time")
                .expect("admin task did not panic");
            r.expect("admin listener ran without error");
        }
        if let Some(p) = self.proxy.take() {
            tokio::time::timeout(REQUEST_TIMEOUT, p.shutdown())
                .await
                .expect("proxy stops in time");
        }
    }
}

/// The value of the Prometheus sample `name{labels...}` whose label set contains every
/// `label="value"` in `want` (sums them if several match), or `None` if none does.
pub fn sample(metrics: &str, name: &str, want: &[(&str, &str)]) -> Option<f64> {
    let mut total = None;
    for line in metrics.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (labels, value) = match rest.strip_prefix('{') {
            Some(r) => match r.split_once("} ") {
                Some((l, v)) => (l, v),
                None => continue,
            },
            None => match rest.strip_prefix(' ') {
                Some(v) => ("", v),
                None => continue, // a longer name sharing the prefix
            },
        };
        if want
            .iter()
            .all(|(k, v)| labels.split(',').any(|l| l == format!("{k}=\"{v}\"")))
        {
            let v: f64 = value
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("bad sample: {line}"));
            *total.get_or_insert(0.0) += v;
        }
    }
    total
}

/// The admin's `/metrics` text, which must answer 200.
pub async fn metrics(s: &Stack) -> String {
    let m = s.admin_get("/metrics").await;
    assert_eq!(m.status, StatusCode::OK);
    m.text
}

/// This process's resident set in KiB (`VmRSS`), `None` where `/proc` doesn't say.
pub fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
