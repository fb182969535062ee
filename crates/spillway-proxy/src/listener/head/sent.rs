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
    progress: Arc<Progress>,
    /// The last poll handed over a data frame (counted in `Progress::holding`).
    holding: bool,
}

impl Sent {
    /// `inner`, reporting to `progress`.
    pub fn new(inner: ProxyBody, progress: Arc<Progress>) -> Self {
        Sent {
            inner,
            progress,
            holding: false,
        }
    }

    fn release(&mut self) {
        if self.holding {
            self.holding = false;
            self.progress.holding.fetch_sub(1, Relaxed);
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
        this.progress.polled.fetch_add(1, Relaxed);
        this.release();
        let res = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &res {
            if frame.is_data() {
                this.holding = true;
                this.progress.holding.fetch_add(1, Relaxed);
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
