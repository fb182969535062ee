//! A connection's read buffer whose reads grow while a body streams in: the client side's
//! (`listener::http1`) and the upstream side's (`upstream::conn`) alike.
//!
//! Why adaptive: a head fits in hyper's first read size (8 KiB), but a large body read 8 KiB at a
//! time costs a read, a hand-over and a write each (2× the CPU of a 256 KiB upload,
//! bench/results/proxy-forwarding.md "Thirteenth round"); a read that fills what it asked for
//! doubles the next one, up to 128 KiB, and one that does not returns to 8 KiB.
//!
//! Why through `AsyncRead` (tokio-util's `poll_read_buf`), not `try_read_buf`: a read that
//! returns less than it had room for tells tokio the socket is drained, so its readiness is
//! cleared without a read that fails with `EAGAIN` (strace: 3 `recvfrom` per forwarded request
//! the other way, 2 this way).

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::BytesMut;
use tokio::io::{AsyncRead, ReadBuf};

/// The first read size (hyper's).
const READ_FIRST: usize = 8192;
/// The largest a read reserves.
const READ_MOST: usize = 128 * 1024;

/// Bytes read and not yet taken, and how much the next read asks for.
#[derive(Debug)]
pub(crate) struct ReadBuffer {
    /// What has been read and not taken: a head being parsed, body bytes.
    pub(crate) buf: BytesMut,
    size: usize,
}

impl ReadBuffer {
    /// A buffer holding no memory yet: its first read goes onto the stack and allocates only
    /// for what came ([`ReadBuffer::poll_fill`]). Why for a new connection: the first request
    /// head (or response head) read into an 8 KiB buffer is split off and shares that buffer
    /// for as long as its request lives, so every request waiting in a stall held 8 KiB for a
    /// head of a few hundred bytes.
    pub(crate) fn new() -> Self {
        ReadBuffer {
            buf: BytesMut::new(),
            size: READ_FIRST,
        }
    }

    /// Lets go of the buffer's memory if nothing is buffered (a connection between requests);
    /// the next read that brings bytes allocates for them.
    pub(crate) fn release(&mut self) {
        if self.buf.is_empty() {
            self.buf = BytesMut::new();
            self.size = READ_FIRST;
        }
    }

    /// Reads what `io` has into the buffer; `Ok(0)` at end of stream.
    pub(crate) fn poll_fill<S: AsyncRead + Unpin>(
        &mut self,
        io: &mut S,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        if self.buf.capacity() == 0 {
            // Let go of ([`ReadBuffer::release`]): read onto the stack, so that a wait that
            // brings nothing allocates nothing, and allocate for what came (a request head,
            // copied: the size of what came, not 8 KiB, held while its request runs).
            let mut stack = [MaybeUninit::<u8>::uninit(); READ_FIRST];
            let mut got = ReadBuf::uninit(&mut stack);
            ready!(Pin::new(io).poll_read(cx, &mut got))?;
            let n = got.filled().len();
            if n > 0 {
                self.buf = BytesMut::from(got.filled());
            }
            self.size = if n == READ_FIRST {
                READ_FIRST * 2
            } else {
                READ_FIRST
            };
            return Poll::Ready(Ok(n));
        }
        if self.buf.capacity() - self.buf.len() < self.size / 4 {
            self.buf.reserve(self.size);
        }
        let room = self.buf.capacity() - self.buf.len();
        let n = ready!(tokio_util::io::poll_read_buf(
            Pin::new(io),
            cx,
            &mut self.buf
        ))?;
        self.size = if n == room {
            (self.size * 2).min(READ_MOST)
        } else {
            READ_FIRST
        };
        Poll::Ready(Ok(n))
    }
}
