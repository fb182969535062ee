//! A client connection's progress — what its requests, bodies and reads tell it — and the one
//! timer per connection that reads it to enforce the connection's timeouts: header read, idle,
//! send, request body read, and the upstream's response body.
//!
//! Why a module of its own, below the listener: the token a request carries while it is in
//! progress ([`ActiveRequest`]) travels with the request through `forward` and the bodies
//! (`body`) until its response ends, and those bodies report their waits here.
//! Kept in the listener, every layer a request passes through would import the listener back;
//! here it imports nothing of the proxy, so each layer may import it.
//!
//! Why one timer per connection, re-armed a few times per timeout, and not hyper's own
//! `header_read_timeout`: hyper 1.x (`proto/h1/conn.rs`, `poll_read_head`) builds a boxed tokio
//! `Sleep` for every request head and drops it once the head is in, registers it in tokio's timer
//! wheel whenever the head is not already buffered (always, on a keep-alive connection waiting for
//! its next request) and removes it again, and makes its dispatcher loop once more per request to
//! start it (`State::idle` sets `notify_read`). With wrk's requests that was ~1,400 of ~44,500
//! user-space instructions per forwarded request (cachegrind, bench/results/proxy-forwarding.md
//! "Sixth round"). Here each request only counts itself (two relaxed atomic additions and a
//! subtraction); the connection's one timer checks those counts every quarter of the shortest
//! timeout.
//!
//! What is enforced (measured from a coarser clock, so a limit `L` closes between `L` and
//! 1.25 `L` after its start): a request is in progress from its head until its response body
//! ends (an [`ActiveRequest`] token travels with the response), and a connection with one in progress is
//! never cut, so a slow upstream or a long streamed response is not. Otherwise:
//! - a connection that has sent no complete head since it opened, or (HTTP/1.1) has begun its
//!   next head and not finished it, gets the header timeout: closed and counted as
//!   `header_timeout` — a slow or stalled head, a client that sends nothing (hyper-util's
//!   protocol detection used to wait for those bytes without any timeout), an HTTP/2 preface
//!   (or half of one) with no request after it (it used to be exempt for good). The next head's
//!   time starts when its first bytes are seen, not when the last response ended;
//! - a connection between requests (an idle HTTP/1.1 keep-alive, an HTTP/2 connection with no
//!   stream open; its control frames — PING, WINDOW_UPDATE — are not progress) gets the idle
//!   timeout, `listen.idle_timeout_ms`: closed uncounted, an HTTP/2 one gracefully with GOAWAY
//!   by `Progress::close`, so a stream opened in the same instant is served, not lost. It is
//!   longer than the header timeout by default because clients keep pooled connections for
//!   their next request (closing one at the instant a client reuses it loses that request to
//!   the race), and one HTTP/2 connection carries a whole client (a gRPC channel quiet between
//!   calls);
//! - while the connection cap is reached (new clients waiting in the kernel's backlog), a
//!   connection found idle at a check is closed then, without waiting for its idle timeout:
//!   the slot goes to a client with a request (nginx reuses its idle keep-alive connections
//!   the same way when `worker_connections` run out);
//! - under pressure — many connections open, or the proxy refusing work for its own overload —
//!   an HTTP/1.1 connection's idle timeout is scaled down towards `listen.idle_timeout_min_ms`
//!   ([`pressure`] says why and how), so the idle connections a burst left behind go
//!   within seconds instead of holding memory for the client pool's own idle timeout.
//!
//! And one limit while a request is in progress, the send timeout (`listen.send_timeout_ms`):
//! a client that takes no byte of its response for that long — its socket full at every check
//! and nothing written since — is cut and counted as `send_timeout`. Without it a client that
//! stops reading (a "slow read" attack, or a dead peer behind a full window) holds its
//! connection, the upstream connection the response comes through and its admission slot for
//! ever: a handful of them take the whole concurrency limit. Progress is any write the socket
//! takes, so a slow but live reader is never cut (nginx's `send_timeout` is the same rule).
//! Over HTTP/2 a client can stall without filling the socket, by granting no flow-control
//! credit: there the sign is a response body whose data hyper holds without asking for more
//! ([`ReportingResponseBody`]) while nothing is written and no body on the connection is polled. A stream
//! stalled so on a connection whose other streams keep moving is cut alone: its body is
//! dropped, which frees its slots, and counted as `send_timeout` ([`ReportingResponseBody`] says how).
//!
//! The same for the other direction, the body read timeout (`listen.body_read_timeout_ms`): a
//! request body streamed to the upstream whose last poll found nothing from the client
//! (`body::UnreadRequestBody` reports it), with no body frame coming on the connection
//! since, for that long, is a client that stopped mid-upload (the "slow POST" attack): cut and
//! counted as `body_timeout`.
//!
//! And for the response's other end, the upstream's response body timeout
//! (`upstream.response_body_timeout_ms`): a response body whose last poll found nothing from
//! its upstream, with no response body frame coming on the connection since, for that long, is
//! an upstream hung mid-answer — cut (the answer cannot be completed) and counted as
//! `upstream_timeout`. Without it the admission slot and the upstream slot stay held even after
//! the client has gone (nothing is written to find out).
//!
//! gRPC streams are left out of these body rules (their bodies do not report): their silences
//! are the protocol's — a client stream's next message may come much later, a consumer may
//! pause a server stream — and their calls are bounded by deadlines and the admission limit.

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

mod pressure;
pub use pressure::IdlePressure;

/// What a connection's requests and reads tell its timer.
#[derive(Debug, Default)]
pub struct Progress {
    /// Request heads handed to the service.
    heads: AtomicU64,
    /// Requests in progress (live [`ActiveRequest`] tokens).
    active: AtomicU64,
    /// Bytes were read since the last request ended (a head is under way, not an idle wait).
    read: AtomicBool,
    /// The client speaks HTTP/2 (its preface, or an h2 request): bytes read are not a head.
    h2: AtomicBool,
    /// Writes the socket took (counted by the connection's one writer, so a plain load and
    /// store; a lost count after an upgrade hands the socket on would be harmless).
    written: AtomicU64,
    /// The last write found the socket full: the client is not taking what is sent.
    write_blocked: AtomicBool,
    /// Polls of response bodies served through hyper ([`ReportingResponseBody`]).
    polled: AtomicU64,
    /// Of those bodies, how many handed over data at their last poll and have not been asked
    /// for more: hyper is holding it (over HTTP/2, waiting for the client's flow-control credit).
    holding: AtomicU64,
    /// Request bodies whose last poll found nothing from the client (the upstream waits).
    body_waiting: AtomicU64,
    /// Request body frames that came from the client.
    body_frames: AtomicU64,
    /// Response bodies whose last poll found nothing from the upstream.
    upstream_waiting: AtomicU64,
    /// Response body frames that came from upstreams.
    upstream_frames: AtomicU64,
    /// The connection was cut because an upstream stalled mid-body (read by the response's
    /// guard as it drops: the admission slot's outcome is then a drop, not a slow success).
    pub(crate) upstream_stalled: AtomicBool,
    /// Notified to close the connection gracefully: an idle HTTP/2 connection's server sends
    /// GOAWAY and closes once no stream is open (see [`watch`]). A `Notify` is inline (no
    /// allocation per connection, as a cancellation token's node would be); its stored permit
    /// reaches a waiter that comes later.
    pub(crate) close: tokio::sync::Notify,
    /// The HTTP/2 response bodies the timer may cut one by one ([`ReportingResponseBody`]'s module docs); dead
    /// ones are dropped as the list grows and at each check. Behind a trait, so that this
    /// module need not know the body type inside (the proxy's, defined above it); its one
    /// call is at the timer's checks, not per request.
    streams: std::sync::Mutex<Vec<std::sync::Weak<dyn sent::Cut>>>,
}

impl Progress {
    /// Keeps the connection marked as having a response in progress, without a request (a cut
    /// HTTP/2 response whose stream hyper still holds: [`ReportingResponseBody`]).
    fn hold(self: &Arc<Self>) -> ActiveRequest {
        self.active.fetch_add(1, Relaxed);
        ActiveRequest(Arc::clone(self))
    }

    /// Adds an HTTP/2 response body the timer may cut.
    fn register(&self, body: std::sync::Weak<dyn sent::Cut>) {
        let mut list = self
            .streams
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if list.len() >= 64 && list.len().is_power_of_two() {
            list.retain(|w| w.strong_count() > 0);
        }
        list.push(body);
    }

    /// Cuts the HTTP/2 response bodies that have held data unasked-for for `limit` at `now`;
    /// how many.
    fn cut_stalled_streams(&self, now: Instant, limit: Duration) -> u64 {
        let mut list = self
            .streams
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if list.is_empty() {
            return 0;
        }
        list.retain(|w| w.strong_count() > 0);
        let live: Vec<_> = list.iter().filter_map(std::sync::Weak::upgrade).collect();
        drop(list);
        // Only while the socket takes what is written: behind a full socket (a slow reader)
        // hyper polls a body only as its buffers drain, which is the client's pace, not a stall.
        let socket_free = !self.write_blocked.load(Relaxed);
        // Each one outside the list's lock (a cut drops a body, which may take a while).
        live.iter()
            .filter(|b| b.cut_if_stalled(now, limit, socket_free))
            .count() as u64
    }

    /// A request head has arrived; the token marks it in progress until dropped.
    pub fn begin(self: &Arc<Self>, version: http::Version) -> ActiveRequest {
        self.heads.fetch_add(1, Relaxed);
        self.active.fetch_add(1, Relaxed);
        if version == http::Version::HTTP_2 {
            self.h2.store(true, Relaxed);
        }
        ActiveRequest(Arc::clone(self))
    }

    fn snapshot(&self) -> Snapshot {
        let heads = self.heads.load(Relaxed);
        Snapshot {
            heads,
            active: self.active.load(Relaxed),
            // Only after a request (a first head's time runs from the connection's opening),
            // and never over HTTP/2, whose bytes between streams may be control frames only.
            reading: heads > 0 && self.read.load(Relaxed) && !self.h2.load(Relaxed),
        }
    }

    /// What the send timeout compares between checks: writes the socket took and polls of
    /// response bodies.
    /// Writes the socket has taken so far, and whether the last one found it full (for a
    /// listener that keeps only the send timeout: the admin one).
    pub(crate) fn writes(&self) -> (u64, bool) {
        (self.written.load(Relaxed), self.write_blocked.load(Relaxed))
    }

    fn sending(&self) -> (u64, u64) {
        (self.written.load(Relaxed), self.polled.load(Relaxed))
    }

    /// A request body starts or stops waiting on the client ([`UnreadRequestBody`]).
    ///
    /// [`UnreadRequestBody`]: crate::body::UnreadRequestBody
    pub(crate) fn body_wait(&self, waiting: bool) {
        if waiting {
            self.body_waiting.fetch_add(1, Relaxed);
        } else {
            self.body_waiting.fetch_sub(1, Relaxed);
        }
    }

    /// A request body frame came from the client.
    pub(crate) fn body_came(&self) {
        self.body_frames.fetch_add(1, Relaxed);
    }

    /// A response body starts or stops waiting on its upstream.
    pub(crate) fn upstream_wait(&self, waiting: bool) {
        if waiting {
            self.upstream_waiting.fetch_add(1, Relaxed);
        } else {
            self.upstream_waiting.fetch_sub(1, Relaxed);
        }
    }

    /// A response body frame came from an upstream. A load and a store, not an atomic add:
    /// this is on every response's path, a connection's bodies are all polled on its one
    /// thread, and the count is only ever compared for a change.
    pub(crate) fn upstream_came(&self) {
        let n = &self.upstream_frames;
        n.store(n.load(Relaxed).wrapping_add(1), Relaxed);
    }

    /// Something the client has not taken is waiting: the socket full at the last write, or
    /// a response body's data held by hyper.
    fn waiting_on_client(&self) -> bool {
        self.write_blocked.load(Relaxed) || self.holding.load(Relaxed) > 0
    }

    /// Notes how a write to the client's socket went.
    fn wrote(&self, res: &Poll<io::Result<usize>>) {
        match res {
            Poll::Ready(Ok(n)) if *n > 0 => {
                self.written
                    .store(self.written.load(Relaxed).wrapping_add(1), Relaxed);
                self.write_blocked.store(false, Relaxed);
            }
            Poll::Pending => self.write_blocked.store(true, Relaxed),
            _ => {}
        }
    }
}

/// What [`watch`] compares between its checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Snapshot {
    heads: u64,
    active: u64,
    /// An HTTP/1.1 head is under way: bytes arrived since the last request ended.
    reading: bool,
}

/// A request in progress on its connection, from its head until its response body ends.
#[derive(Debug)]
pub struct ActiveRequest(Arc<Progress>);

impl ActiveRequest {
    /// The connection's progress.
    pub(crate) fn progress(&self) -> &Progress {
        &self.0
    }
}

impl Drop for ActiveRequest {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Relaxed);
        self.0.read.store(false, Relaxed);
    }
}

/// How a watched connection ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended<T> {
    /// The connection's own future finished with this.
    Done(T),
    /// Dropped by a timeout, or while idle at the connection cap.
    TimedOut {
        /// It cut a head under way or a connection that never sent one (not one between
        /// requests): a slow client, counted as `header_timeout`.
        counted: bool,
    },
    /// Dropped by the send timeout: a response the client took nothing of (counted as
    /// `send_timeout`).
    SendStalled,
    /// Dropped by the body read timeout: a request body the client sent nothing more of while
    /// the upstream waited for it (counted as `body_timeout`).
    BodyStalled,
    /// Dropped by the upstream's response body timeout: a response whose upstream sent nothing
    /// more (counted as `upstream_timeout`).
    UpstreamStalled,
}

/// The limits [`watch`] enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// For a head: `listen.header_read_timeout_ms`.
    pub header: Duration,
    /// Between requests: `listen.idle_timeout_ms`.
    pub idle: Duration,
    /// For a response the client takes nothing of: `listen.send_timeout_ms`.
    pub send: Duration,
    /// For a request body the client sends nothing more of: `listen.body_read_timeout_ms`.
    pub body: Duration,
    /// For a response body its upstream sends nothing more of:
    /// `upstream.response_body_timeout_ms`.
    pub upstream_body: Duration,
    /// How `idle` is scaled down under pressure for HTTP/1.1 ([`pressure`]).
    pub idle_pressure: IdlePressure,
}

impl Timeouts {
    /// How often [`watch`] checks a connection: a quarter of the shortest limit, so closing
    /// happens between 1 and 1.25 limits after the last progress (the pressure-scaled idle
    /// timeout included: under pressure a burst's idle connections go within 1.25 of its
    /// minimum).
    pub fn period(&self) -> Duration {
        let shortest = self
            .header
            .min(self.idle)
            .min(self.idle_pressure.min)
            .min(self.send)
            .min(self.body)
            .min(self.upstream_body);
        (shortest / 4).max(Duration::from_millis(1))
    }
}

/// Runs `conn` (a client connection's future) until it ends or one of `limits` closes it, as
/// the module describes: by dropping it (which closes the socket), or for an HTTP/2 connection
/// between requests by asking it to close gracefully. `slots` is the connection cap: with no
/// permit left, an idle connection is closed at the next check. Tells `cut` how many HTTP/2
/// responses it cut alone at each check (the send timeout applied to one stream:
/// [`ReportingResponseBody`]'s module docs), and asks `overloaded` whether the proxy refused
/// work for its own overload while the connection has been idle (since the instant it is
/// given): an HTTP/1.1 connection's idle timeout is then `limits.idle_pressure`'s minimum.
pub async fn watch<F: Future>(
    conn: F,
    progress: &Progress,
    limits: Timeouts,
    slots: &Semaphore,
    cut: impl Fn(u64),
    overloaded: impl Fn(Instant) -> bool,
) -> Ended<F::Output> {
    let mut checks = Checks::new(progress, &limits);
    let sleep = tokio::time::sleep_until(checks.first());
    tokio::pin!(conn, sleep);
    loop {
        // The timer is polled once after each reset (which registers it with this task's
        // waker, the same for the task's life) and then only once it has fired: a poll per
        // wake-up of the connection (several per request) would cost tokio's budget check and
        // a waker comparison each time for nothing.
        let mut armed = false;
        let fired = std::future::poll_fn(|cx| {
            if let Poll::Ready(out) = conn.as_mut().poll(cx) {
                return Poll::Ready(Some(out));
            }
            if !armed || sleep.is_elapsed() {
                armed = true;
                if sleep.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(None);
                }
            }
            Poll::Pending
        })
        .await;
        if let Some(out) = fired {
            return Ended::Done(out);
        }
        // `conn` was polled just before, so every head the client completed has been counted.
        match checks.check(progress, &limits, slots, &cut, &overloaded) {
            Check::Again(at) => sleep.as_mut().reset(at),
            Check::CloseGracefully => {
                progress.close.notify_one();
                return Ended::Done(conn.await);
            }
            Check::Cut(ended) => return ended,
        }
    }
}

mod check;
mod sent;
mod watched;
use check::{Check, Checks, Stall};
pub use sent::ReportingResponseBody;
pub use watched::Watched;

#[cfg(test)]
mod tests;
