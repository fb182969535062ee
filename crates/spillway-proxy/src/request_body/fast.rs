//! A request body on the proxy's HTTP/1.1 fast path (`content-length` or chunked): read from
//! the client and decoded by the connection's own task (`crate::listener::http1`), taken by
//! whoever holds the request — the proxy's upstream request, in this task or in an HTTP/2
//! connection's.
//!
//! Why a shared slot and not the socket in the body: the connection's task must go on watching
//! the socket while the request runs (pipelined bytes, the client leaving) and own it again
//! after the answer, while the body may be read from another task (an HTTP/2 upstream's
//! connection task). So the task reads and decodes (the upstream codec's decoder: the same
//! chunked rules and limits both ways), the body takes; at most [`BUFFERED`] bytes wait between
//! them, and the task reads no further until the body has taken them (back-pressure to the
//! client). A body let go of early is read and discarded by the connection's task, within
//! [`DISCARD_LIMIT`], as [`UnreadRequestBody`](super::UnreadRequestBody) drains hyper's bodies.
//!
//! A client that sent `Expect: 100-continue` waits for `100 Continue` before its body: the
//! body asks for it the first time its reader finds nothing to take (as hyper's server sends
//! it on the first read of the body, so a request refused before forwarding never invites the
//! upload), and the connection's task writes it ([`Filler::take_continue`]).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};

use crate::http1::{Decoded, Decoder, Framing};

/// Most body bytes read from the client and not yet taken.
pub const BUFFERED: usize = 64 * 1024;

/// Most bytes of a body let go of early that the connection reads and discards to keep the
/// connection (as `spillway_tower::server::DRAIN_LIMIT` for hyper's bodies); beyond, it closes.
pub const DISCARD_LIMIT: u64 = spillway_tower::server::DRAIN_LIMIT as u64;

/// Why a request body did not arrive whole.
#[derive(Clone, Debug, thiserror::Error)]
pub enum BodyError {
    /// The client's side of the connection ended first (the bytes missing, when known).
    #[error("the client's connection ended before the end of the request body{}", missing_text(.0))]
    Cut(Option<u64>),
    /// The chunked coding was not valid.
    #[error("the request body's chunked coding is invalid: {0}")]
    Invalid(String),
}

fn missing_text(missing: &Option<u64>) -> String {
    missing.map_or_else(String::new, |n| format!(" ({n} bytes missing)"))
}

/// A request body the connection's task fills.
#[derive(Debug)]
pub struct FastRequestBody(Arc<Shared>);

#[derive(Debug)]
struct Shared(Mutex<State>);

#[derive(Debug)]
struct State {
    /// Decoded and not yet taken: data, then perhaps a trailer section.
    ready: VecDeque<Frame<Bytes>>,
    buffered: usize,
    decoder: Decoder,
    /// Bytes discarded after the body was dropped.
    discarded: u64,
    /// Why the body cannot complete, once known (kept: the connection must not read on).
    failed: Option<BodyError>,
    /// The failure has been given to the reader.
    reported: bool,
    /// The body was dropped: what is left is the connection's to discard.
    dropped: bool,
    /// The body's reader, waiting for bytes.
    reader: Option<Waker>,
    /// The connection's task, waiting for room (or for the reader to ask for the body).
    conn: Option<Waker>,
    /// Where the client's `Expect: 100-continue` stands.
    expect: Expect,
}

/// Where a client's `Expect: 100-continue` stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// No expectation left to answer: none was sent, `100 Continue` has been, or the final
    /// answer came first.
    Settled,
    /// The client waits; nobody has asked for the body yet.
    Waiting,
    /// The reader asked for the body: the connection is to write `100 Continue`.
    Asked,
}

/// The connection's side of a [`FastRequestBody`].
#[derive(Debug)]
pub struct Filler(Arc<Shared>);

/// A body framed as `framing` (a length that is not zero, or chunked), whose client waits for
/// `100 Continue` if `expect_continue`, and the connection's handle to fill it.
pub fn channel(framing: Framing, expect_continue: bool) -> (FastRequestBody, Filler) {
    let shared = Arc::new(Shared(Mutex::new(State {
        ready: VecDeque::new(),
        buffered: 0,
        decoder: Decoder::new(framing),
        discarded: 0,
        failed: None,
        reported: false,
        dropped: false,
        reader: None,
        conn: None,
        expect: if expect_continue {
            Expect::Waiting
        } else {
            Expect::Settled
        },
    })));
    (FastRequestBody(Arc::clone(&shared)), Filler(shared))
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing here panics while holding the lock; if something did, the state is still
        // whole enough to finish the request with.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl State {
    fn wake_reader(&mut self) {
        if let Some(w) = self.reader.take() {
            w.wake();
        }
    }

    /// A dropped body with more left than is worth discarding.
    fn not_worth_discarding(&self) -> bool {
        self.dropped
            && (self.discarded > DISCARD_LIMIT
                || self.decoder.remaining().is_some_and(|n| n > DISCARD_LIMIT))
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
    /// Read no more of it: the connection closes after the answer (a body let go of with more
    /// left than is worth discarding, or chunked coding that is not valid).
    GiveUp,
}

impl Filler {
    /// Decodes what `read` holds of the body into it (or discards it, if the body was dropped);
    /// says what is needed next. What follows the body's end stays in `read`.
    pub fn take_from(&self, read: &mut BytesMut, cx: &mut Context<'_>) -> Need {
        let mut st = self.0.lock();
        if st.expect == Expect::Waiting {
            // Woken when the reader asks for the body (it may be in another task).
            st.conn = Some(cx.waker().clone());
        }
        loop {
            if st.failed.is_some() || st.not_worth_discarding() {
                return Need::GiveUp;
            }
            if st.decoder.is_done() {
                return Need::Done;
            }
            if !st.dropped && st.buffered >= BUFFERED {
                st.conn = Some(cx.waker().clone());
                return Need::Room;
            }
            match st.decoder.decode(read) {
                Ok(Decoded::Data(b)) if st.dropped => st.discarded += b.len() as u64,
                Ok(Decoded::Data(b)) => {
                    st.buffered += b.len();
                    st.ready.push_back(Frame::data(b));
                    st.wake_reader();
                }
                Ok(Decoded::Trailers(t)) => {
                    if !st.dropped {
                        st.ready.push_back(Frame::trailers(t));
                    }
                    st.wake_reader();
                }
                Ok(Decoded::End) => st.wake_reader(),
                Ok(Decoded::More) => return Need::Read,
                Err(e) => {
                    st.failed = Some(BodyError::Invalid(e.to_string()));
                    st.wake_reader();
                    return Need::GiveUp;
                }
            }
        }
    }

    /// The client's side ended: the body fails with [`BodyError::Cut`].
    pub fn cut(&self) {
        let mut st = self.0.lock();
        if st.failed.is_none() {
            st.failed = Some(BodyError::Cut(st.decoder.remaining()));
        }
        st.wake_reader();
    }

    /// Whether `100 Continue` is to be written now (the reader asked for the body); it is
    /// asked for once.
    pub fn take_continue(&self) -> bool {
        let mut st = self.0.lock();
        let asked = st.expect == Expect::Asked;
        if asked {
            st.expect = Expect::Settled;
        }
        asked
    }

    /// The final answer is about to be written: no `100 Continue` after it. Returns whether the
    /// connection may carry another request — not if its client still waits to be invited to
    /// send a body it has not sent whole (it may never send it: the connection cannot tell
    /// what its next bytes are, and closes, as hyper's server does).
    pub fn answering(&self) -> bool {
        let mut st = self.0.lock();
        let waits = st.expect != Expect::Settled;
        st.expect = Expect::Settled;
        !waits || st.decoder.is_done()
    }
}

impl Drop for Filler {
    /// The connection is done with the request (closed, or handed over) before the body's end:
    /// its reader, perhaps in another task, learns that no more is coming.
    fn drop(&mut self) {
        let mut st = self.0.lock();
        if !st.decoder.is_done() && st.failed.is_none() {
            st.failed = Some(BodyError::Cut(st.decoder.remaining()));
            st.wake_reader();
        }
    }
}

impl Body for FastRequestBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let mut st = self.0.lock();
        if let Some(f) = st.ready.pop_front() {
            if let Some(d) = f.data_ref() {
                st.buffered -= d.len();
            }
            if let Some(w) = st.conn.take() {
                w.wake();
            }
            return Poll::Ready(Some(Ok(f)));
        }
        if let Some(e) = st.failed.clone() {
            // Reported once; the body ends after it.
            let first = !std::mem::replace(&mut st.reported, true);
            return Poll::Ready(first.then_some(Err(e)));
        }
        if st.decoder.is_done() {
            return Poll::Ready(None);
        }
        if st.expect == Expect::Waiting {
            st.expect = Expect::Asked;
            if let Some(w) = st.conn.take() {
                w.wake();
            }
        }
        st.reader = Some(cx.waker().clone());
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        let st = self.0.lock();
        st.decoder.is_done() && st.ready.is_empty() && st.failed.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        let st = self.0.lock();
        let buffered = st.buffered as u64;
        match st.decoder.remaining() {
            Some(n) => SizeHint::with_exact(n + buffered),
            None => {
                let mut h = SizeHint::new();
                h.set_lower(buffered);
                h
            }
        }
    }
}

impl Drop for FastRequestBody {
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

#[cfg(test)]
mod tests;
