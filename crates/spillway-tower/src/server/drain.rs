//! Reading a request body nobody needs, so that the connection survives the answer.
//!
//! Why: hyper closes an HTTP/1.1 connection whose request body is dropped unread (unless the
//! rest is already in its buffer), and closing a socket with data still unread makes the kernel
//! send a reset — which can destroy the answer in the client's receive buffer before the client
//! reads it (what nginx avoids with its "lingering close"). A refusal that reaches the client as
//! "connection reset" rather than a 503 with `Retry-After` invites an immediate retry. So a
//! refused HTTP/1.x request's body is read and discarded behind the answer ([`drain_behind`]:
//! the layer's refusals, and `spillway proxy`'s), within bounds, because a refusal must stay
//! cheap. (HTTP/2 needs none of this: a dropped body resets its own stream, after the answer.)

use std::time::Duration;

use bytes::Buf;
use http_body::Body;
use http_body_util::BodyExt;

/// The most of a refused request's body [`drain_behind`] reads before giving the connection up.
pub const DRAIN_LIMIT: usize = 1 << 20;

/// How long [`drain_behind`] reads a refused request's body before giving the connection up
/// (nginx's `lingering_timeout` default).
pub const DRAIN_WITHIN: Duration = Duration::from_secs(5);

/// Reads `body` to its end and discards it, stopping early (returning `false`) once more than
/// `limit` bytes have been read or the stream fails; `true` if it ended.
pub async fn drain<B>(mut body: B, limit: usize) -> bool
where
    B: Body + Unpin,
{
    let mut read = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { return false };
        read = read.saturating_add(frame.data_ref().map_or(0, Buf::remaining));
        if read > limit {
            return false;
        }
    }
    true
}

/// Reads the rest of a body that will not be used (a refused request's) in a task of its own,
/// up to [`DRAIN_LIMIT`] bytes within [`DRAIN_WITHIN`]; past either it is dropped and the
/// connection closes. Does nothing for a body already at its end (most GETs), and outside a
/// Tokio runtime, where the body is just dropped.
pub fn drain_behind<B>(body: B)
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Send,
{
    if body.is_end_stream() {
        return;
    }
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(async move {
            let _ = tokio::time::timeout(DRAIN_WITHIN, drain(Box::pin(body), DRAIN_LIMIT)).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use bytes::Bytes;
    use http_body::Frame;
    use http_body_util::Full;

    use super::*;

    /// One data frame, then an error (a connection reset mid-body).
    struct Broken(bool);

    impl Body for Broken {
        type Data = Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
            let sent = std::mem::replace(&mut self.0, true);
            Poll::Ready(Some(if sent {
                Err(std::io::Error::other("reset"))
            } else {
                Ok(Frame::data(Bytes::from_static(b"abc")))
            }))
        }
    }

    #[tokio::test]
    async fn reads_to_the_end_within_the_limit_and_stops_past_it() {
        assert!(drain(Full::new(Bytes::from(vec![0u8; 1000])), 1000).await);
        assert!(!drain(Full::new(Bytes::from(vec![0u8; 1001])), 1000).await);
        assert!(
            !drain(Broken(false), 1 << 20).await,
            "a failed stream is not an end"
        );
    }
}
