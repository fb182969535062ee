//! [`Spillway`]: the service produced by [`SpillwayLayer`](super::SpillwayLayer).

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use http_body::Body;
use tower_service::Service;

use super::body::SpillwayBody;
use super::future::ResponseFuture;
use super::layer::Shared;

/// A tower service wrapped with Spillway's admission control.
///
/// The error type is the inner service's: refusals are *responses* (429/503/gRPC status), so
/// the layer fits axum's `Router::layer` (which needs `Infallible`) and tonic's server.
#[derive(Clone)]
pub struct Spillway<S> {
    pub(crate) inner: S,
    pub(crate) shared: Arc<Shared>,
}

impl<S: fmt::Debug> fmt::Debug for Spillway<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Spillway")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S> Spillway<S> {
    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for Spillway<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone,
    S::Error: 'static,
    // A refused request's body is read behind the answer, in a task of its own
    // (`server::drain_behind`): every server's body type (hyper's `Incoming`, axum's and
    // tonic's `Body`) is one.
    ReqB: Body + Send + 'static,
    ReqB::Data: Send,
    ReqB::Error: Send,
    ResB: Body<Data = bytes::Bytes>,
{
    type Response = Response<SpillwayBody<ResB>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqB, ResB>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        // The readied service goes with the request (it may have to wait in the admission
        // queue); a clone takes its place here, as tower's own middleware does.
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::start(Arc::clone(&self.shared), ready, req)
    }
}
