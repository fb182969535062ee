//! A response body served through hyper, telling its connection's [`Progress`] whether hyper
//! is holding data from it without asking for more.
//!
//! Why: over HTTP/2 a client can stall a response without filling the socket — it keeps
//! reading but grants no flow-control credit, so hyper waits for credit, writes nothing and
//! stops polling the body, and the upstream connection and admission slot behind it wait too.
//! The socket rule of the send timeout ([`watch`](super::watch)) cannot see that; this can: a
//! body whose last poll handed over data, with no body on the connection polled and nothing
//! written since, is a response the client is not taking. A body whose last poll found nothing
//! (a long poll, a quiet stream) is waiting on its upstream, not on the client, and counts as
//! nothing.

use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::Progress;
use crate::upstream::ProxyBody;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A response body that reports to its connection's [`Progress`] (see the module docs).
#[derive(Debug)]
pub struct Sent {
    inner: ProxyBody,
    /// `None` for a body that does not report (a gRPC stream's, see [`Sent::new`]).
    progress: Option<Arc<Progress>>,
    /// The last poll handed over a data frame (counted in `Progress::holding`).
    holding: bool,
}

impl Sent {
    /// `inner`, reporting to `progress` when given. gRPC responses do not report: a stream
    /// whose consumer pauses is back-pressure gRPC is built on, and its call is bounded by
    /// its deadline (`grpc-timeout`) and the admission limit instead.
    pub fn new(inner: ProxyBody, progress: Option<Arc<Progress>>) -> Self {
        Sent {
            inner,
            progress,
            holding: false,
        }
    }

    fn release(&mut self) {
        if let (true, Some(p)) = (self.holding, &self.progress) {
            self.holding = false;
            p.holding.fetch_sub(1, Relaxed);
        }
    }
}

impl Body for Sent {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let res = Pin::new(&mut this.inner).poll_frame(cx);
        let Some(p) = &this.progress else {
            return res;
        };
        p.polled.fetch_add(1, Relaxed);
        let data = matches!(&res, Poll::Ready(Some(Ok(frame))) if frame.is_data());
        if data != this.holding {
            this.holding = data;
            if data {
                p.holding.fetch_add(1, Relaxed);
            } else {
                p.holding.fetch_sub(1, Relaxed);
            }
        }
        res
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Sent {
    fn drop(&mut self) {
        self.release();
    }
}
