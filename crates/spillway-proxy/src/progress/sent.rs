//! A response body served through hyper, telling its connection's [`Progress`] whether hyper
//! is holding data from it without asking for more — and, over HTTP/2, letting the
//! connection's timer cut that one response.
//!
//! Why: over HTTP/2 a client can stall a response without filling the socket — it keeps
//! reading but grants no flow-control credit, so hyper waits for credit, writes nothing and
//! stops polling the body, and the upstream connection and admission slot behind it wait too.
//! The socket rule of the send timeout ([`watch`](super::watch)) cannot see that; this can: a
//! body whose last poll handed over data, with no body on the connection polled and nothing
//! written since, is a response the client is not taking. A body whose last poll found nothing
//! (a long poll, a quiet stream) is waiting on its upstream, not on the client, and counts as
//! nothing.
//!
//! Why one response alone: a client can also stall some streams while others on the same
//! connection keep moving (credit granted to one stream only), and then the connection is never
//! quiet: one connection could hold as many admission slots as it may open streams. An HTTP/2
//! body is therefore shared with the connection's timer ([`Shared`]), which drops the inner
//! body of one whose last poll handed over data and that has not been polled since, through
//! the whole send timeout, at checks that all found the socket taking writes (behind a full
//! socket a body is polled at the reader's pace, which is not a stall). A stream the client
//! grants credit at least once per send timeout is polled at least that often, so it is not
//! cut however slow: the rule of nginx's `send_timeout`, per stream.
//! A cut response's admission slot and upstream connection are freed, it is counted as
//! `send_timeout`, and its stream ends in a reset if hyper ever polls it again. What the stream keeps — a token that
//! the connection has a response in progress, and its count as held data — keeps the
//! connection under the send timeout itself, so a connection left with only such streams is
//! cut when it goes quiet instead of idling in a graceful close that would wait for them.
//!
//! Why generic over the body inside: the body is the proxy's response body (`body::ResponseBody`),
//! which holds the request's admission permit and so lives above this module; the timer reaches
//! the shared bodies through [`Cut`]. The listener uses one instance, the same code as before.

use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::Instant;

use super::{ActiveRequest, Progress, Stall};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A response body that reports to its connection's [`Progress`] (see the module docs).
#[derive(Debug)]
pub struct ReportingResponseBody<B> {
    inner: Inner<B>,
    /// `None` for a body that does not report (a gRPC stream's, see [`ReportingResponseBody::new`]).
    progress: Option<Arc<Progress>>,
    /// The last poll handed over a data frame (counted in `Progress::holding`; for a shared
    /// body, its state's `holding` is the one used).
    holding: bool,
}

// Not boxed: the inline body is the HTTP/1.1 (and gRPC) case, where a box would be one more
// allocation per response; the shared one is allocated anyway.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Inner<B> {
    Own(B),
    Shared(Arc<Shared<B>>),
}

/// An HTTP/2 response body the connection's timer can cut (see the module docs).
#[derive(Debug)]
struct Shared<B>(Mutex<SharedState<B>>);

#[derive(Debug)]
struct SharedState<B> {
    /// `None` once cut.
    body: Option<B>,
    /// The last poll handed over a data frame (counted in `Progress::holding`).
    holding: bool,
    polls: u64,
    /// The timer's view: polls unchanged while holding, since when.
    stall: Stall<u64>,
    /// After a cut: the response still counts as in progress on its connection.
    busy: Option<ActiveRequest>,
    progress: Arc<Progress>,
}

impl<B> Shared<B> {
    fn lock(&self) -> MutexGuard<'_, SharedState<B>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// An HTTP/2 response body the connection's timer may cut ([`Progress`] keeps a weak reference
/// to each, whatever body it holds).
pub(super) trait Cut: Send + Sync {
    /// Drops the body if it has held data, with no poll and the connection's socket taking
    /// writes (`socket_free`) at every check, for `limit` at `now`; whether it did.
    fn cut_if_stalled(&self, now: Instant, limit: Duration, socket_free: bool) -> bool;
}

impl<B: Send> Cut for Shared<B> {
    fn cut_if_stalled(&self, now: Instant, limit: Duration, socket_free: bool) -> bool {
        let mut st = self.lock();
        let (polls, waiting) = (st.polls, st.holding && socket_free);
        if st.body.is_none() || !st.stall.stalled(now, polls, waiting, limit) {
            return false;
        }
        st.busy = Some(st.progress.hold());
        let body = st.body.take();
        drop(st);
        // Dropped outside the lock: the body's guard releases the admission slot and the
        // upstream connection.
        drop(body);
        true
    }
}

/// Why a cut response ends: read by whoever sees the stream's reset.
const CUT: &str = "the client took none of this response for listen.send_timeout_ms (no HTTP/2 \
                   flow-control credit): cut";

impl<B: Send + 'static> ReportingResponseBody<B> {
    /// `inner`, reporting to `progress` when given. gRPC responses do not report: a stream
    /// whose consumer pauses is back-pressure gRPC is built on, and its call is bounded by
    /// its deadline (`grpc-timeout`) and the admission limit instead. Over HTTP/2 the body is
    /// shared with the connection's timer, which may cut it alone.
    pub fn new(inner: B, progress: Option<Arc<Progress>>) -> Self {
        let inner = match &progress {
            Some(p) if p.h2.load(Relaxed) => {
                let shared = Arc::new(Shared(Mutex::new(SharedState {
                    body: Some(inner),
                    holding: false,
                    polls: 0,
                    stall: Stall::new(0),
                    busy: None,
                    progress: Arc::clone(p),
                })));
                // The weak reference is taken at this type and unsized to `dyn Cut`.
                let weak: std::sync::Weak<Shared<B>> = Arc::downgrade(&shared);
                p.register(weak);
                Inner::Shared(shared)
            }
            _ => Inner::Own(inner),
        };
        ReportingResponseBody {
            inner,
            progress,
            holding: false,
        }
    }
}

impl<B> ReportingResponseBody<B> {
    fn release(&mut self) {
        let Some(p) = &self.progress else {
            return;
        };
        let held = match &self.inner {
            Inner::Own(_) => std::mem::take(&mut self.holding),
            Inner::Shared(s) => std::mem::take(&mut s.lock().holding),
        };
        if held {
            p.holding.fetch_sub(1, Relaxed);
        }
    }
}

/// Notes a poll's result in `progress`: `holding` becomes whether it handed over data.
fn note(
    progress: &Progress,
    holding: &mut bool,
    res: &Poll<Option<Result<Frame<Bytes>, BoxError>>>,
) {
    progress.polled.fetch_add(1, Relaxed);
    let data = matches!(res, Poll::Ready(Some(Ok(frame))) if frame.is_data());
    if data != *holding {
        *holding = data;
        if data {
            progress.holding.fetch_add(1, Relaxed);
        } else {
            progress.holding.fetch_sub(1, Relaxed);
        }
    }
}

impl<B> Body for ReportingResponseBody<B>
where
    B: Body<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        match &mut this.inner {
            Inner::Own(body) => {
                let res = Pin::new(body).poll_frame(cx);
                if let Some(p) = &this.progress {
                    note(p, &mut this.holding, &res);
                }
                res
            }
            Inner::Shared(s) => {
                let mut st = s.lock();
                let st = &mut *st;
                let Some(body) = st.body.as_mut() else {
                    return Poll::Ready(Some(Err(CUT.into())));
                };
                let res = Pin::new(body).poll_frame(cx);
                st.polls += 1;
                note(&st.progress, &mut st.holding, &res);
                res
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::Own(b) => b.is_end_stream(),
            // A cut body has not ended: its stream must end in a reset, not look complete.
            Inner::Shared(s) => s.lock().body.as_ref().is_some_and(|b| b.is_end_stream()),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::Own(b) => b.size_hint(),
            Inner::Shared(s) => s
                .lock()
                .body
                .as_ref()
                .map_or_else(SizeHint::default, |b| b.size_hint()),
        }
    }
}

impl<B> Drop for ReportingResponseBody<B> {
    fn drop(&mut self) {
        self.release();
    }
}
