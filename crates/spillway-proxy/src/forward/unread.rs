//! A client's request body that is read to its end or, if the proxy lets go of it early, read
//! and discarded behind the answer, within bounds.
//!
//! Why: a body dropped unread costs the client its connection and can cost it the answer
//! ([`spillway_tower::server::drain`] says how); a client that sees "connection reset" instead
//! of a 503 with `Retry-After` retries at once, the opposite of what a refusal asks under
//! overload. The proxy lets go of a body early in many places: a refusal, a bad header or a
//! static degraded answer before forwarding; a streamed upload when no task can take it (none
//! left, throttled, the pool full) or the connection to the task fails; an upstream that
//! answers, or breaks, before reading all of it (the upstream connection then drops what it
//! was sending). So the guard is the body itself, from the client's connection to the upstream
//! request: whoever drops it unfinished starts the drain
//! ([`spillway_tower::server::drain_behind`], bounded in bytes and time, as the server layer's
//! refusals are).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

/// A client's request body; dropped before its end, it reads the rest in a task of its own
/// if it came over HTTP/1.x (over HTTP/2 a dropped body resets only its own stream, after the
/// answer: reading it would only spend the proxy's time under overload).
#[derive(Debug)]
pub struct Unread {
    body: Option<Incoming>,
    drain: bool,
}

impl Unread {
    /// Guards `body`, which came over `version`.
    pub fn new(body: Incoming, version: http::Version) -> Self {
        Unread {
            body: Some(body),
            drain: version <= http::Version::HTTP_11,
        }
    }

    /// No body (a request that announced none).
    pub fn empty() -> Self {
        Unread {
            body: None,
            drain: false,
        }
    }
}

impl Body for Unread {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.body.as_mut() {
            Some(b) => Pin::new(b).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.as_ref().map_or(true, Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.body
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

impl Drop for Unread {
    fn drop(&mut self) {
        if let (Some(body), true) = (self.body.take(), self.drain) {
            spillway_tower::server::drain_behind(body);
        }
    }
}
