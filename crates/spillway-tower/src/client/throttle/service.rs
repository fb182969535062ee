//! [`Throttle`]: the service the [`super::ThrottleLayer`] wraps around a client.

use std::sync::Arc;
use std::task::{Context, Poll};

use http::uri::Authority;
use http::{Request, Response};
use tower_service::Service;

use super::future::ResponseFuture;
use super::layer::Shared;
use super::Throttled;
use crate::client::BoxError;

/// Adaptive-throttling client middleware; built by [`super::ThrottleLayer`].
#[derive(Clone)]
pub struct Throttle<S> {
    pub(crate) inner: S,
    pub(crate) shared: Arc<Shared>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for Throttle<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Throttle")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

/// The destination a request goes to: the URI's authority, else a parseable `Host` header.
fn destination<B>(req: &Request<B>) -> Option<Authority> {
    if let Some(a) = req.uri().authority() {
        return Some(a.clone());
    }
    let host = req.headers().get(http::header::HOST)?;
    Authority::try_from(host.as_bytes()).ok()
}

impl<S, B, RB> Service<Request<B>> for Throttle<S>
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

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let dest = destination(&req);
        let entry = self.shared.lookup(dest.as_ref());
        let now = self.shared.clock.now();
        match entry.throttle.try_acquire(now) {
            Ok(()) => ResponseFuture::sent(self.inner.call(req), entry, self.shared.clock.clone()),
            Err(refusal) => {
                entry.throttled.increment(1);
                entry.probability.set(refusal.probability);
                ResponseFuture::refused(Throttled {
                    probability: refusal.probability,
                    destination: entry.destination.clone(),
                })
            }
        }
    }
}
