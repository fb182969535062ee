//! A client connection's stream as its timer sees it: each read tells [`Progress`] that bytes
//! arrived (a head is under way, not an idle wait) and whether the first of them are HTTP/2's
//! preface; each write tells it whether the socket took it (the send timeout's sign).
//!
//! Why in the stream and not in the server: both the fast path and hyper's server read and
//! write through it, so the same counts hold whichever serves the connection, at a relaxed
//! store per read or write.

use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::Progress;

/// A client connection's stream, telling [`Progress`] when bytes arrive and whether the first
/// of them are HTTP/2's preface.
#[derive(Debug)]
pub struct Watched<S> {
    io: S,
    progress: Arc<Progress>,
    first: bool,
}

impl<S> Watched<S> {
    /// Wraps `io`, reporting to `progress`.
    pub fn new(io: S, progress: Arc<Progress>) -> Self {
        Watched {
            io,
            progress,
            first: true,
        }
    }
}

/// HTTP/2's connection preface starts so (RFC 9113 §3.4; the method PRI is reserved for it).
const H2_PREFACE_START: &[u8] = b"PRI * HTTP/2.0";

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let res = Pin::new(&mut this.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = res {
            let got = buf.filled().get(before..).unwrap_or_default();
            if !got.is_empty() {
                if this.first {
                    this.first = false;
                    if got.starts_with(H2_PREFACE_START) {
                        this.progress.h2.store(true, Relaxed);
                    }
                }
                this.progress.read.store(true, Relaxed);
            }
        }
        res
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let res = Pin::new(&mut this.io).poll_write(cx, buf);
        this.progress.wrote(&res);
        res
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let res = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.progress.wrote(&res);
        res
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
