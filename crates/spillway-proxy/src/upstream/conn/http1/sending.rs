//! A request on its way out of an HTTP/1.1 upstream connection: the head in the connection's
//! buffer, then the body framed as its head announced (a length it must fill exactly, or
//! chunks and a trailer section).
//!
//! Why its own type, kept apart from the exchange: the upstream may answer before the request
//! is all sent, and then the rest of the body goes on being written from the response body's
//! polls (`super::super::body`), long after the exchange that began it has ended.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use http_body::Body;
use tokio::io::AsyncWrite;

use super::{Conn, Http1};
use crate::http1::client::{Outgoing, WireError};
use crate::request_body::RequestBody;

/// A request's body on its way out, and the head before it.
pub(crate) struct Sending {
    /// `None` once it has ended.
    body: Option<RequestBody>,
    outgoing: Outgoing,
    /// Bytes still allowed by a `content-length`.
    left: u64,
    /// The data being written, after the connection's `write[written..]`.
    data: Bytes,
    written: usize,
    /// A chunk's data has been sent (its CRLF goes before the next chunk-size line).
    after_data: bool,
    pub(super) done: bool,
    /// Leave the written head in the connection's buffer (a request that may be replayed).
    pub(super) keep: bool,
}

impl Sending {
    /// Whether the whole request has been written.
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    /// Writes the request as far as the socket and the body allow.
    pub(crate) fn poll_send(
        &mut self,
        conn: &mut Http1,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), WireError>> {
        let c = &mut *conn.0;
        loop {
            ready!(self.poll_write_out(c, cx))?;
            if self.done {
                return Poll::Ready(Ok(()));
            }
            let Some(body) = self.body.as_mut() else {
                self.done = true;
                continue;
            };
            match ready!(Pin::new(body).poll_frame(cx)) {
                Some(Ok(frame)) => self.frame(frame, &mut c.write)?,
                Some(Err(e)) => {
                    self.body = None;
                    return Poll::Ready(Err(WireError::RequestBody(e.to_string())));
                }
                None => self.end(&mut c.write)?,
            }
        }
    }

    /// Writes out the head or framing in the connection's buffer and the data after it, then
    /// flushes.
    #[inline]
    fn poll_write_out(&mut self, c: &mut Conn, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while c.write.len() > self.written || !self.data.is_empty() {
            let head = &c.write[self.written..];
            let io = Pin::new(&mut c.io);
            let n = ready!(if head.is_empty() {
                io.poll_write(cx, &self.data)
            } else if self.data.is_empty() {
                io.poll_write(cx, head)
            } else {
                io.poll_write_vectored(cx, &[IoSlice::new(head), IoSlice::new(&self.data)])
            })?;
            if n == 0 {
                return Poll::Ready(Err(io::Error::from(io::ErrorKind::WriteZero)));
            }
            let from_head = head.len().min(n);
            self.written += from_head;
            self.data.advance(n - from_head);
        }
        // TLS may hold written bytes in its session until flushed (TCP: a no-op).
        ready!(Pin::new(&mut c.io).poll_flush(cx))?;
        if !self.keep {
            c.write.clear();
            self.written = 0;
        }
        Poll::Ready(Ok(()))
    }

    /// Takes in the body's next frame: data to write after its framing, or trailers, which end
    /// a chunked body.
    #[inline]
    fn frame(
        &mut self,
        frame: http_body::Frame<Bytes>,
        write: &mut Vec<u8>,
    ) -> Result<(), WireError> {
        let data = match frame.into_data() {
            Ok(data) => data,
            Err(frame) => {
                // Trailers travel only in a chunked body (the end of the body either way).
                if let (Outgoing::Chunked, Ok(t)) = (self.outgoing, frame.into_trailers()) {
                    crate::http1::chunked_end(write, self.after_data, Some(&t));
                    self.body = None;
                    self.done = true;
                }
                return Ok(());
            }
        };
        if data.is_empty() {
            return Ok(());
        }
        match self.outgoing {
            Outgoing::Length(n) => {
                if data.len() as u64 > self.left {
                    self.body = None;
                    return Err(WireError::RequestBody(format!(
                        "longer than its content-length of {n}"
                    )));
                }
                self.left -= data.len() as u64;
                self.data = data;
            }
            Outgoing::Chunked => {
                crate::http1::chunk_header(write, self.after_data, data.len());
                self.after_data = true;
                self.data = data;
            }
            // Cannot happen (an ended body was not polled); not sent rather than sent
            // unframed.
            Outgoing::Empty => {}
        }
        Ok(())
    }

    /// The body ended: the last chunk, or a check that it filled its length.
    fn end(&mut self, write: &mut Vec<u8>) -> Result<(), WireError> {
        self.body = None;
        self.done = true;
        match self.outgoing {
            Outgoing::Chunked => crate::http1::chunked_end(write, self.after_data, None),
            Outgoing::Length(n) if self.left > 0 => {
                return Err(WireError::RequestBody(format!(
                    "ended {} bytes short of its content-length of {n}",
                    self.left
                )));
            }
            _ => {}
        }
        Ok(())
    }
}

impl Sending {
    /// A request's body (`None`: none, or empty) to go out as `outgoing` says, after the head
    /// in the connection's buffer; `keep`: that head stays there, for a replay.
    pub(super) fn new(body: Option<RequestBody>, outgoing: Outgoing, keep: bool) -> Self {
        Sending {
            body,
            outgoing,
            left: match outgoing {
                Outgoing::Length(n) => n,
                _ => 0,
            },
            data: Bytes::new(),
            written: 0,
            after_data: false,
            done: false,
            keep,
        }
    }

    /// A request without a body: its head (already in the connection's buffer) still to be
    /// written, or (`done`) nothing left to write.
    pub(super) fn without_body(done: bool) -> Self {
        Sending {
            body: None,
            outgoing: Outgoing::Empty,
            left: 0,
            data: Bytes::new(),
            written: 0,
            after_data: false,
            done,
            keep: false,
        }
    }
}
