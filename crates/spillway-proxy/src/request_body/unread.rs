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
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::fast::FastRequestBody;
use super::BoxError;
use crate::progress::Progress;

/// A client's request body; dropped before its end, it reads the rest in a task of its own
/// if it came over HTTP/1.x through hyper's server (over HTTP/2 a dropped body resets only its
/// own stream, after the answer: reading it would only spend the proxy's time under overload;
/// the HTTP/1.1 fast path's connection reads and discards the rest itself).
#[derive(Debug)]
pub struct UnreadRequestBody {
    body: Option<Inner>,
    drain: bool,
    broke: Option<BodyBreak>,
    /// The client connection's progress, told when the body waits on the client
    /// ([`UnreadRequestBody::reporting`]).
    progress: Option<Arc<Progress>>,
    /// The last poll found nothing from the client (counted in the connection's progress).
    waiting: bool,
}

/// Whether a streamed body failed while an upstream connection was reading it, and why.
///
/// Why: a body that breaks inside hyper's HTTP/2 client (cut short, invalid chunked coding)
/// comes back as a reset of the stream, which on its own reads like the upstream's fault; the
/// proxy must answer it as the client's (400 `bad_body`) and not mark a healthy task failing.
#[derive(Debug, Clone, Default)]
pub struct BodyBreak(Arc<OnceLock<String>>);

impl BodyBreak {
    /// The body's error, if it failed.
    pub fn get(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
    }
}

/// Boxed over hyper: `Incoming` is 40 bytes, and this travels (moved, copied) inside every
/// request's future, the fast path's included, whose body is one pointer.
#[derive(Debug)]
enum Inner {
    Hyper(Box<Incoming>),
    Fast(FastRequestBody),
}

impl UnreadRequestBody {
    /// Guards `body`, which came over `version`.
    pub fn new(body: Incoming, version: http::Version) -> Self {
        UnreadRequestBody {
            // A body that has already ended (no body, or an empty one) is not kept at all.
            body: (!body.is_end_stream()).then(|| Inner::Hyper(Box::new(body))),
            drain: version <= http::Version::HTTP_11,
            broke: None,
            progress: None,
            waiting: false,
        }
    }

    /// A body the HTTP/1.1 fast path's connection fills (and drains if it is let go of).
    pub fn fast(body: FastRequestBody) -> Self {
        UnreadRequestBody {
            body: Some(Inner::Fast(body)),
            drain: false,
            broke: None,
            progress: None,
            waiting: false,
        }
    }

    /// No body (a request that announced none).
    pub fn empty() -> Self {
        UnreadRequestBody {
            body: None,
            drain: false,
            broke: None,
            progress: None,
            waiting: false,
        }
    }

    /// This body, telling its connection's `progress` when it waits on the client and when
    /// bytes come, for the body read timeout (`progress::watch`). A body with nothing to
    /// read needs no reports.
    pub fn reporting(mut self, progress: &Arc<Progress>) -> Self {
        if self.body.is_some() {
            self.progress = Some(Arc::clone(progress));
        }
        self
    }

    fn stop_waiting(&mut self) {
        if let (true, Some(p)) = (self.waiting, &self.progress) {
            self.waiting = false;
            p.body_wait(false);
        }
    }

    /// From now on, the body's first error is kept where the returned handle can read it.
    pub fn watch(&mut self) -> BodyBreak {
        self.broke.get_or_insert_with(BodyBreak::default).clone()
    }
}

impl Body for UnreadRequestBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.as_mut().get_mut();
        let polled: Poll<Option<Result<Frame<Bytes>, BoxError>>> = match this.body.as_mut() {
            Some(Inner::Hyper(b)) => Pin::new(&mut **b).poll_frame(cx).map_err(Into::into),
            Some(Inner::Fast(b)) => Pin::new(b).poll_frame(cx).map_err(Into::into),
            None => Poll::Ready(None),
        };
        if let (Poll::Ready(Some(Err(e))), Some(broke)) = (&polled, &this.broke) {
            let _ = broke.0.set(e.to_string());
        }
        if let Some(p) = &this.progress {
            match &polled {
                Poll::Pending if !this.waiting => {
                    this.waiting = true;
                    p.body_wait(true);
                }
                Poll::Pending => {}
                Poll::Ready(frame) => {
                    if matches!(frame, Some(Ok(_))) {
                        p.body_came();
                    }
                    this.stop_waiting();
                }
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match &self.body {
            Some(Inner::Hyper(b)) => b.is_end_stream(),
            Some(Inner::Fast(b)) => b.is_end_stream(),
            None => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.body {
            Some(Inner::Hyper(b)) => b.size_hint(),
            Some(Inner::Fast(b)) => b.size_hint(),
            None => SizeHint::with_exact(0),
        }
    }
}

impl Drop for UnreadRequestBody {
    fn drop(&mut self) {
        self.stop_waiting();
        if let (Some(Inner::Hyper(body)), true) = (self.body.take(), self.drain) {
            spillway_tower::server::drain_behind(*body);
        }
    }
}
