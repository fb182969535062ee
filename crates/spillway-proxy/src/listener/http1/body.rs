//! A request body on the fast path (`content-length`): read from the client by the connection's
//! own task, taken by whoever holds the request — the proxy's upstream request, in this task or
//! in an HTTP/2 connection's.
//!
//! Why a shared slot and not the socket in the body: the connection's task must go on watching
//! the socket while the request runs (pipelined bytes, the client leaving) and own it again
//! after the answer, while the body may be read from another task (an HTTP/2 upstream's
//! connection task). So the task reads, the body takes; at most [`BUFFERED`] bytes wait between
//! them, and the task reads no further until the body has taken them (back-pressure to the
//! client). A body let go of early is read and discarded by the connection's task, within
//! bounds (`super::serve`), as `forward::Unread` drains hyper's bodies.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};

/// Most body bytes read from the client and not yet taken.
pub const BUFFERED: usize = 64 * 1024;

/// Most bytes of a body let go of early that the connection reads and discards to keep the
/// connection (as `spillway_tower::server::DRAIN_LIMIT` for hyper's bodies); beyond, it closes.
pub const DISCARD_LIMIT: u64 = spillway_tower::server::DRAIN_LIMIT as u64;

/// Why a body did not arrive whole.
#[derive(Debug, thiserror::Error)]
#[error("the client's connection ended {0} bytes before the end of the request body")]
pub struct BodyCut(pub u64);

/// A request body the connection's task fills.
#[derive(Debug)]
pub struct RequestBody(Arc<Shared>);

#[derive(Debug)]
struct Shared(Mutex<State>);

#[derive(Debug)]
struct State {
    /// Read and not yet taken.
    ready: VecDeque<Bytes>,
    buffered: usize,
    /// Not yet read from the client.
    left: u64,
    /// The client's side ended before the body did.
    cut: bool,
    /// The body was dropped: what is left is the connection's to discard.
    dropped: bool,
    /// The body's reader, waiting for bytes.
    reader: Option<Waker>,
    /// The connection's task, waiting for room.
    conn: Option<Waker>,
}

/// The connection's side of a [`RequestBody`].
#[derive(Debug)]
pub struct Filler(Arc<Shared>);

/// A body of `len` bytes (not zero), and the connection's handle to fill it.
pub fn channel(len: u64) -> (RequestBody, Filler) {
    let shared = Arc::new(Shared(Mutex::new(State {
        ready: VecDeque::new(),
        buffered: 0,
        left: len,
        cut: false,
        dropped: false,
        reader: None,
        conn: None,
    })));
    (RequestBody(Arc::clone(&shared)), Filler(shared))
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the counts half-updated in a way that
        // matters more than losing the request; carry on with what is there.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What the connection should do next for a body.
#[derive(Debug, PartialEq, Eq)]
pub enum Need {
    /// All of it has been read from the client.
    Done,
    /// More bytes from the client.
    Read,
    /// The reader has not taken what is there: wait (the task is woken when it does).
    Room,
    /// The body was let go of with more left than is worth discarding: the connection must
    /// close after the answer.
    GiveUp,
}

impl Filler {
    /// Moves what `read` holds of the body into it (or discards it, if the body was dropped);
    /// says what is needed next.
    pub fn take_from(&self, read: &mut BytesMut, cx: &mut Context<'_>) -> Need {
        let mut st = self.0.lock();
        if st.dropped && st.left > DISCARD_LIMIT {
            return Need::GiveUp;
        }
        if st.left > 0 && !read.is_empty() {
            let n = usize::try_from(st.left).map_or(read.len(), |l| l.min(read.len()));
            let chunk = read.split_to(n);
            st.left -= n as u64;
            if st.dropped {
                drop(chunk);
            } else {
                st.buffered += n;
                st.ready.push_back(chunk.freeze());
                if let Some(w) = st.reader.take() {
                    w.wake();
                }
            }
        }
        if st.left == 0 {
            Need::Done
        } else if st.dropped && st.left > DISCARD_LIMIT {
            Need::GiveUp
        } else if !st.dropped && st.buffered >= BUFFERED {
            st.conn = Some(cx.waker().clone());
            Need::Room
        } else {
            Need::Read
        }
    }

    /// The client's side ended: the body fails with [`BodyCut`].
    pub fn cut(&self) {
        let mut st = self.0.lock();
        st.cut = true;
        if let Some(w) = st.reader.take() {
            w.wake();
        }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BodyCut;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyCut>>> {
        let mut st = self.0.lock();
        if let Some(b) = st.ready.pop_front() {
            st.buffered -= b.len();
            if let Some(w) = st.conn.take() {
                w.wake();
            }
            return Poll::Ready(Some(Ok(Frame::data(b))));
        }
        if st.left == 0 {
            return Poll::Ready(None);
        }
        if st.cut {
            return Poll::Ready(Some(Err(BodyCut(st.left))));
        }
        st.reader = Some(cx.waker().clone());
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        let st = self.0.lock();
        st.left == 0 && st.ready.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        let st = self.0.lock();
        SizeHint::with_exact(st.left + st.buffered as u64)
    }
}

impl Drop for RequestBody {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        st.dropped = true;
        st.ready.clear();
        st.buffered = 0;
        st.reader = None;
        if let Some(w) = st.conn.take() {
            w.wake();
        }
    }
}
