//! The request body the retry layer sends: a buffered, replayable copy, or the original stream.
//!
//! Why: a request can only be sent again if its body can be produced again. Bodies up to a bound
//! (default 64 KiB) are read into memory once and replayed from a cheap `Bytes` clone on every
//! attempt; anything larger is forwarded as it streams and is simply not retried, so the layer
//! never holds an unbounded amount of memory per request.
//!
//! Bodies of unknown length are only buffered when the caller opts in
//! (`RetryLayer::buffer_unknown_length`): a bidirectional stream whose client waits for the
//! server before sending more would otherwise wait forever for its own body to end.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;

/// A complete request body held in memory so that it can be sent once per attempt.
#[derive(Debug, Clone, Default)]
pub(crate) struct Replay {
    data: Bytes,
    trailers: Option<HeaderMap>,
}

impl Replay {
    /// A fresh body for one more attempt (a reference-count bump, no copy).
    pub(crate) fn body<B>(&self) -> RetryBody<B> {
        RetryBody {
            kind: Kind::Replay {
                data: (!self.data.is_empty()).then(|| self.data.clone()),
                trailers: self.trailers.clone(),
            },
        }
    }
}

/// What [`prepare`] made of a request body.
pub(crate) enum Prepared<B> {
    /// Fully buffered: the request may be sent again.
    Replayable(Replay),
    /// Too large (or of unknown length without opt-in): sent once, as it streams.
    PassThrough(RetryBody<B>),
}

/// Body of the requests the retry layer sends downstream.
///
/// Its data type is `Bytes` whatever the caller's body used, so that a buffered copy and a
/// streamed original have one type.
pub struct RetryBody<B> {
    kind: Kind<B>,
}

enum Kind<B> {
    Replay {
        data: Option<Bytes>,
        trailers: Option<HeaderMap>,
    },
    // Boxed so that `RetryBody` is `Unpin` whatever `B` is; only pass-through bodies pay for it.
    Stream {
        prefix: VecDeque<Frame<Bytes>>,
        rest: Pin<Box<B>>,
    },
}

impl<B> std::fmt::Debug for RetryBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Replay { data, .. } => f
                .debug_struct("RetryBody::Replay")
                .field("len", &data.as_ref().map_or(0, Bytes::len))
                .finish(),
            Kind::Stream { prefix, .. } => f
                .debug_struct("RetryBody::Stream")
                .field("buffered_frames", &prefix.len())
                .finish(),
        }
    }
}

fn to_bytes<D: Buf>(frame: Frame<D>) -> Frame<Bytes> {
    frame.map_data(|mut d| d.copy_to_bytes(d.remaining()))
}

impl<B> Body for RetryBody<B>
where
    B: Body,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match &mut self.get_mut().kind {
            Kind::Replay { data, trailers } => {
                if let Some(d) = data.take() {
                    return Poll::Ready(Some(Ok(Frame::data(d))));
                }
                Poll::Ready(trailers.take().map(|t| Ok(Frame::trailers(t))))
            }
            Kind::Stream { prefix, rest } => {
                if let Some(frame) = prefix.pop_front() {
                    return Poll::Ready(Some(Ok(frame)));
                }
                rest.as_mut()
                    .poll_frame(cx)
                    .map(|f| f.map(|r| r.map(to_bytes)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Replay { data, trailers } => data.is_none() && trailers.is_none(),
            Kind::Stream { prefix, rest } => prefix.is_empty() && rest.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Replay { data, .. } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            Kind::Stream { prefix, rest } => {
                let buffered: u64 = prefix
                    .iter()
                    .filter_map(|f| f.data_ref().map(|d| d.len() as u64))
                    .sum();
                let inner = rest.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(inner.lower().saturating_add(buffered));
                if let Some(upper) = inner.upper() {
                    hint.set_upper(upper.saturating_add(buffered));
                }
                hint
            }
        }
    }
}

/// Reads `body` into memory if it is at most `limit` bytes (see the module docs for bodies of
/// unknown length); otherwise hands it on untouched, with whatever was already read in front.
pub(crate) async fn prepare<B>(
    body: B,
    limit: usize,
    buffer_unknown_length: bool,
) -> Result<Prepared<B>, B::Error>
where
    B: Body,
{
    let limit = limit as u64;
    let hint = body.size_hint();
    let pass = |rest: B| {
        Prepared::PassThrough(RetryBody {
            kind: Kind::Stream {
                prefix: VecDeque::new(),
                rest: Box::pin(rest),
            },
        })
    };
    if body.is_end_stream() {
        return Ok(Prepared::Replayable(Replay::default()));
    }
    let known_small = hint.upper().is_some_and(|u| u <= limit);
    if hint.lower() > limit || !(known_small || buffer_unknown_length) {
        return Ok(pass(body));
    }
    let mut rest = Box::pin(body);
    let mut frames: VecDeque<Frame<Bytes>> = VecDeque::new();
    let mut len: u64 = 0;
    while let Some(frame) = rest.frame().await {
        let frame = to_bytes(frame?);
        if let Some(d) = frame.data_ref() {
            len = len.saturating_add(d.len() as u64);
        }
        frames.push_back(frame);
        if len > limit {
            // Larger than it claimed (or of unknown length): forward what we read, then the rest.
            return Ok(Prepared::PassThrough(RetryBody {
                kind: Kind::Stream {
                    prefix: frames,
                    rest,
                },
            }));
        }
    }
    let mut data = BytesMut::with_capacity(len as usize);
    let mut trailers: Option<HeaderMap> = None;
    for frame in frames {
        match frame.into_data() {
            Ok(d) => data.extend_from_slice(&d),
            Err(frame) => {
                if let Ok(t) = frame.into_trailers() {
                    match &mut trailers {
                        Some(existing) => existing.extend(t),
                        None => trailers = Some(t),
                    }
                }
            }
        }
    }
    Ok(Prepared::Replayable(Replay {
        data: data.freeze(),
        trailers,
    }))
}
