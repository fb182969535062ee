//! The upstream response body: it drives its HTTP/1.1 connection while the body streams and
//! puts the connection back on its thread's idle list when the body ends.
//!
//! Why the body and not a task: see `super::http1` — the request's own task drives an HTTP/1.1
//! connection, and after the response head the task polls the body, so the body is where the
//! connection's reads happen and where the exchange is known to be complete. An HTTP/2
//! connection keeps its own task (streams of many requests share it); its body only counts
//! the stream out when it ends.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::http1::{drive, put_back, with_noop, Home, Http1};
use super::Lease;

/// What a response body holds of its connection.
pub(super) enum Hold {
    /// Nothing (an upgrade's connection runs on its own task; or already released).
    Nothing,
    /// An HTTP/1.1 connection this body drives (`None` once it has ended) and where it goes
    /// back.
    Http1 {
        conn: Option<Http1>,
        home: Home,
        task: usize,
    },
    /// A stream on an HTTP/2 connection (counted out when dropped).
    Http2 { _stream: Lease },
}

/// An upstream response body; its end puts an HTTP/1.1 connection back on the idle list.
pub struct UpstreamBody {
    inner: Incoming,
    hold: Hold,
}

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamBody").finish_non_exhaustive()
    }
}

impl UpstreamBody {
    pub(super) fn new(inner: Incoming, hold: Hold) -> Self {
        UpstreamBody { inner, hold }
    }

    /// Ends the hold: a complete HTTP/1.1 exchange's connection goes back, anything else is
    /// dropped (a connection whose body was cut short is closed, never reused).
    fn release(&mut self, complete: bool) {
        if let Hold::Http1 {
            conn: Some(c),
            home,
            task,
        } = std::mem::replace(&mut self.hold, Hold::Nothing)
        {
            if complete {
                put_back(&home, task, c);
            }
        }
    }
}

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        // A server sending a body of known length stops polling after the last byte (hyper
        // checks `is_end_stream`), so the end is often seen only here.
        let ended = self.inner.is_end_stream();
        self.release(ended);
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let r = match &mut this.hold {
            Hold::Http1 { conn, .. } => {
                // What the connection has already delivered first; then the connection (see
                // `drive`: the task's waker only when it must wait). The body's only writer is
                // that connection.
                let inner = &mut this.inner;
                match with_noop(|n| Pin::new(&mut *inner).poll_frame(n)) {
                    Poll::Pending => drive(conn, cx, false, |_| {
                        with_noop(|n| Pin::new(&mut *inner).poll_frame(n))
                    }),
                    ready => ready,
                }
            }
            _ => Pin::new(&mut this.inner).poll_frame(cx),
        };
        match &r {
            Poll::Ready(None) => this.release(true),
            Poll::Ready(Some(Err(_))) => this.release(false),
            _ => {}
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
