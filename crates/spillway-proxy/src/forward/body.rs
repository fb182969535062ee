//! Bodies: the request body buffered for replay or streamed once, and the response body that
//! holds the admission permit, the task's in-flight count and its slot until it ends.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use spillway_core::controller::{Outcome, Permit};

use spillway_tower::metrics::RequestLabels;
use spillway_tower::wire;

use super::budget::{BodyBudget, BodyGrant};
use super::Unread;
use crate::http1::RawFields;
use crate::listener::head::Busy;
use crate::upstream::{BoxError, InSlot, Pool, UpstreamBody};

/// The request body: buffered (replayable on another task; its share of the buffer budget
/// held as long as it is) or streamed (sent once).
pub(super) enum ReqBody {
    // The grant is only held: dropped with the body, it gives its bytes back.
    Buffered(Bytes, #[allow(dead_code)] Option<BodyGrant>),
    Streamed(Option<Unread>),
}

/// Why a body meant for buffering could not be read.
pub(super) enum ReadError {
    /// The client did not finish sending it in time.
    Timeout,
    /// The stream failed or was longer than announced.
    Broken(String),
}

/// Buffers a body with a known length up to `limit` (within `timeout`: a slow upload must not
/// hold an admission permit forever) when `budget` has room for it; anything else is handed
/// back to be streamed. (A request with no body never gets here: `send::forward` answers that
/// case without building this future.)
pub(super) async fn read_body(
    body: Unread,
    limit: usize,
    budget: &Arc<BodyBudget>,
    timeout: std::time::Duration,
) -> Result<ReqBody, ReadError> {
    let hint = body.size_hint();
    let small = hint.exact().filter(|&n| n <= limit as u64);
    // Reserved before reading: the bytes are in memory as they arrive.
    let Some(grant) = small.and_then(|n| budget.take(n as usize)) else {
        return Ok(ReqBody::Streamed(Some(body)));
    };
    match tokio::time::timeout(timeout, http_body_util::Limited::new(body, limit).collect()).await {
        Ok(Ok(c)) => Ok(ReqBody::Buffered(c.to_bytes(), Some(grant))),
        Ok(Err(e)) => Err(ReadError::Broken(e.to_string())),
        Err(_) => Err(ReadError::Timeout),
    }
}

/// What a response body holds until it ends: the admission permit, the task's in-flight count
/// and its request slot.
pub(super) struct Guard {
    pub(super) permit: Permit,
    pub(super) labels: RequestLabels,
    pub(super) _inflight: InSlot,
    /// The request counts as in progress on its client connection (header-read timeout).
    pub(super) _busy: Option<Busy>,
    /// Tell the connection when the body waits on its upstream (not for gRPC streams, whose
    /// silences are the protocol's: `listener::head::Sent::new`).
    pub(super) report: bool,
    /// The last poll found nothing from the upstream (counted in the connection's progress).
    pub(super) waiting: bool,
    /// Where an ORCA report in the response's trailers goes: gRPC backends send theirs there
    /// (gRFC A51). Only for gRPC responses, the ones that end with trailers.
    pub(super) trailer_reports: Option<Arc<Pool>>,
}

impl Guard {
    /// Tells the client connection how the last poll of the upstream's body went.
    fn note<T>(&mut self, polled: &Poll<Option<T>>) {
        let (true, Some(busy)) = (self.report, &self._busy) else {
            return;
        };
        let progress = busy.progress();
        let waiting = polled.is_pending();
        if matches!(polled, Poll::Ready(Some(_))) {
            progress.upstream_came();
        }
        if waiting != self.waiting {
            self.waiting = waiting;
            progress.upstream_wait(waiting);
        }
    }
}

impl Guard {
    /// Reads an ORCA report among the response's trailers, in either form.
    fn read_trailer_reports(&self, trailers: &http::HeaderMap) {
        if let Some(pool) = &self.trailer_reports {
            let now = std::time::Instant::now();
            let text = wire::find(trailers, &wire::ENDPOINT_LOAD_METRICS);
            let bin = wire::find(trailers, &wire::ENDPOINT_LOAD_METRICS_BIN);
            pool.read_orca(self._inflight.task(), text, bin, now);
        }
    }
}

impl Drop for Guard {
    /// Admitted requests' latency, from admission to the end of the response body (refusals
    /// never reach here: they would make latency look good, AWS Builders' Library).
    fn drop(&mut self) {
        // One clock reading for the latency, a failure's charge and the permit's release.
        let now = std::time::Instant::now();
        if let (true, Some(busy)) = (self.waiting, &self._busy) {
            busy.progress().upstream_wait(false);
            if busy
                .progress()
                .upstream_stalled
                .load(std::sync::atomic::Ordering::Relaxed)
            {
                // Cut for its upstream's silence: a congestion signal, not a slow success, and
                // a failure of the task for balancing.
                self.permit.set_outcome(Outcome::Dropped);
                self._inflight.charge_failure(now);
            }
        }
        let latency = now.saturating_duration_since(self.permit.started_at());
        spillway_tower::metrics::latency(&self.labels, latency);
        // The controller's clock is the system's (`state.rs`).
        self.permit.release_at(now);
    }
}

/// What an upgraded (WebSocket-style) tunnel holds until both its directions close: the
/// admission permit, the task's in-flight count and its request slot. A tunnel occupies the
/// upstream (and one of its connections) for as long as it is open, so it counts toward the
/// concurrency limit and the task's slots like any request in flight.
///
/// Its outcome is [`Outcome::Ignore`] and no latency is recorded: a tunnel's lifetime is how
/// long the client chose to keep it, not how long the upstream took to serve, so it is not a
/// latency sample for the limit algorithm nor for the latency histogram.
pub(super) struct TunnelHold {
    _permit: Permit,
    _inflight: InSlot,
}

impl TunnelHold {
    pub(super) fn new(mut permit: Permit, inflight: InSlot) -> Self {
        permit.set_outcome(Outcome::Ignore);
        TunnelHold {
            _permit: permit,
            _inflight: inflight,
        }
    }
}

pin_project_lite::pin_project! {
    /// The upstream response body, releasing its [`Guard`] at the end of the stream (or when
    /// the client goes away and the body is dropped).
    pub struct Held {
        #[pin]
        pub(super) inner: UpstreamBody,
        pub(super) guard: Option<Guard>,
    }
}

impl Held {
    /// The response's header fields that pass through as bytes, if any
    /// ([`UpstreamBody::raw_fields`]).
    pub(crate) fn raw_fields(&self) -> Option<&RawFields> {
        self.inner.raw_fields()
    }

    /// Lets go of them once written ([`UpstreamBody::clear_raw_fields`]).
    pub(crate) fn clear_raw_fields(&mut self) {
        self.inner.clear_raw_fields();
    }
}

impl Body for Held {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        if let Some(g) = this.guard.as_mut() {
            g.note(&polled);
        }
        match polled {
            Poll::Ready(None) => {
                this.guard.take();
                Poll::Ready(None)
            }
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(trailers), Some(g)) = (frame.trailers_ref(), this.guard.as_ref()) {
                    g.read_trailer_reports(trailers);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                if let Some(mut g) = this.guard.take() {
                    g.permit.set_outcome(Outcome::Ignore);
                }
                Poll::Ready(Some(Err(e)))
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
