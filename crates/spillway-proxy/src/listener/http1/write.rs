//! Writing a response on the fast path: its head and body into one buffer, written in as few
//! writes as the stream allows, while the request's body goes on being read.
//!
//! Why its own buffer and framing here rather than hyper's: a response went through two
//! layers of buffers in hyper's dispatcher; here a small body is copied behind its head and
//! both go out in one write, a large one is written from its own buffer (gathered with what
//! is buffered where the stream can), and the framing (length, chunked, trailers) is the
//! codec's (`http1::server`).

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http::HeaderMap;
use http_body::Body;
use tokio::io::{AsyncRead, AsyncWrite};

use super::{poll_feed, COPY_MAX, FLUSH_AT};
use crate::body::ResponseBody;
use crate::http1::server as codec;
use crate::http1::Framing;
use crate::http1::{chunk_header, chunked_end};
use crate::read_buffer::ReadBuffer;
use crate::request_body::fast::Filler;

/// What writing a body waits for next.
enum Step {
    /// A frame, or the end.
    Frame(Option<Result<http_body::Frame<Bytes>, crate::upstream::BoxError>>),
    /// The body has nothing yet: write out what is buffered meanwhile.
    Flush,
    /// The client's side ended before its request body did.
    ClientGone,
}

/// Polls `body` for its next frame while `feed` goes on reading the request's body; a flush
/// when the body has nothing yet and something is buffered in `out`.
#[inline(always)]
fn poll_step<S: AsyncRead + Unpin>(
    body: &mut ResponseBody,
    feed: &mut Option<(&Filler, &mut ReadBuffer)>,
    io: &mut S,
    out: &[u8],
    cx: &mut Context<'_>,
) -> Poll<Step> {
    if let Poll::Ready(f) = Pin::new(body).poll_frame(cx) {
        return Poll::Ready(Step::Frame(f));
    }
    if let Some((f, read)) = feed.as_mut() {
        if poll_feed(f, io, read, cx).is_err() {
            return Poll::Ready(Step::ClientGone);
        }
    }
    if out.is_empty() {
        Poll::Pending
    } else {
        Poll::Ready(Step::Flush)
    }
}

/// Where a response body's framing stands as its frames are written.
struct Framer {
    /// How the body follows its head, and the trailers the client takes.
    head: codec::Head,
    /// What is left of a declared length (`u64::MAX` for other framings).
    left: u64,
    /// A chunk was written (its end is written before the next chunk's size).
    after_data: bool,
    /// The trailers to write after the last chunk.
    trailers: Option<HeaderMap>,
}

impl Framer {
    fn new(head: codec::Head) -> Self {
        let left = match head.framing {
            Framing::Length(n) => n,
            _ => u64::MAX,
        };
        Framer {
            head,
            left,
            after_data: false,
            trailers: None,
        }
    }

    /// The data of `frame` to write, its framing written into `out` before it, and whether it
    /// ran past the declared length (cut there: the rest is not sent, and the connection
    /// closes); `None` for a frame with nothing to write now (trailers are kept for the end).
    #[inline(always)]
    fn data(&mut self, frame: http_body::Frame<Bytes>, out: &mut Vec<u8>) -> Option<(Bytes, bool)> {
        let mut data = match frame.into_data() {
            Ok(d) => d,
            Err(f) => {
                if let (Ok(t), Some(allowed)) = (f.into_trailers(), &self.head.trailers) {
                    self.trailers = Some(codec::allowed_trailers(t, allowed));
                }
                return None;
            }
        };
        if data.is_empty() {
            return None;
        }
        let overlong = data.len() as u64 > self.left;
        if overlong {
            data.truncate(usize::try_from(self.left).unwrap_or(usize::MAX));
        }
        match self.head.framing {
            Framing::Length(_) => self.left -= data.len() as u64,
            Framing::Chunked => {
                chunk_header(out, self.after_data, data.len());
                self.after_data = true;
            }
            _ => {}
        }
        Some((data, overlong))
    }

    /// Writes the body's end into `out`; whether the body was whole.
    fn end(&self, out: &mut Vec<u8>) -> bool {
        match self.head.framing {
            Framing::Length(_) => self.left == 0,
            Framing::Chunked => {
                chunked_end(out, self.after_data, self.trailers.as_ref());
                true
            }
            // Ends with the connection.
            _ => true,
        }
    }
}

/// Writes the head in `out` and `body` after it, framed as `head` says, while `feed` goes on
/// reading the request's body (an upstream may stream its answer while it reads the upload);
/// whether the message went out whole (else the connection must close: the client cannot
/// tell where it ends).
#[allow(clippy::manual_async_fn)] // on purpose: see the body's first comment
pub(super) fn write_body<'a, S: AsyncRead + AsyncWrite + Unpin>(
    io: &'a mut S,
    out: &'a mut Vec<u8>,
    mut body: ResponseBody,
    head: codec::Head,
    mut feed: Option<(&'a Filler, &'a mut ReadBuffer)>,
) -> impl Future<Output = bool> + 'a {
    // An `async` block, not an `async fn`, so that the body is not moved once more when the
    // future is first polled (`upstream::Connections::send`).
    async move {
        if head.framing == Framing::Empty {
            // Releases what the body holds (the admission permit) before the write.
            drop(body);
            return write_all(io, out, Bytes::new()).await.is_ok();
        }
        let mut framer = Framer::new(head);
        loop {
            let step =
                std::future::poll_fn(|cx| poll_step(&mut body, &mut feed, io, out, cx)).await;
            let frame = match step {
                Step::ClientGone => return false,
                Step::Flush => {
                    if write_all(io, out, Bytes::new()).await.is_err() {
                        return false;
                    }
                    continue;
                }
                Step::Frame(None) => break,
                Step::Frame(Some(Ok(f))) => f,
                // The body broke (the upstream failed mid-answer): what was sent stays cut short.
                Step::Frame(Some(Err(_))) => {
                    let _ = write_all(io, out, Bytes::new()).await;
                    return false;
                }
            };
            let Some((data, overlong)) = framer.data(frame, out) else {
                continue;
            };
            let sent = if data.len() <= COPY_MAX {
                out.extend_from_slice(&data);
                if out.len() >= FLUSH_AT {
                    write_all(io, out, Bytes::new()).await
                } else {
                    Ok(())
                }
            } else {
                write_all(io, out, data).await
            };
            if sent.is_err() || overlong {
                return false;
            }
        }
        let whole = framer.end(out);
        write_all(io, out, Bytes::new()).await.is_ok() && whole
    }
}

/// Writes `out` and then `data`, gathering both into one write where the stream can.
async fn write_all<S: AsyncWrite + Unpin>(
    io: &mut S,
    out: &mut Vec<u8>,
    mut data: Bytes,
) -> io::Result<()> {
    let mut done = 0;
    while done < out.len() || !data.is_empty() {
        let head = &out[done..];
        let n = std::future::poll_fn(|cx| {
            if head.is_empty() {
                Pin::new(&mut *io).poll_write(cx, &data)
            } else if data.is_empty() {
                Pin::new(&mut *io).poll_write(cx, head)
            } else {
                Pin::new(&mut *io)
                    .poll_write_vectored(cx, &[IoSlice::new(head), IoSlice::new(&data)])
            }
        })
        .await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        let from_head = n.min(head.len());
        done += from_head;
        data.advance(n - from_head);
    }
    out.clear();
    Ok(())
}
