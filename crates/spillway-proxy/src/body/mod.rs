//! The body the proxy answers a client with ([`ResponseBody`]), as an enum of the bodies it really
//! carries: bytes it made itself (a refusal, an error, a degraded answer), or an upstream's
//! response holding the request's admission permit ([`GuardedResponseBody`]). The request
//! sent upstream has its own type below the upstream layer (`crate::request_body`), which
//! sends it, while this one needs the upstream layer (the task's slot, its pool).
//!
//! Why not a boxed trait object (`UnsyncBoxBody`, as before): boxing cost one allocation per
//! body, two per forwarded request (the request sent upstream and the response sent back;
//! heaptrack, BENCHMARKS.md), and a virtual call per frame, for a set of body types the proxy
//! knows in advance.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

mod guarded;

pub use guarded::GuardedResponseBody;
pub(crate) use guarded::{Guard, TunnelHold};

use crate::http1::RawFields;
use crate::upstream::BoxError;

/// A response body of the proxy.
pub struct ResponseBody(Kind);

impl std::fmt::Debug for ResponseBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.0 {
            Kind::Full(_) => "full",
            Kind::Upstream(_) => "upstream",
        };
        f.debug_tuple("ResponseBody").field(&kind).finish()
    }
}

// The upstream variant is the large one (it carries the admission permit); boxing it would
// bring back the allocation per response this type exists to remove.
#[allow(clippy::large_enum_variant)]
enum Kind {
    /// Bytes known in full (a refusal's text); `None` once sent.
    Full(Option<Bytes>),
    /// An upstream's response, holding the admission permit until it ends.
    Upstream(GuardedResponseBody),
}

/// An empty body.
pub fn empty_body() -> ResponseBody {
    ResponseBody(Kind::Full(None))
}

/// A body of `bytes`.
pub fn full_body(bytes: Bytes) -> ResponseBody {
    ResponseBody(Kind::Full((!bytes.is_empty()).then_some(bytes)))
}

impl ResponseBody {
    pub(crate) fn upstream(body: GuardedResponseBody) -> Self {
        ResponseBody(Kind::Upstream(body))
    }

    /// An upstream response's header fields that pass through as bytes to a client that
    /// writes bytes (`crate::http1::raw`), if it has any.
    pub(crate) fn raw_fields(&self) -> Option<&RawFields> {
        match &self.0 {
            Kind::Upstream(b) => b.raw_fields(),
            _ => None,
        }
    }

    /// Lets go of them once they are written.
    pub(crate) fn clear_raw_fields(&mut self) {
        if let Kind::Upstream(b) = &mut self.0 {
            b.clear_raw_fields();
        }
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match &mut self.get_mut().0 {
            Kind::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Kind::Upstream(b) => Pin::new(b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.0 {
            Kind::Full(b) => b.is_none(),
            Kind::Upstream(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.0 {
            Kind::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Kind::Upstream(b) => b.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn full_and_empty_bodies_announce_their_length() {
        let b = full_body(Bytes::from_static(b"hello"));
        assert_eq!(b.size_hint().exact(), Some(5));
        assert!(!b.is_end_stream());
        assert_eq!(b.collect().await.unwrap().to_bytes(), "hello");
        let e = empty_body();
        assert!(e.is_end_stream());
        assert_eq!(e.size_hint().exact(), Some(0));
        let z = full_body(Bytes::new());
        assert!(
            z.is_end_stream(),
            "no bytes: ended, like http-body-util's Full"
        );
    }
}
