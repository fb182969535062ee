//! The upstream's response body as the client receives it: it holds the request's admission
//! permit, the task's in-flight count and its slot until its last byte (or until the client
//! goes away), and then reports the latency and releases them; and what a tunnel holds.
//!
//! Why the permit rides in the body: the request is not over when the response head arrives.
//! Releasing at the head would count a long download as a short request and free the
//! concurrency slot while the upstream still works.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use spillway_core::controller::{Outcome, Permit};

use spillway_tower::metrics::RequestLabels;
use spillway_tower::wire;

use crate::http1::RawFields;
use crate::progress::ActiveRequest;
use crate::upstream::{BoxError, InSlot, Pool, UpstreamBody};

/// What a response body holds until it ends: the admission permit, the task's in-flight count
/// and its request slot.
pub(crate) struct Guard {
    pub(crate) permit: Permit,
    pub(crate) labels: RequestLabels,
    pub(crate) _inflight: InSlot,
    /// The request counts as in progress on its client connection (header-read timeout).
    pub(crate) _busy: Option<ActiveRequest>,
    /// Tell the connection when the body waits on its upstream (not for gRPC streams, whose
    /// silences are the protocol's: `progress::ReportingResponseBody::new`).
    pub(crate) report: bool,
    /// The last poll found nothing from the upstream (counted in the connection's progress).
    pub(crate) waiting: bool,
    /// Where an ORCA report in the response's trailers goes: gRPC backends send theirs there
    /// (gRFC A51). Only for gRPC responses, the ones that end with trailers.
    pub(crate) trailer_reports: Option<Arc<Pool>>,
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
pub(crate) struct TunnelHold {
    _permit: Permit,
    _inflight: InSlot,
}

impl TunnelHold {
    pub(crate) fn new(mut permit: Permit, inflight: InSlot) -> Self {
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
    pub struct GuardedResponseBody {
        #[pin]
        pub(crate) inner: UpstreamBody,
        pub(crate) guard: Option<Guard>,
    }
}

impl GuardedResponseBody {
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

impl Body for GuardedResponseBody {
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
