//! [`PropagateLayer`]: copies the request context onto outgoing requests.
//!
//! Why: criticality and deadlines only protect a system if every hop sees them (SRE book ch. 21:
//! criticality "is propagated automatically"; ch. 22 on deadline propagation). The server layer
//! puts the context of the request being served in a task-local ([`crate::context`]); this layer
//! writes it onto each request the handler sends — criticality, customer, and the *remaining*
//! time (the deadline minus the time already spent here) — so handler code does nothing.
//!
//! It also stops work nobody waits for: a call made after the deadline has passed fails at once
//! with [`DeadlineExceeded`] without being sent, and a call still running at the deadline is
//! abandoned with the same error. The attempt number is not written here: each outgoing call
//! has its own attempts, set by the retry layer ([`crate::wire::set_attempt`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use pin_project_lite::pin_project;
use spillway_core::clock::{Clock, SystemClock};
use tokio::time::Timeout;
use tower_layer::Layer;
use tower_service::Service;

use super::BoxError;
use crate::context;

/// The deadline of the request being served passed before the downstream call could finish, so
/// the call was not sent (or was abandoned): its answer could no longer be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadlineExceeded {
    /// True when the call was never sent (the deadline had already passed when it was made).
    pub before_send: bool,
}

impl std::fmt::Display for DeadlineExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.before_send {
            f.write_str(
                "downstream call not sent: the deadline of the request being served has passed",
            )
        } else {
            f.write_str(
                "downstream call abandoned: the deadline of the request being served passed",
            )
        }
    }
}

impl std::error::Error for DeadlineExceeded {}

/// Layer writing the task-local [`context::RequestContext`] onto outgoing requests.
#[derive(Clone)]
pub struct PropagateLayer {
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for PropagateLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PropagateLayer").finish_non_exhaustive()
    }
}

impl Default for PropagateLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl PropagateLayer {
    /// Uses the system clock, the one the server layer measures deadlines with.
    pub fn new() -> Self {
        Self {
            clock: Arc::new(SystemClock),
        }
    }

    /// Uses an injected clock to compute the remaining time (tests, simulation). The local
    /// timeout at the deadline still runs on tokio's timer.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self { clock }
    }
}

impl<S> Layer<S> for PropagateLayer {
    type Service = Propagate<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Propagate {
            inner,
            clock: self.clock.clone(),
        }
    }
}

/// Service built by [`PropagateLayer`].
#[derive(Clone)]
pub struct Propagate<S> {
    inner: S,
    clock: Arc<dyn Clock>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for Propagate<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Propagate")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, B, RB> Service<Request<B>> for Propagate<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Error: Into<BoxError>,
{
    type Response = Response<RB>;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let now = self.clock.now();
        // `call` runs synchronously in the handler's task, inside the server layer's scope.
        let deadline = context::with_current(|ctx| {
            ctx.write_request(&mut req, now);
            ctx.deadline
        })
        .flatten();
        let kind = match deadline {
            None => Kind::Plain {
                fut: self.inner.call(req),
            },
            Some(d) if d <= now => Kind::Expired { done: false },
            Some(d) => {
                // The context's deadline is on the (system) clock; tokio's timer wants its own
                // Instant: convert the remaining time, not the absolute instant.
                let at = tokio::time::Instant::now() + d.saturating_duration_since(now);
                Kind::Timed {
                    fut: tokio::time::timeout_at(at, self.inner.call(req)),
                }
            }
        };
        ResponseFuture { kind }
    }
}

pin_project! {
    /// Response future of [`Propagate`].
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F> {
        Plain { #[pin] fut: F },
        Timed { #[pin] fut: Timeout<F> },
        Expired { done: bool },
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("propagate::ResponseFuture")
            .finish_non_exhaustive()
    }
}

impl<F, T, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Plain { fut } => fut.poll(cx).map_err(Into::into),
            KindProj::Timed { fut } => match fut.poll(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(Ok(r)) => Poll::Ready(r.map_err(Into::into)),
                Poll::Ready(Err(_elapsed)) => {
                    Poll::Ready(Err(Box::new(DeadlineExceeded { before_send: false })))
                }
            },
            KindProj::Expired { done } => {
                *done = true;
                Poll::Ready(Err(Box::new(DeadlineExceeded { before_send: true })))
            }
        }
    }
}
