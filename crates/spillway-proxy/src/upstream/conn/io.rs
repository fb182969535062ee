//! An upstream connection's byte stream: TCP, or TLS over TCP (cargo feature `tls`).
//!
//! Why an enum and not a type parameter: the connection code (`http1`, the idle lists, the
//! response body) stays one copy, and a plaintext build has a single variant, so every match
//! here compiles to the TCP call it was before; with `tls`, a plaintext connection pays one
//! predictable branch per read or write.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// TCP, or TLS over TCP.
pub(crate) enum Io {
    /// Plaintext.
    Plain(TcpStream),
    /// TLS (boxed: a TLS session is ~1 KiB, a TCP stream a few words).
    #[cfg(feature = "tls")]
    Tls(Box<crate::tls::TlsStream>),
}

impl Io {
    /// Whether an idle connection can take a request: nothing arrived on it and it is not
    /// closed. `cx` carries a waker that does nothing (nobody waits on an idle connection).
    pub(super) fn is_quiet(&mut self, cx: &mut Context<'_>) -> bool {
        match self {
            Io::Plain(s) => match s.poll_read_ready(cx) {
                Poll::Pending => true,
                Poll::Ready(Err(_)) => false,
                // One non-blocking read tells end of stream from stale readiness.
                Poll::Ready(Ok(())) => {
                    let mut probe = [0u8; 1];
                    matches!(s.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
                }
            },
            // A read through TLS: records that carry no data (a session ticket) are taken in
            // passing; data, a close_notify or an end of stream mean it cannot be reused.
            #[cfg(feature = "tls")]
            Io::Tls(s) => {
                let mut probe = [0u8; 1];
                let mut buf = ReadBuf::new(&mut probe);
                Pin::new(&mut **s).poll_read(cx, &mut buf).is_pending()
            }
        }
    }
}

impl AsyncRead for Io {
    #[inline]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            #[cfg(feature = "tls")]
            Io::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    #[inline]
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            #[cfg(feature = "tls")]
            Io::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    #[inline]
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            #[cfg(feature = "tls")]
            Io::Tls(s) => Pin::new(&mut **s).poll_write_vectored(cx, bufs),
        }
    }

    #[inline]
    fn is_write_vectored(&self) -> bool {
        match self {
            Io::Plain(s) => s.is_write_vectored(),
            #[cfg(feature = "tls")]
            Io::Tls(s) => s.is_write_vectored(),
        }
    }

    #[inline]
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            #[cfg(feature = "tls")]
            Io::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    #[inline]
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            #[cfg(feature = "tls")]
            Io::Tls(s) => Pin::new(&mut **s).poll_shutdown(cx),
        }
    }
}
