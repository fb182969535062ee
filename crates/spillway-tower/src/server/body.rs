//! The response body that holds the admission permit until the body has finished.
//!
//! Why: tower's `ConcurrencyLimit` releases its permit when the *response future* resolves, i.e.
//! when the headers are ready. For a streamed or long body the work continues after that, so the
//! limiter would under-count in-flight work exactly for the most expensive requests. Here the
//! permit lives in the body and is released on end-of-stream, on a body error, or when the body
//! is dropped early (the client went away) — each with the outcome the limit should learn.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use spillway_core::controller::{AdmissionController, NoAnswer, Outcome, Permit};

use super::cpu::CpuMeter;
use crate::metrics::{self, RequestLabels};
use crate::wire;

/// The permit of one admitted request and what is needed to close its books.
#[derive(Debug)]
pub(crate) struct Guard {
    permit: Option<Permit>,
    controller: AdmissionController,
    labels: RequestLabels,
    admitted_at: Instant,
    pub(crate) cpu: CpuMeter,
    /// The inner service answered with an overload/server failure: a congestion signal.
    pub(crate) failed: bool,
    /// The handler has answered (the response head exists): a drop after this is a caller
    /// leaving a body, which says nothing about the service's latency.
    pub(crate) answered: bool,
    record_metrics: bool,
}

impl Guard {
    pub(crate) fn new(
        permit: Permit,
        controller: AdmissionController,
        labels: RequestLabels,
        admitted_at: Instant,
        measure_cpu: bool,
        record_metrics: bool,
    ) -> Self {
        Guard {
            permit: Some(permit),
            controller,
            labels,
            admitted_at,
            cpu: CpuMeter::new(measure_cpu),
            failed: false,
            answered: false,
            record_metrics,
        }
    }

    pub(crate) fn queue_time(&self) -> std::time::Duration {
        self.permit
            .as_ref()
            .map_or(std::time::Duration::ZERO, Permit::queue_time)
    }

    pub(crate) fn admitted_at(&self) -> Instant {
        self.admitted_at
    }

    /// Closes the books: outcome, actual cost (measured CPU-seconds, if measuring), latency
    /// histogram (completed requests only), then releases the slot by dropping the permit.
    pub(crate) fn finish(&mut self, outcome: Outcome) {
        let Some(mut permit) = self.permit.take() else {
            return;
        };
        let outcome = if self.failed && outcome == Outcome::Success {
            Outcome::Dropped
        } else {
            outcome
        };
        if self.cpu.enabled() {
            permit.set_actual_cost(self.cpu.spent().as_secs_f64());
        }
        permit.set_outcome(outcome);
        if self.record_metrics && outcome != Outcome::Ignore {
            let now = self.controller.now();
            metrics::latency(
                &self.labels,
                now.saturating_duration_since(self.admitted_at),
            );
        }
        drop(permit);
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        // Dropped before the body finished: the client went away (or the server shut down).
        // Before the handler answered, that is the proxy's `CallerGone` (a lower bound on the
        // latency, never a failure); after, the body's pace is the client's.
        let outcome = if self.answered {
            Outcome::Ignore
        } else {
            NoAnswer::CallerGone.outcome()
        };
        self.finish(outcome);
    }
}

pin_project_lite::pin_project! {
    /// Response body of [`Spillway`](super::Spillway): the inner body carrying the request's
    /// permit (released when it ends, fails or is dropped), or a small body produced by the
    /// layer itself (rejections, 400s).
    pub struct SpillwayBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project_lite::pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Served {
            #[pin]
            inner: B,
            guard: Option<Guard>,
        },
        Local {
            data: Option<Bytes>,
        },
    }
}

impl<B: std::fmt::Debug> std::fmt::Debug for SpillwayBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Served { inner, guard } => f
                .debug_struct("Served")
                .field("inner", inner)
                .field(
                    "holds_permit",
                    &guard.as_ref().is_some_and(|g| g.permit.is_some()),
                )
                .finish(),
            Kind::Local { data } => f.debug_struct("Local").field("data", data).finish(),
        }
    }
}

impl<B> SpillwayBody<B> {
    pub(crate) fn local(data: Bytes) -> Self {
        SpillwayBody {
            kind: Kind::Local {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }

    pub(crate) fn empty() -> Self {
        SpillwayBody {
            kind: Kind::Local { data: None },
        }
    }

    /// Whether this body still holds an admission permit (the request counts as in flight).
    pub fn holds_permit(&self) -> bool {
        match &self.kind {
            Kind::Served { guard, .. } => guard.as_ref().is_some_and(|g| g.permit.is_some()),
            Kind::Local { .. } => false,
        }
    }
}

impl<B: Body> SpillwayBody<B> {
    /// Wraps a served body; an already-finished body (e.g. empty) releases the permit now, as
    /// servers may never poll it.
    pub(crate) fn served(inner: B, mut guard: Guard) -> Self {
        if inner.is_end_stream() {
            guard.finish(Outcome::Success);
            return SpillwayBody {
                kind: Kind::Served { inner, guard: None },
            };
        }
        SpillwayBody {
            kind: Kind::Served {
                inner,
                guard: Some(guard),
            },
        }
    }
}

impl<B> Body for SpillwayBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Local { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            KindProj::Served { mut inner, guard } => {
                let polled = match guard.as_mut() {
                    // Streaming the body is part of the request's CPU cost.
                    Some(g) => g.cpu.measure(|| inner.as_mut().poll_frame(cx)),
                    None => inner.as_mut().poll_frame(cx),
                };
                let Some(g) = guard.as_mut() else {
                    return polled;
                };
                match &polled {
                    Poll::Pending => {}
                    Poll::Ready(None) => g.finish(Outcome::Success),
                    Poll::Ready(Some(Err(_))) => g.finish(Outcome::Dropped),
                    Poll::Ready(Some(Ok(frame))) => {
                        if let Some(trailers) = frame.trailers_ref() {
                            if matches!(
                                wire::grpc_status(trailers),
                                Some(wire::GRPC_UNAVAILABLE | wire::GRPC_RESOURCE_EXHAUSTED)
                            ) {
                                g.failed = true;
                            }
                        }
                        if inner.is_end_stream() {
                            g.finish(Outcome::Success);
                        }
                    }
                }
                polled
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Served { inner, .. } => inner.is_end_stream(),
            Kind::Local { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Served { inner, .. } => inner.size_hint(),
            Kind::Local { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}
