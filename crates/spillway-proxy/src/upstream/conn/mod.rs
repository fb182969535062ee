//! Upstream connections: an idle list per thread and task, HTTP/1.1 spoken by the proxy's own
//! codec ([`crate::http1::client`]) and HTTP/2 by hyper's connection API (`hyper::client::conn`), instead of
//! hyper-util's legacy pooled client.
//!
//! Why: the data plane runs one single-threaded runtime per core (`crate::run`), so a connection
//! is opened, used and reused by one thread, and the pool needs no shared lock, no shared map
//! keyed by scheme and authority, and no task of its own; an HTTP/1.1 connection needs no task
//! of its own either: the request using it drives it ([`http1`]). The legacy client cost, per
//! forwarded request, a boxed response future, three allocations for the connection's info in
//! the response's extensions, a locked pool checkout and (while the response body streamed) a
//! task spawned to put the connection back (heaptrack and hyper-util 0.1
//! `client/legacy/client.rs`); hyper's HTTP/1.1 connection API, a channel each way per request
//! ([`crate::http1::client`]). Here a connection goes back to its thread's idle list when its exchange is
//! complete, from the response body itself ([`UpstreamBody`]).
//!
//! What still holds (the issue's "bounded pool of upstream connections, idle connections closed
//! after a timeout"): requests in flight per task are bounded by the task's slots
//! (`max_requests_per_task`, `super::Task::slots`); idle HTTP/1.1 connections by
//! `max_idle_per_task` per thread (the legacy client's bound was per client, and each
//! data-plane thread had its own); a connection idle for `idle_timeout_ms` is closed by its
//! thread's sweeper (HTTP/1.1) or its own driver task (HTTP/2) whether or not traffic comes; a
//! broken connection, or one whose exchange did not complete, is dropped, never put back; an
//! idle HTTP/1.1 connection the upstream closed in the meantime is found at checkout, before
//! anything is sent on it, and another is used; one the upstream closes just as a request
//! goes out on it (the keep-alive race, RFC 9112 §9.3.1) costs a safe, bodiless request
//! (GET, HEAD, OPTIONS, TRACE) nothing: it is sent once more on a new connection (HTTP/2: a
//! request the connection refused unsent is sent again, as the legacy client's
//! `retry_canceled_requests` did); a connection
//! that cannot be made is a connect error, which the caller may retry on another task. HTTP/2
//! (prior knowledge) keeps one multiplexed connection per task and thread ([`multiplexed`]),
//! closed after the same idle timeout once no stream is open on it. A request that may upgrade its connection
//! goes through hyper's HTTP/1.1 client on a task of its own, which hands the connection over
//! after a 101.
//!
//! The idle lists are per OS thread ([`ThreadLocal`], each behind a mutex only that thread's
//! requests and its sweeper take), which is per data-plane thread in
//! production; on a work-stealing runtime (tests, the benchmark switch, health checks on the
//! control runtime) each worker thread keeps its own, which is correct, only less shared.

mod body;
mod h2c;
mod http1;
mod idle;
mod io;
mod multiplexed;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::http1::AddedHeaders;
use http::{Request, Response};
use hyper::ext::ReasonPhrase;
use thread_local::ThreadLocal;
use tokio::net::TcpStream;

pub use self::body::UpstreamBody;
use self::http1::{exchange, replay, Exchanged, Failed, Http1, Replay};
use self::idle::{lock, Home};
use self::io::Io;
use self::multiplexed::{Lease, Multiplexed};
use crate::http1::client::WireError;
use crate::request_body::RequestBody;

/// Why a request could not be sent upstream or its response head not read.
#[derive(Debug)]
pub struct UpstreamError {
    kind: Kind,
    source: Box<dyn std::error::Error + Send + Sync>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Connect,
    Request,
    Invalid,
    ClientBody,
}

impl UpstreamError {
    /// The connection could not be made (nothing reached the task: safe to send elsewhere).
    pub fn is_connect(&self) -> bool {
        self.kind == Kind::Connect
    }

    /// The upstream answered with something that is not an HTTP/1.1 response (or a head over
    /// the limits): a fault of the upstream's, not of the network.
    pub fn is_invalid_response(&self) -> bool {
        self.kind == Kind::Invalid
    }

    /// The client's request body broke while it was being sent (cut short, invalid chunked
    /// coding): the client's fault, not the upstream's.
    pub fn is_client_body(&self) -> bool {
        self.kind == Kind::ClientBody
    }

    fn connect(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        UpstreamError {
            kind: Kind::Connect,
            source: e.into(),
        }
    }

    fn request(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        UpstreamError {
            kind: Kind::Request,
            source: e.into(),
        }
    }

    /// An HTTP/1.1 exchange's failure, told apart by what broke.
    fn wire(e: WireError) -> Self {
        let kind = match e {
            WireError::Invalid(_) | WireError::HeadTooLarge => Kind::Invalid,
            WireError::RequestBody(_) => Kind::ClientBody,
            _ => Kind::Request,
        };
        UpstreamError {
            kind,
            source: e.into(),
        }
    }
}

impl std::fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.kind {
            Kind::Connect => "connection failed",
            Kind::Request => "request failed",
            Kind::Invalid => "invalid response",
            Kind::ClientBody => "the client's request body broke",
        })
    }
}

impl std::error::Error for UpstreamError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

/// A TLS handshake with a task failed (its certificate not trusted, the wrong name, a client
/// certificate refused): told apart from a refused TCP connection in messages.
#[cfg(feature = "tls")]
#[derive(Debug)]
struct TlsFailed(std::io::Error);

#[cfg(feature = "tls")]
impl std::fmt::Display for TlsFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TLS handshake failed: {}", self.0)
    }
}

#[cfg(feature = "tls")]
impl std::error::Error for TlsFailed {}

/// Where one task is reached.
#[derive(Debug)]
struct Target {
    /// `host:port` as configured (resolved on each connect when it is not an IP address).
    text: Arc<str>,
    ip: Option<std::net::SocketAddr>,
}

/// The upstream connections of one pool (see the module doc).
pub struct Connections {
    targets: Vec<Target>,
    connect_timeout: Duration,
    idle_timeout: Duration,
    max_idle: usize,
    origin: Instant,
    local: ThreadLocal<Home>,
    /// Which tasks speak h2c, as far as asked (`upstream.protocol = "auto"`); over TLS, which
    /// agreed on `h2` by ALPN.
    h2c: h2c::H2cSupport,
    /// TLS to the tasks (`[upstream.tls]`), `None` for plaintext.
    #[cfg(feature = "tls")]
    tls: Option<Arc<crate::tls::Client>>,
}

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connections")
            .field("targets", &self.targets)
            .field("max_idle", &self.max_idle)
            .field("idle_timeout", &self.idle_timeout)
            .finish_non_exhaustive()
    }
}

impl Connections {
    /// Connections to `addresses` (task `i` is `addresses[i]`); none is opened yet.
    pub fn new(
        addresses: &[Arc<str>],
        connect_timeout: Duration,
        idle_timeout: Duration,
        max_idle: usize,
    ) -> Self {
        Connections {
            targets: addresses
                .iter()
                .map(|a| Target {
                    text: Arc::clone(a),
                    ip: a.parse().ok(),
                })
                .collect(),
            connect_timeout,
            idle_timeout,
            max_idle,
            origin: Instant::now(),
            local: ThreadLocal::new(),
            h2c: h2c::H2cSupport::new(addresses.len()),
            #[cfg(feature = "tls")]
            tls: None,
        }
    }

    /// These connections over TLS made by `tls` (see `crate::tls::Client`).
    #[cfg(feature = "tls")]
    pub fn with_tls(mut self, tls: crate::tls::Client) -> Self {
        self.tls = Some(Arc::new(tls));
        self
    }

    /// The TLS client new connections are made with, if they speak TLS.
    #[cfg(feature = "tls")]
    pub fn tls(&self) -> Option<&Arc<crate::tls::Client>> {
        self.tls.as_ref()
    }

    /// Whether task `task` speaks h2c, if known (see the `h2c` module); `None`: ask with
    /// [`probe_h2c`](Self::probe_h2c).
    pub fn h2c_known(&self, task: usize) -> Option<bool> {
        self.h2c.known(task, || self.now_ms())
    }

    /// Asks task `task` whether it speaks h2c, on a connection of its own (see the `h2c` module); a
    /// connection that cannot be made is no answer, and says yes (the request's own connect
    /// then fails as it would have).
    pub async fn probe_h2c(&self, task: usize) -> bool {
        let Ok(stream) = self.tcp(task).await else {
            return true;
        };
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            // Over TLS the question is ALPN's: offer `h2` and `http/1.1`, see which is taken. A
            // handshake that fails is no answer (the request's own fails the same way).
            let shake = tls.connect(task, stream, crate::tls::Alpn::Either);
            let answer = match tokio::time::timeout(self.connect_timeout, shake).await {
                Ok(Ok(s)) if crate::tls::is_h2(&s) => h2c::Answer::Yes,
                Ok(Ok(_)) => h2c::Answer::No,
                Ok(Err(_)) => return true,
                Err(_) => h2c::Answer::Silent,
            };
            return self.h2c.record(task, answer, self.now_ms());
        }
        let answer = h2c::probe(stream, self.connect_timeout).await;
        if answer != h2c::Answer::Yes {
            if let Some(t) = self.targets.get(task) {
                tracing::warn!(
                    upstream = %t.text,
                    answer = ?answer,
                    "upstream gave no HTTP/2 (h2c) answer; HTTP/2 clients' requests go to it \
                     over HTTP/1.1"
                );
            }
        }
        self.h2c.record(task, answer, self.now_ms())
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// This thread's connections.
    fn home(&self) -> &Home {
        self.local
            .get_or(|| idle::home(self.targets.len(), self.max_idle, self.idle_timeout))
    }

    /// Idle HTTP/1.1 connections to `task` on this thread (for tests and `/status`-style views).
    pub fn idle_here(&self, task: usize) -> usize {
        lock(self.home()).idle(task)
    }

    /// Sends `req` to task `task` (HTTP/2 with prior knowledge when `http2`; the request must
    /// then carry an absolute URI, for HTTP/1.1 an origin-form one and a `Host` header).
    ///
    /// One future for both protocols rather than one calling another per protocol: each level
    /// of future keeps its own copy of the request and copies the whole future once more when
    /// built, per request.
    ///
    /// `raw_fields`: over HTTP/1.1, the response's header fields may pass through as bytes
    /// (`RawFields`: only for a caller whose client is written bytes, the fast path's).
    /// `added`: fields the request goes out with besides its map's ([`AddedHeaders`]).
    pub fn send<'a>(
        self: &'a Arc<Self>,
        task: usize,
        req: Request<RequestBody>,
        http2: bool,
        raw_fields: bool,
        added: &'a AddedHeaders,
    ) -> impl Future<Output = Result<Response<UpstreamBody>, UpstreamError>> + 'a {
        // An `async` block that takes `req` where it stands, not an `async fn`: an async fn's
        // arguments are moved once more, into its body's own locals, when it is first polled —
        // a copy of the whole request, per request, into memory its connection's last request
        // left cold.
        let mut req = req;
        async move {
            if http2 {
                // hyper writes the request: the fields go into its map.
                added.insert_into(req.headers_mut());
                loop {
                    let (mut tx, state, reused) = self.http2_sender(task).await?;
                    let lease = Lease::enter(self, state);
                    match tx.try_send_request(req).await {
                        Ok(res) => {
                            return Ok(res.map(|b| UpstreamBody::hyper(b, Some(lease))));
                        }
                        // Refused unsent by a connection that carried requests before (it was
                        // closing): sent again, on a new one.
                        Err(mut e) => match e.take_message() {
                            Some(r) if reused => req = r,
                            _ => return Err(UpstreamError::request(e.into_error())),
                        },
                    }
                }
            }
            let idle = lock(self.home()).checkout(task);
            let reused = idle.is_some();
            let h = match idle {
                Some(h) => h,
                // Boxed: the connect path (resolve, connect, timeout) runs once per
                // connection, while this future is built, moved and polled per request.
                None => Box::pin(self.connect_http1(task)).await?,
            };
            if req.headers().contains_key(http::header::UPGRADE) {
                // Boxed, as a rare path: its futures need not make every request's bigger.
                return Box::pin(send_upgrade(h, req, added)).await;
            }
            let exchanged = match exchange(h, req, reused, raw_fields, added).await {
                Ok(x) => x,
                // The upstream closed the reused connection as the request went out (the
                // keep-alive race): a safe, bodiless request goes once more, on a new one.
                Err(Failed {
                    replay: Some(r), ..
                }) => Box::pin(self.replay_after_race(task, r)).await?,
                Err(f) => return Err(UpstreamError::wire(f.error)),
            };
            Ok(self.http1_response(task, exchanged))
        }
    }

    /// [`send`](Self::send), owning what it uses: a future that may outlive the request that
    /// made it (`forward::abandoned`: the exchange goes on after its caller went away).
    #[allow(clippy::manual_async_fn)] // an `async` block, as `send`'s: arguments stay put
    pub fn send_owned(
        self: Arc<Self>,
        task: usize,
        req: Request<RequestBody>,
        http2: bool,
        raw_fields: bool,
        added: AddedHeaders,
    ) -> impl Future<Output = Result<Response<UpstreamBody>, UpstreamError>> + Send + 'static {
        async move { self.send(task, req, http2, raw_fields, &added).await }
    }

    /// Sends once more, on a new connection, a request whose reused connection the upstream
    /// closed as it went out.
    async fn replay_after_race(&self, task: usize, r: Replay) -> Result<Exchanged, UpstreamError> {
        self.count_keepalive_race(task);
        let h = self.connect_http1(task).await?;
        replay(h, r).await.map_err(|f| UpstreamError::wire(f.error))
    }

    /// The upstream closed a reused HTTP/1.1 connection as the request went out.
    fn count_keepalive_race(&self, task: usize) {
        if let Some(t) = self.targets.get(task) {
            metrics::counter!(
                crate::metrics::KEEPALIVE_RACES,
                crate::metrics::L_UPSTREAM => t.text.to_string()
            )
            .increment(1);
        }
    }

    /// The response to an HTTP/1.1 exchange with `task`: its head, and its body read from the
    /// connection, which goes back to this thread's idle list when the body ends.
    fn http1_response(&self, task: usize, exchanged: Exchanged) -> Response<UpstreamBody> {
        let Exchanged {
            head,
            conn,
            sending,
        } = exchanged;
        let body = UpstreamBody::http1(
            conn,
            head.framing,
            head.keep_alive,
            sending,
            Arc::clone(self.home()),
            task,
        );
        let mut res = Response::new(body);
        *res.status_mut() = head.status;
        *res.version_mut() = head.version;
        *res.headers_mut() = head.headers;
        if let Some(r) = head.reason.and_then(|r| ReasonPhrase::try_from(r).ok()) {
            res.extensions_mut().insert(r);
        }
        res
    }

    async fn tcp(&self, task: usize) -> Result<TcpStream, UpstreamError> {
        let t = self
            .targets
            .get(task)
            .ok_or_else(|| UpstreamError::connect(format!("no upstream task number {task}")))?;
        let connect = async {
            match t.ip {
                Some(ip) => TcpStream::connect(ip).await,
                None => TcpStream::connect(&*t.text).await,
            }
        };
        let stream = match tokio::time::timeout(self.connect_timeout, connect).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(UpstreamError::connect(e)),
            Err(_) => {
                return Err(UpstreamError::connect(format!(
                    "no connection within connect_timeout_ms = {}",
                    self.connect_timeout.as_millis()
                )))
            }
        };
        // Requests and responses are small writes that must not wait for an ACK (Nagle).
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }

    /// A new connection to task `task`: TCP, and the TLS handshake over it when the pool
    /// speaks TLS (offering `http2`'s protocol by ALPN).
    async fn open(&self, task: usize, http2: bool) -> Result<Io, UpstreamError> {
        let tcp = self.tcp(task).await?;
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            let alpn = if http2 {
                crate::tls::Alpn::Http2
            } else {
                crate::tls::Alpn::Http1
            };
            let shake = tls.connect(task, tcp, alpn);
            return match tokio::time::timeout(self.connect_timeout, shake).await {
                Ok(Ok(s)) => Ok(Io::Tls(Box::new(s))),
                Ok(Err(e)) => Err(UpstreamError::connect(TlsFailed(e))),
                Err(_) => Err(UpstreamError::connect(format!(
                    "no TLS handshake within connect_timeout_ms = {}",
                    self.connect_timeout.as_millis()
                ))),
            };
        }
        let _ = http2;
        Ok(Io::Plain(tcp))
    }

    async fn connect_http1(&self, task: usize) -> Result<Http1, UpstreamError> {
        Ok(Http1::new(self.open(task, false).await?))
    }
}

/// Sends a request that may upgrade its connection: the connection becomes the tunnel's after
/// a 101, so hyper's client takes it on a task of its own (which hands it over), and it is
/// never put back.
async fn send_upgrade(
    h: Http1,
    mut req: Request<RequestBody>,
    added: &AddedHeaders,
) -> Result<Response<UpstreamBody>, UpstreamError> {
    added.insert_into(req.headers_mut());
    let mut tx = h
        .into_upgrade_sender()
        .await
        .map_err(UpstreamError::request)?;
    match tx.send_request(req).await {
        Ok(res) => Ok(res.map(|b| UpstreamBody::hyper(b, None))),
        Err(e) => Err(UpstreamError::request(e)),
    }
}
