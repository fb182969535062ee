//! The admin listener's send timeout: a connection whose socket has taken no byte of its
//! answers for `admin.send_timeout_ms` is dropped.
//!
//! Why: the admin port is what an operator reaches for in an incident, and it has a connection
//! cap (`admin.max_connections`). hyper's server has no write timeout, so a client that sends
//! requests and never reads the answers (pipelined, or one large answer) leaves its connection
//! blocked on a full socket for as long as the peer keeps it open; that many such clients would
//! hold every slot and lock the operator out. Progress is any write the socket takes, so a slow
//! but live reader is never cut (the data plane's `listen.send_timeout_ms` rule, and nginx's
//! `send_timeout`). The socket's writes are counted by the data plane's own wrapper
//! ([`Watched`](crate::progress::Watched)); admin answers are whole in one frame, so the
//! socket is the one place a response can stall, and none of the data plane's per-request
//! bookkeeping is needed.

use std::time::Duration;

use tokio::time::Instant;

use crate::progress::Progress;

/// Resolves once the connection's socket has been full at every check, with nothing written,
/// for `limit` (checked every quarter of it, so 1–1.5 × `limit` after it filled); never while
/// its writes go through.
pub(super) async fn stalled(progress: &Progress, limit: Duration) {
    let period = (limit / 4).max(Duration::from_millis(1));
    let mut seen = progress.writes().0;
    // The last check that found the socket taking bytes (or not full).
    let mut moving_at = Instant::now();
    loop {
        tokio::time::sleep(period).await;
        let now = Instant::now();
        let (written, blocked) = progress.writes();
        if !blocked || written != seen {
            seen = written;
            moving_at = now;
        } else if now.duration_since(moving_at) >= limit {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};

    use super::*;
    use crate::progress::Watched;

    /// A watched socket whose peer reads nothing, filled until a write is refused.
    async fn full() -> (
        Watched<tokio::io::DuplexStream>,
        tokio::io::DuplexStream,
        Arc<Progress>,
    ) {
        let (a, b) = tokio::io::duplex(64);
        let progress = Arc::new(Progress::default());
        let mut w = Watched::new(a, Arc::clone(&progress));
        w.write_all(&[0; 64]).await.unwrap();
        let refused = std::future::poll_fn(|cx: &mut Context<'_>| {
            Poll::Ready(Pin::new(&mut w).poll_write(cx, b"x").is_pending())
        })
        .await;
        assert!(refused, "the socket is full");
        (w, b, progress)
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_socket_is_cut_after_the_limit() {
        let (_w, _peer, progress) = full().await;
        let limit = Duration::from_secs(2);
        let t = Instant::now();
        stalled(&progress, limit).await;
        let took = t.elapsed();
        assert!(took >= limit && took <= limit * 3 / 2, "{took:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_that_takes_bytes_is_never_cut() {
        let (mut w, mut peer, progress) = full().await;
        let limit = Duration::from_secs(2);
        let stall = stalled(&progress, limit);
        tokio::pin!(stall);
        // A slow reader: a few bytes every second, each time the writer refills the socket.
        for _ in 0..10 {
            tokio::select! {
                () = &mut stall => panic!("cut while the reader takes bytes"),
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            let mut b = [0u8; 8];
            peer.read_exact(&mut b).await.unwrap();
            w.write_all(&b).await.unwrap();
        }
        // Then it stops reading: cut.
        let refused = std::future::poll_fn(|cx: &mut Context<'_>| {
            Poll::Ready(Pin::new(&mut w).poll_write(cx, b"x").is_pending())
        })
        .await;
        assert!(refused);
        tokio::time::timeout(limit * 2, stall)
            .await
            .expect("cut once the reader stops");
    }
}
