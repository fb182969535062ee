//! The request body the proxy sends upstream ([`RequestBody`]): bytes known in full, or the
//! client's body streamed — read to its end or, let go of early, read and discarded behind the
//! answer ([`UnreadRequestBody`]); on the proxy's own HTTP/1.1 fast path, filled by the
//! connection's task (`fast`).
//!
//! Why a module of its own, below `upstream`: the upstream connections send these bodies, while
//! the proxy's response bodies (`crate::body`) hold what only the layers above know (the
//! admission permit, the task's slot); kept together, the upstream layer imported the bodies
//! and the bodies the upstream layer. This one imports only the protocol layer (`http1`: the
//! body framing) and the connection's progress it reports to.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

pub(crate) mod fast;
mod unread;

pub(crate) use unread::BodyBreak;
pub use unread::UnreadRequestBody;

/// The error a body frame may fail with (the same as `upstream::BoxError`).
type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A request body as the proxy sends it upstream: bytes known in full (a buffered body, kept
/// for replay by the caller; none at all), or the client's body streamed as it arrives.
///
/// Why an enum and not a boxed trait object: as for the response bodies (`crate::body`), a box
/// would cost one allocation per forwarded request and a virtual call per frame, for two body
/// types known in advance.
#[derive(Debug)]
pub struct RequestBody(Kind);

#[derive(Debug)]
enum Kind {
    /// Bytes known in full; `None` once sent, or for no body.
    Full(Option<Bytes>),
    /// A client's request body streamed upstream as it arrives (read behind the answer if
    /// dropped before its end: [`UnreadRequestBody`]).
    Streamed(UnreadRequestBody),
}

impl RequestBody {
    /// No body.
    pub fn empty() -> Self {
        RequestBody(Kind::Full(None))
    }

    /// A body of `bytes` (none if empty, as for `http-body-util`'s `Full`).
    pub fn full(bytes: Bytes) -> Self {
        RequestBody(Kind::Full((!bytes.is_empty()).then_some(bytes)))
    }

    /// A client's request body, streamed.
    pub fn streamed(body: UnreadRequestBody) -> Self {
        RequestBody(Kind::Streamed(body))
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match &mut self.get_mut().0 {
            Kind::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Kind::Streamed(b) => Pin::new(b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.0 {
            Kind::Full(b) => b.is_none(),
            Kind::Streamed(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.0 {
            Kind::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Kind::Streamed(b) => b.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests;
