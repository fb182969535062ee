//! The upstream response body: over HTTP/1.1 it reads and decodes its connection itself and puts
//! the connection back on its thread's idle list when the exchange is complete.
//!
//! Why the body and not a task: see `super::http1` — the request's own task drives an HTTP/1.1
//! connection, and after the response head the task polls the body, so the body is where the
//! connection's reads happen (and the rest of a request body the upstream answered before
//! reading, written) and where the exchange is known to be complete. An HTTP/2 connection keeps
//! its own task (streams of many requests share it), as does an upgraded one: their bodies are
//! hyper's, and an HTTP/2 body only counts its stream out when it ends.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::http1::{Http1, Sending};
use super::idle::{put_back, Home};
use super::Lease;
use crate::http1::client::WireError;
use crate::http1::{Decoded, Decoder, Framing, RawFields};
use crate::upstream::BoxError;

/// An upstream response body; its end puts an HTTP/1.1 connection back on the idle list.
pub struct UpstreamBody(Inner);

enum Inner {
    /// A body read from an HTTP/1.1 connection this body drives.
    Http1 {
        /// `None` once released (ended, failed or put back).
        conn: Option<Http1>,
        decoder: Decoder,
        /// The rest of the request, when the upstream answered before it was all sent.
        sending: Option<Box<Sending>>,
        keep_alive: bool,
        home: Home,
        task: usize,
    },
    /// hyper's body: an HTTP/2 stream (counted out when dropped) or an upgrade's response.
    Hyper {
        body: Incoming,
        _stream: Option<Lease>,
    },
}

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamBody").finish_non_exhaustive()
    }
}

impl UpstreamBody {
    pub(super) fn http1(
        conn: Http1,
        framing: Framing,
        keep_alive: bool,
        sending: Option<Box<Sending>>,
        home: Home,
        task: usize,
    ) -> Self {
        let mut b = UpstreamBody(Inner::Http1 {
            conn: Some(conn),
            decoder: Decoder::new(framing),
            sending,
            keep_alive,
            home,
            task,
        });
        if b.is_end_stream() {
            // Such a response keeps its fields in its map (`crate::http1::raw`): releasing the
            // connection here forgets the passed-through ones.
            debug_assert!(
                b.raw_fields().is_none(),
                "a bodiless response passed fields through"
            );
            // No body (a 204, a HEAD's answer): the exchange may be complete already.
            b.release(true);
        }
        b
    }

    /// The response's header fields that pass through as bytes (`crate::http1::raw`), if any: they
    /// are the client's to write with the head, before the body is read.
    pub(crate) fn raw_fields(&self) -> Option<&RawFields> {
        match &self.0 {
            Inner::Http1 { conn: Some(c), .. } => c.raw_fields(),
            _ => None,
        }
    }

    /// Lets go of the passed-through fields once written: the head's bytes go back to the
    /// connection's read buffer for the body instead of making it allocate anew.
    pub(crate) fn clear_raw_fields(&mut self) {
        if let Inner::Http1 { conn: Some(c), .. } = &mut self.0 {
            c.clear_raw_fields();
        }
    }

    pub(super) fn hyper(body: Incoming, stream: Option<Lease>) -> Self {
        UpstreamBody(Inner::Hyper {
            body,
            _stream: stream,
        })
    }

    /// Ends an HTTP/1.1 body's hold on its connection: back on the idle list when the exchange
    /// is complete (the response read to its end, the request written whole) and the
    /// connection may carry another, else dropped, which closes it.
    fn release(&mut self, complete: bool) {
        if let Inner::Http1 {
            conn,
            decoder,
            sending,
            keep_alive,
            home,
            task,
        } = &mut self.0
        {
            if let Some(mut c) = conn.take() {
                c.clear_raw_fields();
                if complete
                    && *keep_alive
                    && decoder.is_done()
                    && sending.as_ref().is_none_or(|s| s.is_done())
                    && c.read_is_empty()
                {
                    put_back(home, *task, c);
                }
            }
            // The rest of a request body nobody will send (read behind the answer when it
            // is a client's: `body::UnreadRequestBody`).
            *sending = None;
        }
    }
}

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        // A server sending a body of known length stops polling after the last byte (hyper
        // checks `is_end_stream`), so the end is often seen only here.
        self.release(true);
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let (conn, decoder, sending, keep_alive) = match &mut this.0 {
            Inner::Hyper { body, .. } => {
                return Pin::new(body)
                    .poll_frame(cx)
                    .map(|f| f.map(|r| r.map_err(BoxError::from)))
            }
            Inner::Http1 {
                conn,
                decoder,
                sending,
                keep_alive,
                ..
            } => (conn, decoder, sending, keep_alive),
        };
        let Some(c) = conn.as_mut() else {
            return Poll::Ready(None);
        };
        if let Some(s) = sending.as_mut() {
            match s.poll_send(c, cx) {
                Poll::Ready(Ok(())) => {}
                // The request cannot be completed: the connection cannot carry another
                // exchange, but the response may still arrive whole.
                Poll::Ready(Err(_)) => *keep_alive = false,
                Poll::Pending => {}
            }
            if s.is_done() || !*keep_alive {
                *sending = None;
            }
        }
        let out = loop {
            match decoder.decode(c.read_buf()) {
                Ok(Decoded::Data(b)) => return Poll::Ready(Some(Ok(Frame::data(b)))),
                Ok(Decoded::Trailers(t)) => return Poll::Ready(Some(Ok(Frame::trailers(t)))),
                Ok(Decoded::End) => break None,
                Ok(Decoded::More) => {}
                Err(e) => break Some(e),
            }
            match ready!(c.poll_read(cx)) {
                Ok(0) if decoder.is_until_close() => {
                    decoder.closed();
                    *keep_alive = false;
                    break None;
                }
                Ok(0) => break Some(WireError::Closed("in the middle of the response body")),
                Ok(_) => {}
                Err(e) => break Some(e.into()),
            }
        };
        match out {
            None => {
                this.release(true);
                Poll::Ready(None)
            }
            Some(e) => {
                this.release(false);
                Poll::Ready(Some(Err(BoxError::from(e))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.0 {
            Inner::Http1 { decoder, .. } => decoder.is_done(),
            Inner::Hyper { body, .. } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.0 {
            Inner::Http1 { decoder, .. } => match decoder.remaining() {
                Some(n) => SizeHint::with_exact(n),
                None => SizeHint::default(),
            },
            Inner::Hyper { body, .. } => body.size_hint(),
        }
    }
}
