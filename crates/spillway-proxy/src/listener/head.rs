//! The header-read timeout of a client connection: one timer per connection, re-armed a few
//! times per timeout, instead of one per request head.
//!
//! Why not hyper's own `header_read_timeout`: hyper 1.x (`proto/h1/conn.rs`, `poll_read_head`)
//! builds a boxed tokio `Sleep` for every request head and drops it once the head is in,
//! registers it in tokio's timer wheel whenever the head is not already buffered (always, on a
//! keep-alive connection waiting for its next request) and removes it again, and makes its
//! dispatcher loop once more per request to start it (`State::idle` sets `notify_read`). With
//! wrk's requests that was ~1,400 of ~44,500 user-space instructions per forwarded request
//! (cachegrind, bench/results/proxy-forwarding.md "Sixth round"). Here each request only counts
//! itself (two relaxed atomic additions and a subtraction); the connection's one timer checks
//! those counts every quarter of the timeout.
//!
//! What is enforced (the same protection, measured from a coarser clock): a connection is
//! closed when, for at least the timeout and at most 1.25× it, it has had no request in
//! progress and has completed no new request head — a slow or stalled head (counted as
//! `header_timeout`, as hyper's was), a connection that sent nothing since it opened (counted:
//! hyper-util's protocol detection waited for those bytes without any timeout), or an idle
//! keep-alive connection (closed silently, as hyper closed it). A request is in progress from
//! its head until its response body ends (a [`Busy`] token travels with the response), so a slow
//! upstream or a long streamed response is never cut. HTTP/2 connections are watched by the same
//! rule: one that sends its preface, or half of it, and no request within the timeout is closed
//! and counted (it used to be left alone from its first bytes on: a client could hold a
//! connection slot for ever with `PRI * HTTP/2.0` and nothing more); one with no stream open and
//! none begun for `listen.http2_idle_timeout_ms` is closed uncounted, as an idle HTTP/1.1
//! keep-alive connection is after the header timeout (an HTTP/2 client reconnects for its next
//! request) — gracefully, with GOAWAY, by [`Progress::close`]: a stream opened in the same
//! instant is served, not lost. Longer than the header timeout by default, because one HTTP/2
//! connection carries a whole client (a gRPC channel quiet between calls).
//! Its control frames (PING, WINDOW_UPDATE) are not progress: only streams are.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// What a connection's requests and reads tell its timer.
#[derive(Debug, Default)]
pub struct Progress {
    /// Request heads handed to the service.
    heads: AtomicU64,
    /// Requests in progress (live [`Busy`] tokens).
    active: AtomicU64,
    /// Bytes were read since the last request ended (a head is under way, not an idle wait).
    read: AtomicBool,
    /// The client speaks HTTP/2 (its preface, or an h2 request): bytes read are not a head.
    h2: AtomicBool,
    /// Notified to close the connection gracefully: an idle HTTP/2 connection's server sends
    /// GOAWAY and closes once no stream is open (see [`watch`]). A `Notify` is inline (no
    /// allocation per connection, as a cancellation token's node would be); its stored permit
    /// reaches a waiter that comes later.
    pub(crate) close: tokio::sync::Notify,
}

impl Progress {
    /// A request head has arrived; the token marks it in progress until dropped.
    pub fn begin(self: &Arc<Self>, version: http::Version) -> Busy {
        self.heads.fetch_add(1, Relaxed);
        self.active.fetch_add(1, Relaxed);
        if version == http::Version::HTTP_2 {
            self.h2.store(true, Relaxed);
        }
        Busy(Arc::clone(self))
    }

    fn snapshot(&self) -> (u64, u64) {
        (self.heads.load(Relaxed), self.active.load(Relaxed))
    }
}

/// A request in progress on its connection, from its head until its response body ends.
#[derive(Debug)]
pub struct Busy(Arc<Progress>);

impl Drop for Busy {
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
    /// Closed by the header-read timeout.
    TimedOut {
        /// It cut a head under way or a connection that never sent one (not an idle
        /// keep-alive wait): a slow client, counted as `header_timeout`.
        counted: bool,
    },
}

/// Runs `conn` (a client connection's future) until it ends or the header-read `timeout`
/// closes it (by dropping it, which closes the socket), as the module describes; an HTTP/2
/// connection that has begun a stream is closed gracefully once none has been open for
/// `h2_idle` instead.
pub async fn watch<F: Future>(
    conn: F,
    progress: &Progress,
    timeout: Duration,
    h2_idle: Duration,
) -> Ended<F::Output> {
    // A quarter: closing happens between 1 and 1.25 timeouts after the last progress.
    let period = (timeout / 4).max(Duration::from_millis(1));
    let mut quiet_from = Instant::now();
    let mut seen = progress.snapshot();
    let sleep = tokio::time::sleep_until(quiet_from + period.min(timeout));
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
        let now = Instant::now();
        let (heads, active) = progress.snapshot();
        // An HTTP/2 connection that has begun a stream waits for its next one up to `h2_idle`.
        let h2_begun = heads > 0 && progress.h2.load(Relaxed);
        let limit = if h2_begun { h2_idle } else { timeout };
        if active > 0 || (heads, active) != seen {
            // Busy, or something happened since the last check (at most one period ago).
            quiet_from = now;
            seen = (heads, active);
        } else if now.saturating_duration_since(quiet_from) >= limit {
            if h2_begun {
                // Idle HTTP/2: closed gracefully rather than dropped, so that a stream the
                // client opens just now is served or cleanly refused (GOAWAY names the last
                // one taken), never lost with the socket.
                progress.close.notify_one();
                return Ended::Done(conn.await);
            }
            // Bytes since the last request ended are a head under way over HTTP/1.1; over
            // HTTP/2 they may be control frames only, so there only a connection that never
            // began a stream counts as slow.
            let partial = progress.read.load(Relaxed) && !progress.h2.load(Relaxed);
            return Ended::TimedOut {
                counted: heads == 0 || partial,
            };
        }
        sleep.as_mut().reset((now + period).min(quiet_from + limit));
    }
}

/// A client connection's stream, telling [`Progress`] when bytes arrive and whether the first
/// of them are HTTP/2's preface.
#[derive(Debug)]
pub struct Watched<S> {
    io: S,
    progress: Arc<Progress>,
    first: bool,
}

impl<S> Watched<S> {
    /// Wraps `io`, reporting to `progress`.
    pub fn new(io: S, progress: Arc<Progress>) -> Self {
        Watched {
            io,
            progress,
            first: true,
        }
    }
}

/// HTTP/2's connection preface starts so (RFC 9113 §3.4; the method PRI is reserved for it).
const H2_PREFACE_START: &[u8] = b"PRI * HTTP/2.0";

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let res = Pin::new(&mut this.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = res {
            let got = buf.filled().get(before..).unwrap_or_default();
            if !got.is_empty() {
                if this.first {
                    this.first = false;
                    if got.starts_with(H2_PREFACE_START) {
                        this.progress.h2.store(true, Relaxed);
                    }
                }
                this.progress.read.store(true, Relaxed);
            }
        }
        res
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
