//! The admin listener's send timeout: a connection whose socket has refused every write for
//! `admin.send_timeout_ms` is dropped.
//!
//! Why: the admin port is what an operator reaches for in an incident, and it has a connection
//! cap (`admin.max_connections`). hyper's server has no write timeout, so a client that sends
//! requests and never reads the answers (pipelined, or one large answer) leaves its connection
//! blocked on a full socket for as long as the peer keeps it open; that many such clients would
//! hold every slot and lock the operator out. Progress is any write the socket takes, so a slow
//! but live reader is never cut (the rule of the data plane's `listen.send_timeout_ms` and of
//! nginx's `send_timeout`). Admin answers are whole in one frame, so the socket is the one
//! place a response can stall; this needs none of the data plane's per-request bookkeeping.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// Since when the connection's writes have found the socket full.
#[derive(Debug)]
pub(super) struct Blocked {
    origin: Instant,
    /// Milliseconds since `origin` when the first refused write of the current run came, plus
    /// one; 0 while the last write went through.
    since: AtomicU64,
}

impl Blocked {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Blocked {
            origin: Instant::now(),
            since: AtomicU64::new(0),
        })
    }

    fn note<T>(&self, res: &Poll<io::Result<T>>) {
        match res {
            Poll::Pending => {
                if self.since.load(Relaxed) == 0 {
                    let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
                    self.since.store(ms.saturating_add(1), Relaxed);
                }
            }
            Poll::Ready(_) => self.since.store(0, Relaxed),
        }
    }

    /// How long the writes have been refused at `now` (`None`: they are not).
    fn for_how_long(&self, now: Instant) -> Option<Duration> {
        match self.since.load(Relaxed) {
            0 => None,
            s => {
                let at = self.origin + Duration::from_millis(s - 1);
                Some(now.saturating_duration_since(at))
            }
        }
    }
}

/// Resolves once the writes have been refused for `limit` (checked every quarter of it, so
/// 1–1.25 × `limit` after the socket filled); never while they go through.
pub(super) async fn stalled(blocked: &Blocked, limit: Duration) {
    let period = (limit / 4).max(Duration::from_millis(1));
    loop {
        tokio::time::sleep(period).await;
        if blocked
            .for_how_long(Instant::now())
            .is_some_and(|d| d >= limit)
        {
            return;
        }
    }
}

/// An admin connection's socket, telling [`Blocked`] whether its writes go through.
#[derive(Debug)]
pub(super) struct Timed<S> {
    io: S,
    blocked: Arc<Blocked>,
}

impl<S> Timed<S> {
    pub(super) fn new(io: S, blocked: Arc<Blocked>) -> Self {
        Timed { io, blocked }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Timed<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Timed<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let res = Pin::new(&mut this.io).poll_write(cx, buf);
        this.blocked.note(&res);
        res
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let res = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.blocked.note(&res);
        res
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let res = Pin::new(&mut this.io).poll_flush(cx);
        this.blocked.note(&res);
        res
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_run_of_refused_writes_is_timed_from_its_first() {
        let b = Blocked::new();
        let t0 = Instant::now();
        assert_eq!(b.for_how_long(t0), None);
        b.note::<usize>(&Poll::Pending);
        tokio::time::advance(Duration::from_millis(300)).await;
        b.note::<usize>(&Poll::Pending);
        let d = b.for_how_long(Instant::now()).unwrap();
        assert!(d >= Duration::from_millis(299), "{d:?}");
        b.note::<usize>(&Poll::Ready(Ok(1)));
        assert_eq!(b.for_how_long(Instant::now()), None, "a write went through");
    }

    #[tokio::test(start_paused = true)]
    async fn stalled_resolves_only_after_the_limit() {
        let b = Blocked::new();
        let limit = Duration::from_secs(2);
        // Writes going through: never.
        assert!(
            tokio::time::timeout(Duration::from_secs(10), stalled(&b, limit))
                .await
                .is_err()
        );
        b.note::<usize>(&Poll::Pending);
        let t = Instant::now();
        stalled(&b, limit).await;
        let took = t.elapsed();
        assert!(took >= limit && took <= limit + limit / 4, "{took:?}");
    }
}
