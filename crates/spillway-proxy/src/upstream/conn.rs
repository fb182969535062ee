//! Upstream connections: hyper's connection API (`hyper::client::conn`) with an idle list per
//! thread and task, instead of hyper-util's legacy pooled client.
//!
//! Why: the data plane runs one single-threaded runtime per core (`crate::run`), so a connection
//! is opened, used and reused by one thread, and the pool needs no lock, no shared map keyed by
//! scheme and authority, and no task of its own. The legacy client cost, per forwarded request,
//! a boxed response future, three allocations for the connection's info in the response's
//! extensions, a locked pool checkout and (while the response body streamed) a task spawned to
//! put the connection back (heaptrack and hyper-util 0.1 `client/legacy/client.rs`). Here a
//! connection goes back to its thread's idle list when its response body ends, from the body
//! itself ([`UpstreamBody`]).
//!
//! What still holds (the issue's "bounded pool of upstream connections, idle connections closed
//! after a timeout"): requests in flight per task are bounded by the task's slots
//! (`max_requests_per_task`, `super::Task::slots`); idle HTTP/1.1 connections by
//! `max_idle_per_task` per thread (the legacy client's bound was per client, and each
//! data-plane thread had its own); a connection idle for `idle_timeout_ms` is closed by its own
//! driver task whether or not traffic comes; a broken connection is dropped, never put back; a
//! request that an idle connection refused before sending anything (the upstream closed it in
//! the meantime) is sent again on another connection, as the legacy client's
//! `retry_canceled_requests` did; a connection that cannot be made is a connect error, which the
//! caller may retry on another task. HTTP/2 (prior knowledge) keeps one multiplexed connection
//! per task and thread, closed after the same idle timeout once no stream is open on it.
//!
//! The idle lists are per OS thread ([`ThreadLocal`]), which is per data-plane thread in
//! production; on a work-stealing runtime (tests, the benchmark switch, health checks on the
//! control runtime) each worker thread keeps its own, which is correct, only less shared.

use std::cell::RefCell;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use thread_local::ThreadLocal;
use tokio::net::TcpStream;

use super::ProxyBody;

/// Why a request could not be sent upstream or its response head not read.
#[derive(Debug)]
pub struct UpstreamError {
    connect: bool,
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl UpstreamError {
    /// The connection could not be made (nothing reached the task: safe to send elsewhere).
    pub fn is_connect(&self) -> bool {
        self.connect
    }

    fn connect(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        UpstreamError {
            connect: true,
            source: e.into(),
        }
    }

    fn request(e: hyper::Error) -> Self {
        UpstreamError {
            connect: false,
            source: Box::new(e),
        }
    }
}

impl std::fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.connect {
            "connection failed"
        } else {
            "request failed"
        })
    }
}

impl std::error::Error for UpstreamError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

/// Where one task is reached.
#[derive(Debug)]
struct Target {
    /// `host:port` as configured (resolved on each connect when it is not an IP address).
    text: Arc<str>,
    ip: Option<std::net::SocketAddr>,
}

/// Use of one connection: requests (HTTP/1.1: 0 or 1; HTTP/2: open streams) and since when it
/// has had none.
#[derive(Debug, Default)]
struct ConnState {
    busy: AtomicUsize,
    /// Milliseconds since [`Connections::origin`] when `busy` last fell to 0.
    idle_since_ms: AtomicU64,
}

impl ConnState {
    fn enter(&self) {
        self.busy.fetch_add(1, Ordering::Relaxed);
    }

    fn leave(&self, now_ms: u64) {
        if self.busy.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.idle_since_ms.store(now_ms, Ordering::Relaxed);
        }
    }

    /// How long the connection has been idle, `None` if in use.
    fn idle_for(&self, now_ms: u64) -> Option<Duration> {
        if self.busy.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let since = self.idle_since_ms.load(Ordering::Relaxed);
        Some(Duration::from_millis(now_ms.saturating_sub(since)))
    }
}

struct Idle {
    tx: http1::SendRequest<ProxyBody>,
    state: Arc<ConnState>,
}

struct Multiplexed {
    tx: http2::SendRequest<ProxyBody>,
    state: Arc<ConnState>,
}

/// One thread's connections, indexed by task.
struct Local {
    http1: Vec<Vec<Idle>>,
    http2: Vec<Option<Multiplexed>>,
}

/// The upstream connections of one pool (see the module doc).
pub struct Connections {
    targets: Vec<Target>,
    connect_timeout: Duration,
    idle_timeout: Duration,
    max_idle: usize,
    origin: Instant,
    local: ThreadLocal<RefCell<Local>>,
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
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn with_local<R>(&self, f: impl FnOnce(&mut Local) -> R) -> Option<R> {
        let n = self.targets.len();
        let cell = self.local.get_or(|| {
            RefCell::new(Local {
                http1: (0..n).map(|_| Vec::new()).collect(),
                http2: (0..n).map(|_| None).collect(),
            })
        });
        // Never re-entered (nothing here calls back into the pool); a failed borrow would only
        // cost a connection its reuse.
        cell.try_borrow_mut().ok().map(|mut l| f(&mut l))
    }

    /// Idle HTTP/1.1 connections to `task` on this thread (for tests and `/status`-style views).
    pub fn idle_here(&self, task: usize) -> usize {
        self.with_local(|l| l.http1.get(task).map_or(0, Vec::len))
            .unwrap_or(0)
    }

    /// Sends `req` to task `task` (HTTP/2 with prior knowledge when `http2`; the request must
    /// then carry an absolute URI, for HTTP/1.1 an origin-form one and a `Host` header).
    ///
    /// One `async fn` for both protocols rather than one calling another per protocol: each
    /// level of `async fn` keeps its own copy of the request in its future and copies the whole
    /// future once more when built, per request.
    pub async fn send(
        self: &Arc<Self>,
        task: usize,
        mut req: Request<ProxyBody>,
        http2: bool,
    ) -> Result<Response<UpstreamBody>, UpstreamError> {
        loop {
            if http2 {
                let open = self
                    .with_local(|l| {
                        let slot = l.http2.get_mut(task)?;
                        if slot.as_ref().is_some_and(|m| m.tx.is_closed()) {
                            *slot = None;
                        }
                        slot.as_ref().map(|m| (m.tx.clone(), Arc::clone(&m.state)))
                    })
                    .flatten();
                let reused = open.is_some();
                let (mut tx, state) = match open {
                    Some(o) => o,
                    None => {
                        // Boxed, as below.
                        let m = Box::pin(self.connect_http2(task)).await?;
                        let out = (m.tx.clone(), Arc::clone(&m.state));
                        self.with_local(|l| {
                            if let Some(slot) = l.http2.get_mut(task) {
                                *slot = Some(m);
                            }
                        });
                        out
                    }
                };
                let lease = Lease::enter(self, task, state);
                match tx.try_send_request(req).await {
                    Ok(res) => return Ok(res.map(|b| UpstreamBody::new(b, lease))),
                    Err(mut e) => match e.take_message() {
                        Some(r) if reused => req = r,
                        _ => return Err(UpstreamError::request(e.into_error())),
                    },
                }
            } else {
                let idle = self.with_local(|l| checkout(l, task)).flatten();
                let reused = idle.is_some();
                let Idle { mut tx, state } = match idle {
                    Some(i) => i,
                    // Boxed: the connect path (resolve, connect, timeout, handshake) was most of
                    // this future's size and runs once per connection, while the future itself
                    // is built, moved and polled for every request.
                    None => Box::pin(self.connect_http1(task)).await?,
                };
                let mut lease = Lease::enter(self, task, state);
                match tx.try_send_request(req).await {
                    Ok(res) => {
                        // After a 101 the connection becomes the tunnel's: never put back.
                        if res.status() != http::StatusCode::SWITCHING_PROTOCOLS {
                            lease.http1 = Some(tx);
                        }
                        return Ok(res.map(|b| UpstreamBody::new(b, lease)));
                    }
                    Err(mut e) => match e.take_message() {
                        // Not sent: the idle connection had been closed meanwhile. Another one.
                        Some(r) if reused => req = r,
                        _ => return Err(UpstreamError::request(e.into_error())),
                    },
                }
            }
        }
    }

    async fn tcp(&self, task: usize) -> Result<TokioIo<TcpStream>, UpstreamError> {
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
        Ok(TokioIo::new(stream))
    }

    async fn connect_http1(&self, task: usize) -> Result<Idle, UpstreamError> {
        let io = self.tcp(task).await?;
        let (tx, conn) = http1::Builder::new()
            .handshake(io)
            .await
            .map_err(UpstreamError::connect)?;
        let state = Arc::new(ConnState::default());
        tokio::spawn(drive(
            conn.with_upgrades(),
            Arc::clone(&state),
            self.idle_timeout,
            self.origin,
        ));
        Ok(Idle { tx, state })
    }

    async fn connect_http2(&self, task: usize) -> Result<Multiplexed, UpstreamError> {
        let io = self.tcp(task).await?;
        let (tx, conn) = http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .handshake(io)
            .await
            .map_err(UpstreamError::connect)?;
        let state = Arc::new(ConnState::default());
        tokio::spawn(drive(
            conn,
            Arc::clone(&state),
            self.idle_timeout,
            self.origin,
        ));
        Ok(Multiplexed { tx, state })
    }

    /// Puts an HTTP/1.1 connection back on this thread's idle list for `task` (dropped, which
    /// closes it, when the list is full of live connections).
    fn put_back(&self, task: usize, idle: Idle) {
        let max = self.max_idle;
        self.with_local(move |l| {
            let Some(list) = l.http1.get_mut(task) else {
                return;
            };
            if list.len() >= max {
                // Connections the idle timeout or the upstream closed make room first.
                list.retain(|i| !i.tx.is_closed());
            }
            if list.len() < max {
                list.push(idle);
            }
        });
    }
}

/// The most recently used live, ready connection (LIFO: the warmest, and the older ones age
/// out under the idle timeout when traffic falls). Closed or unready ones are dropped.
fn checkout(l: &mut Local, task: usize) -> Option<Idle> {
    let list = l.http1.get_mut(task)?;
    while let Some(i) = list.pop() {
        if i.tx.is_ready() && !i.tx.is_closed() {
            return Some(i);
        }
    }
    None
}

/// Runs a connection until it ends or has been idle for `idle` (then dropping it closes it;
/// a sender still on an idle list sees it closed and is dropped at the next checkout).
async fn drive<C: Future>(conn: C, state: Arc<ConnState>, idle: Duration, origin: Instant) {
    let mut conn = pin!(conn);
    let mut check = pin!(tokio::time::sleep(idle));
    loop {
        tokio::select! {
            biased;
            _ = &mut conn => return,
            () = &mut check => {
                let now_ms = u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX);
                let wait = match state.idle_for(now_ms) {
                    Some(d) if d >= idle => return,
                    Some(d) => idle - d,
                    None => idle,
                };
                check.as_mut().reset(tokio::time::Instant::now() + wait);
            }
        }
    }
}

/// One request's hold on a connection, released when its response body ends or is dropped.
struct Lease {
    home: Arc<Connections>,
    task: usize,
    state: Arc<ConnState>,
    /// The HTTP/1.1 connection's sender, to put back when the exchange completed.
    http1: Option<http1::SendRequest<ProxyBody>>,
    /// The response body was read to its end (the connection is free for the next request).
    reusable: bool,
}

impl Lease {
    /// One request on a connection of `task`: counted in flight from here until the lease is
    /// dropped (entering and leaving in one type, so they always pair).
    fn enter(home: &Arc<Connections>, task: usize, state: Arc<ConnState>) -> Self {
        state.enter();
        Lease {
            home: Arc::clone(home),
            task,
            state,
            http1: None,
            reusable: false,
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.state.leave(self.home.now_ms());
        if let Some(tx) = self.http1.take() {
            // Ready: its connection task has finished the exchange and waits for the next
            // request (it does so before the body's end reaches us on one thread). Anything
            // else — the body cut short, the request body still being sent — is not reused.
            if self.reusable && tx.is_ready() {
                let state = Arc::clone(&self.state);
                self.home.put_back(self.task, Idle { tx, state });
            }
        }
    }
}

/// An upstream response body; its end puts the connection back on the idle list.
pub struct UpstreamBody {
    inner: Incoming,
    lease: Option<Lease>,
}

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamBody").finish_non_exhaustive()
    }
}

impl UpstreamBody {
    fn new(inner: Incoming, lease: Lease) -> Self {
        UpstreamBody {
            inner,
            lease: Some(lease),
        }
    }

    fn release(&mut self, reusable: bool) {
        if let Some(mut l) = self.lease.take() {
            l.reusable = reusable;
        }
    }
}

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        // A server sending a body of known length stops polling after the last byte (hyper
        // checks `is_end_stream`), so the end is often seen only here.
        let ended = self.inner.is_end_stream();
        self.release(ended);
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        match &r {
            Poll::Ready(None) => self.release(true),
            Poll::Ready(Some(Err(_))) => self.release(false),
            _ => {}
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
