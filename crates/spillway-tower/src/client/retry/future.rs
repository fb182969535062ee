//! [`ResponseFuture`] of the retry layer.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;

use crate::client::BoxError;

/// Response future of [`super::Retry`].
///
/// Boxed: the attempt loop awaits body buffering, readiness, responses and backoff sleeps in
/// turn, and one allocation per call is negligible next to the network round trip it wraps.
pub struct ResponseFuture<RB> {
    pub(crate) inner: Pin<Box<dyn Future<Output = Result<Response<RB>, BoxError>> + Send>>,
}

impl<RB> std::fmt::Debug for ResponseFuture<RB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("retry::ResponseFuture")
            .finish_non_exhaustive()
    }
}

impl<RB> Future for ResponseFuture<RB> {
    type Output = Result<Response<RB>, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}
