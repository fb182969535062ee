//! [`ResponseFuture`] of the throttle: records whether the backend accepted the request, and
//! settles it in the throttle when its outcome is known — or when the future is dropped
//! first (its caller gave up: no accept, as the SRE book counts a request that timed out).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use http::Response;
use pin_project_lite::pin_project;
use spillway_core::clock::Clock;

use super::layer::Entry;
use super::Throttled;
use crate::client::{classify, BoxError};

pin_project! {
    /// Response future of [`super::Throttle`].
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F> {
        Sent {
            #[pin]
            fut: F,
            entry: Outstanding,
            clock: Arc<dyn Clock>,
        },
        Refused {
            refusal: Option<Throttled>,
        },
    }
}

impl<F> ResponseFuture<F> {
    /// `fut` sends a request `entry`'s throttle let through (outstanding there).
    pub(crate) fn sent(fut: F, entry: Arc<Entry>, clock: Arc<dyn Clock>) -> Self {
        Self {
            kind: Kind::Sent {
                fut,
                entry: Outstanding(Some(entry)),
                clock,
            },
        }
    }

    pub(crate) fn refused(refusal: Throttled) -> Self {
        Self {
            kind: Kind::Refused {
                refusal: Some(refusal),
            },
        }
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("throttle::ResponseFuture")
            .finish_non_exhaustive()
    }
}

impl<F, RB, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<RB>, E>>,
    E: Into<BoxError>,
{
    type Output = Result<Response<RB>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Refused { refusal } => Poll::Ready(Err(match refusal.take() {
                Some(r) => Box::new(r),
                // Polled again after completion: report the refusal rather than panic.
                None => Box::new(Throttled {
                    probability: 0.0,
                    destination: None,
                }),
            })),
            KindProj::Sent { fut, entry, clock } => {
                let result = ready!(fut.poll(cx));
                let now = clock.now();
                // Accepts = requests the backend took and processed (SRE book ch. 21). An
                // overload refusal is not one; neither is a transport error (it never got there).
                let accepted = match &result {
                    Ok(resp) => !classify::is_overload_refusal(resp),
                    Err(_) => false,
                };
                if let Some(entry) = entry.settle(accepted.then_some(now)) {
                    entry.probability.set(entry.throttle.probability(now));
                }
                Poll::Ready(result.map_err(Into::into))
            }
        }
    }
}

/// A request its entry's throttle let through, outstanding there until settled: once, when its
/// outcome is known or, failing that, when the future is dropped.
struct Outstanding(Option<Arc<Entry>>);

impl Outstanding {
    /// The outcome is known (accepted at `accepted`, if it was): recorded and settled. The
    /// entry, the first time; `None` if settled already (polled after completion).
    fn settle(&mut self, accepted: Option<std::time::Instant>) -> Option<Arc<Entry>> {
        let entry = self.0.take()?;
        if let Some(now) = accepted {
            entry.throttle.record_accept(now);
        }
        entry.throttle.settle();
        Some(entry)
    }
}

impl Drop for Outstanding {
    fn drop(&mut self) {
        self.settle(None);
    }
}
