//! The client-facing listener: accept with back-pressure, serve HTTP/1.1 and h2c on the same
//! port, bound slow and oversized request heads, shut down gracefully.
//!
//! A cleartext connection starts on the proxy's own HTTP/1.1 fast path ([`http1`]), which hands
//! it to hyper's server (upgrades, expectations other than `100-continue`, h2c, malformed
//! heads) at the first request it does not serve; TLS connections go to hyper's server from
//! the start.
//!
//! Why a connection cap that *stops accepting* rather than accepting and closing: open connections
//! cost memory and file descriptors whether or not they carry requests ("connections are load
//! too"); closing them after accept costs a handshake each and invites instant reconnects, while
//! leaving them in the kernel's backlog makes clients wait (or time out) at no cost to the proxy.
//! (Each accept loop — one per data-plane thread — holds at most one accepted connection, unread,
//! while it waits for a slot.) Slow clients are bounded by the header-read timeout
//! (`crate::progress`: one timer per connection, not hyper's one per request head), oversized heads
//! by hyper's read buffer (431) and HTTP/2 header-list limit. With the `tls` feature and
//! `[listen.tls]`, connections are TLS (ALPN h2/http1.1), the handshake bounded by the same
//! header-read timeout.
//!
//! Why one listening socket per data-plane thread (`SO_REUSEPORT`, [`bind_per_thread`]): with
//! one socket per thread the kernel spreads new connections across the threads and each thread
//! accepts and serves its own, with no hand-off between threads (the layout nginx uses with
//! `reuseport`, and the one Linux added the option for: "SO_REUSEPORT", LWN 542629, 2013). Where
//! the option is missing the threads share one socket, which still works (each accepts from
//! it) but wakes them all on each connection.

mod bind;
pub mod http1;
mod nudge;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use spillway_tower::wire::Protocol;

use crate::body::ResponseBody;
use crate::metrics::Fault;
use crate::progress::{
    watch, Ended, IdlePressure, Progress, ReportingResponseBody, Timeouts, Watched,
};
use crate::state::ProxyState;
use crate::tls::Acceptor;

pub use bind::{bind, bind_per_thread, Bound};

/// Serves `listener` (over TLS when `tls` is given) until `shutdown` resolves, then waits up
/// to `drain` for open connections to finish their requests.
pub async fn serve(
    listener: TcpListener,
    state: Arc<ProxyState>,
    tls: Option<Acceptor>,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) {
    let cap = Arc::new(Semaphore::new(state.config().listen.max_connections));
    serve_capped(listener, state, tls, cap, shutdown, drain).await;
}

/// [`serve`] with the connection cap `cap` shared with other listeners (one per data-plane
/// thread, one cap for the process).
pub async fn serve_capped(
    listener: TcpListener,
    state: Arc<ProxyState>,
    tls: Option<Acceptor>,
    cap: Arc<Semaphore>,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) {
    let listen = state.config().listen.clone();
    let builder = Arc::new(hyper_server(&listen));
    // The cap is the semaphore's, sized from this configuration when the proxy started.
    let idle_pressure = IdlePressure::new(
        Duration::from_millis(listen.idle_timeout_min_ms),
        listen.idle_pressure_from_pct,
        listen.max_connections,
    );
    let graceful = GracefulShutdown::new();
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::pin!(shutdown);
    loop {
        let Some((stream, peer)) = accept(&listener, shutdown.as_mut()).await else {
            break;
        };
        let Some(slot) = connection_slot(&cap, &state, shutdown.as_mut()).await else {
            break;
        };
        let _ = stream.set_nodelay(true);
        metrics::gauge!(crate::metrics::CONNECTIONS).increment(1.0);
        let header = Duration::from_millis(listen.header_read_timeout_ms);
        let conn = Connection {
            peer: crate::forward::Peer::new(peer),
            progress: Arc::new(Progress::default()),
            watcher: graceful.watcher(),
            builder: Arc::clone(&builder),
            limits: Timeouts {
                header,
                idle: Duration::from_millis(listen.idle_timeout_ms),
                send: Duration::from_millis(listen.send_timeout_ms),
                body: Duration::from_millis(listen.body_read_timeout_ms),
                // The upstream's, read per connection: `[upstream]` may be reloaded.
                upstream_body: Duration::from_millis(
                    state.config().upstream.response_body_timeout_ms,
                ),
                idle_pressure,
            },
            state: Arc::clone(&state),
            stop: stop.clone(),
            slots: Arc::clone(&cap),
            max_head: listen.max_header_bytes,
        };
        match &tls {
            None => tokio::spawn(conn.cleartext(stream, slot)),
            Some(acceptor) => tokio::spawn(conn.tls(acceptor.clone(), stream, slot)),
        };
    }
    drop(listener);
    // Fast-path connections close at their next request boundary, hyper's on its signal.
    stop.cancel();
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(drain) => {
            tracing::warn!("shutdown: connections still open after the drain period; closing");
        }
    }
}

/// hyper's server for the connections the fast path hands over, and for TLS ones.
fn hyper_server(listen: &crate::config::ListenConfig) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // No timer for HTTP/1.1: the header-read timeout is `progress::watch`'s (hyper's default of
    // 30 s applies only with a timer; `None` says so explicitly).
    builder
        .http1()
        .header_read_timeout(None)
        .max_buf_size(listen.max_header_bytes);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(listen.max_header_bytes).unwrap_or(u32::MAX));
    builder
}

/// The next connection, or `None` once `shutdown` resolves.
async fn accept<S: Future<Output = ()>>(
    listener: &TcpListener,
    mut shutdown: std::pin::Pin<&mut S>,
) -> Option<(tokio::net::TcpStream, SocketAddr)> {
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => return Some(x),
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::error!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = shutdown.as_mut() => return None,
        }
    }
}

/// A slot under the connection cap for a connection just accepted; `None` once `shutdown`
/// resolves.
///
/// Back-pressure: at the cap the accept loop holds the connection it has just accepted,
/// unread, and accepts nothing more until a slot frees. (Taking the slot *before* accepting
/// would be exact for one listener, but with one listener per thread an idle thread would
/// hoard a slot while another thread's clients wait.)
async fn connection_slot<S: Future<Output = ()>>(
    cap: &Arc<Semaphore>,
    state: &ProxyState,
    shutdown: std::pin::Pin<&mut S>,
) -> Option<OwnedSemaphorePermit> {
    if let Ok(s) = Arc::clone(cap).try_acquire_owned() {
        return Some(s);
    }
    state.faults.count(Fault::ConnectionCap);
    tokio::select! {
        s = Arc::clone(cap).acquire_owned() => s.ok(),
        _ = shutdown => None,
    }
}

/// One accepted client connection and what serving it needs.
struct Connection {
    peer: crate::forward::Peer,
    progress: Arc<Progress>,
    /// Held until the connection ends, so the shutdown's drain waits for it.
    watcher: hyper_util::server::graceful::Watcher,
    builder: Arc<auto::Builder<TokioExecutor>>,
    limits: Timeouts,
    state: Arc<ProxyState>,
    stop: tokio_util::sync::CancellationToken,
    /// The connection cap, for closing idle connections at it (`progress::watch`).
    slots: Arc<Semaphore>,
    max_head: usize,
}

// Each way of serving takes the connection apart before its `async` block, which then holds
// the parts as the spawned task's own: an `async fn` taking `self` would keep the whole struct
// in the task beside the parts it moved out (bytes held per idle connection, docs/soak.md).
impl Connection {
    /// A cleartext connection: the HTTP/1.1 fast path, handed to hyper at the first request it
    /// does not serve. Holds its `slot` under the connection cap until it ends.
    fn cleartext(
        self,
        stream: tokio::net::TcpStream,
        slot: OwnedSemaphorePermit,
    ) -> impl Future<Output = ()> + Send + 'static {
        let Connection {
            peer,
            progress,
            watcher,
            builder,
            limits,
            state,
            stop,
            slots,
            max_head,
        } = self;
        async move {
            let io = Watched::new(stream, Arc::clone(&progress));
            let counts = Arc::clone(&state);
            let fast = http1::Settings {
                state,
                peer,
                progress: Arc::clone(&progress),
                max_head,
            };
            // Boxed: the connection's future goes by value into `watch` and is kept
            // there and here, once each (3 x 1.4 KiB of a 4.2 KiB task, measured with
            // `size_of_val` in a release build); one allocation per connection keeps an idle
            // connection's task at a few hundred bytes.
            let conn = Box::pin(async move {
                match http1::serve(io, &fast, &stop).await {
                    http1::Served::Closed => Ok(()),
                    http1::Served::HandOff(io) => {
                        let http1::Settings {
                            state,
                            peer,
                            progress,
                            ..
                        } = fast;
                        let watched = Arc::clone(&progress);
                        let svc = service(state, peer, progress, limits.period());
                        let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), svc);
                        let shut = |c: std::pin::Pin<&mut _>| {
                            auto::UpgradeableConnection::graceful_shutdown(c)
                        };
                        // Boxed: inline, hyper's connection would size every connection's task
                        // for this rare path, idle ones included (docs/soak.md: bytes held per
                        // idle connection).
                        let close = &watched.close;
                        Box::pin(until_closed(conn.into_owned(), shut, close, &stop, watcher)).await
                    }
                }
            });
            let cut = |n| count_cut(&counts, n);
            let overloaded = |idle: tokio::time::Instant| counts.overloaded_during(idle.into_std());
            let ended = watch(conn, &progress, limits, &slots, cut, overloaded).await;
            count_end(&counts, ended);
            closed(slot);
        }
    }

    /// A TLS connection: the handshake within the header-read timeout, then hyper's server.
    /// Holds its `slot` under the connection cap until it ends.
    #[cfg(feature = "tls")]
    fn tls(
        self,
        acceptor: Acceptor,
        stream: tokio::net::TcpStream,
        slot: OwnedSemaphorePermit,
    ) -> impl Future<Output = ()> + Send + 'static {
        let Connection {
            peer,
            progress,
            watcher,
            builder,
            limits,
            state,
            stop,
            slots,
            ..
        } = self;
        async move {
            let timed = tokio::time::timeout(limits.header, acceptor.accept(stream));
            let ended = match timed.await {
                Ok(Ok(tls)) => {
                    let io = Watched::new(tls, Arc::clone(&progress));
                    let svc = service(
                        Arc::clone(&state),
                        peer,
                        Arc::clone(&progress),
                        limits.period(),
                    );
                    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), svc);
                    let shut = |c: std::pin::Pin<&mut _>| {
                        auto::UpgradeableConnection::graceful_shutdown(c)
                    };
                    let close = &progress.close;
                    let conn =
                        Box::pin(until_closed(conn.into_owned(), shut, close, &stop, watcher));
                    let cut = |n| count_cut(&state, n);
                    let overloaded =
                        |idle: tokio::time::Instant| state.overloaded_during(idle.into_std());
                    watch(conn, &progress, limits, &slots, cut, overloaded).await
                }
                Ok(Err(_)) => {
                    state.faults.count(Fault::TlsHandshake);
                    Ended::Done(Ok(()))
                }
                Err(_) => Ended::TimedOut { counted: true },
            };
            count_end(&state, ended);
            closed(slot);
        }
    }

    /// Without the `tls` feature there is no acceptor to call.
    #[cfg(not(feature = "tls"))]
    async fn tls(self, acceptor: Acceptor, _: tokio::net::TcpStream, _: OwnedSemaphorePermit) {
        match acceptor {}
    }
}

/// A connection has closed: its `slot` under the cap is free again.
fn closed(slot: OwnedSemaphorePermit) {
    metrics::gauge!(crate::metrics::CONNECTIONS).decrement(1.0);
    drop(slot);
}

/// The service hyper's server calls for a connection it serves: each request marks its
/// connection's progress and is handled with the thread's current state.
fn service(
    state: Arc<ProxyState>,
    peer: crate::forward::Peer,
    progress: Arc<Progress>,
    period: Duration,
) -> impl hyper::service::Service<
    hyper::Request<hyper::body::Incoming>,
    Response = hyper::Response<ReportingResponseBody<ResponseBody>>,
    Error = std::convert::Infallible,
    Future: Send + 'static,
> {
    service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let version = req.version();
        let busy = progress.begin(version);
        let (req, upgrade) = crate::forward::upgrade_of(req);
        // The bodies report to the connection's send and body read timeouts, except gRPC
        // streams' (`ReportingResponseBody::new` says why).
        let grpc = Protocol::of(req.headers()) == Protocol::Grpc;
        let progress = (!grpc).then(|| Arc::clone(&progress));
        let req = match &progress {
            Some(p) => req.map(|b| b.reporting(p)),
            None => req,
        };
        let (parts, body) = req.into_parts();
        let peer = Some(peer.for_request(busy));
        let answer = crate::forward::handle(state.current(), peer, parts, body, upgrade);
        // An HTTP/2 stream's request runs in a task of its own, which the connection's timer
        // does not wake ([`nudge`]); hyper's HTTP/1.1 requests run in the connection's task.
        let every = (version == hyper::Version::HTTP_2).then_some(period);
        let answer = nudge::Nudged::new(answer, every);
        async move {
            let res = answer.await;
            res.map(|r| r.map(|b| ReportingResponseBody::new(b, progress)))
        }
    })
}

/// Runs a connection served by hyper until it ends; on `close` (an idle HTTP/2 connection,
/// `progress::watch`) or `stop` (the proxy shutting down) it is shut down gracefully (`shut`:
/// GOAWAY over HTTP/2, close after the response in progress over HTTP/1.1) and run to its end.
/// `watcher` is held until then, so the shutdown's drain waits for the connection, as it did
/// when hyper-util's watcher ran it.
async fn until_closed<C: Future>(
    conn: C,
    shut: impl FnOnce(std::pin::Pin<&mut C>),
    close: &tokio::sync::Notify,
    stop: &tokio_util::sync::CancellationToken,
    watcher: hyper_util::server::graceful::Watcher,
) -> C::Output {
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        out = conn.as_mut() => return out,
        () = close.notified() => {}
        () = stop.cancelled() => {}
    }
    shut(conn.as_mut());
    let out = conn.await;
    drop(watcher);
    out
}

/// Counts how a client connection ended.
/// `n` HTTP/2 responses cut alone by the send timeout (`ReportingResponseBody`).
fn count_cut(state: &ProxyState, n: u64) {
    for _ in 0..n {
        state.faults.count(Fault::SendTimeout);
    }
}

fn count_end(state: &ProxyState, ended: Ended<Result<(), BoxError>>) {
    match ended {
        Ended::Done(Ok(())) | Ended::TimedOut { counted: false } => {}
        Ended::Done(Err(e)) => count_connection_error(state, &*e),
        Ended::TimedOut { counted: true } => state.faults.count(Fault::HeaderTimeout),
        Ended::SendStalled => state.faults.count(Fault::SendTimeout),
        Ended::BodyStalled => state.faults.count(Fault::BodyTimeout),
        Ended::UpstreamStalled => state.faults.count(Fault::UpstreamTimeout),
    }
}

/// The error a connection served by hyper ends with.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn count_connection_error(state: &ProxyState, e: &(dyn std::error::Error + 'static)) {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(h) = err.downcast_ref::<hyper::Error>() {
            if h.is_parse_too_large() {
                state.faults.count(Fault::HeadersTooLarge);
            } else if h.is_parse() {
                state.faults.count(Fault::BadRequest);
            } else if h.is_timeout() {
                state.faults.count(Fault::HeaderTimeout);
            }
            return;
        }
        cur = err.source();
    }
}
