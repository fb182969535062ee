//! HTTP/2 upstream connections (prior knowledge, or `h2` by ALPN): one multiplexed connection
//! per task and thread, made by hyper's connection API and driven by a task of its own.
//!
//! Why apart from the HTTP/1.1 path: an HTTP/2 connection carries many requests at once, so
//! it is not checked out and put back like an HTTP/1.1 one; it stays in its thread's slot
//! while open, each request's stream is counted from its send until its response body ends
//! ([`Lease`]), and its driver closes it once it has had no stream for the idle timeout.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

use super::idle::lock;
use super::{Connections, UpstreamError};
use crate::request_body::RequestBody;

/// Use of one HTTP/2 connection: open streams and since when it has had none.
#[derive(Debug, Default)]
pub(super) struct ConnState {
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

/// This thread's HTTP/2 connection to one task: a sender for requests and the state its
/// streams share.
pub(super) struct Multiplexed {
    tx: http2::SendRequest<RequestBody>,
    state: Arc<ConnState>,
}

impl Connections {
    /// This thread's open HTTP/2 connection to `task`, if any (a closed one is forgotten): a
    /// sender for the request and the state its streams share.
    fn open_http2(&self, task: usize) -> Option<(http2::SendRequest<RequestBody>, Arc<ConnState>)> {
        let mut l = lock(self.home());
        l.http2.get_mut(task).and_then(|slot| {
            if slot.as_ref().is_some_and(|m| m.tx.is_closed()) {
                *slot = None;
            }
            slot.as_ref().map(|m| (m.tx.clone(), Arc::clone(&m.state)))
        })
    }

    /// A sender on this thread's HTTP/2 connection to `task`, its shared state, and whether the
    /// connection carried requests before (a request it refuses unsent may go again); a new
    /// connection is made, and kept in the thread's slot, when there is none open.
    pub(super) async fn http2_sender(
        &self,
        task: usize,
    ) -> Result<(http2::SendRequest<RequestBody>, Arc<ConnState>, bool), UpstreamError> {
        if let Some((tx, state)) = self.open_http2(task) {
            return Ok((tx, state, true));
        }
        // Boxed: the connect path (resolve, connect, handshake) runs once per connection,
        // while the request's future is built, moved and polled per request.
        let m = Box::pin(self.connect_http2(task)).await?;
        let out = (m.tx.clone(), Arc::clone(&m.state), false);
        if let Some(slot) = lock(self.home()).http2.get_mut(task) {
            *slot = Some(m);
        }
        Ok(out)
    }

    async fn connect_http2(&self, task: usize) -> Result<Multiplexed, UpstreamError> {
        let io = TokioIo::new(self.open(task, true).await?);
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
}

/// Runs an HTTP/2 connection until it ends or has been idle for `idle` (then dropping it
/// closes it; a sender still in the slot sees it closed and is replaced at the next request).
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

/// One request's stream on an HTTP/2 connection, counted from here until its response body
/// ends or is dropped (entering and leaving in one type, so they always pair).
pub(super) struct Lease {
    home: Arc<Connections>,
    state: Arc<ConnState>,
}

impl Lease {
    pub(super) fn enter(home: &Arc<Connections>, state: Arc<ConnState>) -> Self {
        state.enter();
        Lease {
            home: Arc::clone(home),
            state,
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.state.leave(self.home.now_ms());
    }
}
