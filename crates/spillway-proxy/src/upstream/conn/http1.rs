//! An HTTP/1.1 upstream connection, driven by the request that uses it: its socket and buffers,
//! the request on its way out ([`Sending`]) and the exchange up to the response head
//! ([`Exchange`]); the response body (`super::body`) drives it for the rest.
//!
//! Why the request's own task and no task per connection: an HTTP/1.1 connection carries one
//! exchange at a time, so a driver task would only relay — woken to write the request, woken
//! again by the answer, then waking the request's task: three wake-ups where one does. Here the
//! upstream socket's readiness wakes the request's task directly, and only the socket holds the
//! task's waker: nothing the task itself does wakes it again.
//!
//! Why no channel: the framing is the proxy's own ([`crate::http1::client`]), written from and
//! parsed into the `http` types in place, where hyper's client moved each request and response
//! through a channel to its connection and back.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use bytes::BytesMut;
use http::{HeaderMap, Method, Request};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;

use super::io::Io;
use crate::http1::client::{self as codec, Outgoing, ResponseHead, WireError};
use crate::http1::AddedHeaders;
use crate::http1::{NameCache, RawFields};
use crate::read_buffer::ReadBuffer;
use crate::request_body::RequestBody;

mod sending;

pub(super) use sending::Sending;

/// An HTTP/1.1 connection between exchanges. Boxed once per connection, so that the request's
/// future, the response body and the idle list move a pointer.
pub(crate) struct Http1(Box<Conn>);

struct Conn {
    io: Io,
    /// Bytes read and not yet taken: a head being parsed, body bytes.
    read: ReadBuffer,
    /// Heads and chunk framing on their way out (kept for its capacity).
    write: Vec<u8>,
    names: NameCache,
    /// The last request's header map, emptied: the next response's (no allocation and no
    /// freeing of a map per response).
    spare: HeaderMap,
    /// The current response's fields passed through as bytes (`crate::http1::raw`).
    raw: RawFields,
}

/// The largest spare map kept (entries): one grown by a rare huge head is not held for the
/// connection's life.
const SPARE_MAX: usize = 64;

impl Http1 {
    pub(super) fn new(io: Io) -> Self {
        Http1(Box::new(Conn {
            io,
            read: ReadBuffer::new(),
            write: Vec::with_capacity(512),
            names: NameCache::default(),
            spare: HeaderMap::new(),
            raw: RawFields::default(),
        }))
    }

    /// Whether this idle connection can take a request: nothing unread and the upstream has not
    /// closed it. No system call unless the socket has reported readiness since it was last
    /// read to the end (then one non-blocking read tells end of stream from stale readiness).
    pub(super) fn is_reusable(&mut self) -> bool {
        let c = &mut *self.0;
        if !c.read.buf.is_empty() {
            return false;
        }
        with_noop(|cx| c.io.is_quiet(cx))
    }

    /// Whether every byte read has been taken (a connection with more is not reused).
    pub(super) fn read_is_empty(&self) -> bool {
        self.0.read.buf.is_empty()
    }

    /// The connection handed to hyper's client on a task of its own, for a request that may
    /// upgrade it (the upgraded connection outlives the exchange); never reused afterwards.
    pub(super) async fn into_upgrade_sender(
        self,
    ) -> Result<http1::SendRequest<RequestBody>, hyper::Error> {
        // Idle connections have nothing unread (checked at checkout), so nothing is lost.
        let (tx, conn) = http1::handshake(TokioIo::new(self.0.io)).await?;
        tokio::spawn(async move {
            let _ = conn.with_upgrades().await;
        });
        Ok(tx)
    }

    /// Reads what the socket has into the read buffer; `Ok(0)` at end of stream. (Its
    /// readiness is cleared by a short read, so [`Self::is_reusable`] then costs no system
    /// call at checkout: `ReadBuffer`.)
    pub(super) fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let c = &mut *self.0;
        c.read.poll_fill(&mut c.io, cx)
    }

    pub(super) fn read_buf(&mut self) -> &mut BytesMut {
        &mut self.0.read.buf
    }

    /// Parses a response head from what has been read (`Ok(None)`: read more); with `raw`, its
    /// fields may pass through ([`Self::raw_fields`]).
    fn parse_head(
        &mut self,
        method: &Method,
        raw: bool,
    ) -> Result<Option<ResponseHead>, WireError> {
        let c = &mut *self.0;
        let raw = raw.then_some(&mut c.raw);
        codec::parse_response(&mut c.read.buf, method, &mut c.names, &mut c.spare, raw)
    }

    /// Lets go of the memory this connection keeps for its next use while a request waits on
    /// it: the read buffer if empty (the next read goes onto the stack, `ReadBuffer`), the
    /// write buffer unless it holds a head kept for a replay (`keep`), and the spare header
    /// map. Why: in a stall every request waiting for its answer held ~9 KiB here
    /// (bench/stall-memory.py); each is allocated again when the answer comes, once per slow
    /// exchange.
    fn shrink(&mut self, keep: bool) {
        let c = &mut *self.0;
        c.read.release();
        if !keep {
            c.write = Vec::new();
        }
        c.spare = HeaderMap::new();
    }

    /// The current response's fields that pass through as bytes, if its head had any.
    pub(crate) fn raw_fields(&self) -> Option<&RawFields> {
        Some(&self.0.raw).filter(|r| r.is_active())
    }

    /// Forgets the current response's passed-through fields (written, or never to be).
    pub(crate) fn clear_raw_fields(&mut self) {
        self.0.raw.clear();
    }
}

/// What an exchange gave: the response head, the connection for its body, and the request's
/// body when the upstream answered before it was all sent (`None` when it was).
pub(super) struct Exchanged {
    pub(super) head: ResponseHead,
    pub(super) conn: Http1,
    pub(super) sending: Option<Box<Sending>>,
}

/// Writes `req` on `h` and reads until the response head is in. `reused`: `h` carried an
/// exchange before (so the upstream may have closed it just as this one began).
///
/// `raw`: the response's fields may pass through as bytes (the client writes bytes:
/// `crate::http1::raw`).
pub(super) fn exchange(
    mut h: Http1,
    req: Request<RequestBody>,
    reused: bool,
    raw: bool,
    added: &AddedHeaders,
) -> Exchange {
    let c = &mut *h.0;
    c.write.clear();
    let outgoing = codec::encode_request(&req, added, &mut c.write);
    let (mut parts, body) = req.into_parts();
    if parts.headers.capacity() <= SPARE_MAX {
        parts.headers.clear();
        c.spare = std::mem::take(&mut parts.headers);
    }
    let ended = outgoing == Outgoing::Empty;
    // The keep-alive race (RFC 9112 §9.3.1): an upstream closing an idle connection as a
    // request goes out on it. A request that may be sent again automatically — a safe method,
    // no body — keeps its head for that.
    let replayable = reused
        && ended
        && matches!(
            parts.method,
            Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
        );
    Exchange {
        conn: Some(h),
        // An empty body is dropped at once (it holds nothing).
        sending: Sending::new((!ended).then_some(body), outgoing, replayable),
        method: parts.method,
        raw,
        write_error: None,
        replayable,
        answered: false,
        waits: 0,
    }
}

/// Sends again, on `h`, the head of a request that met the keep-alive race ([`Failed::replay`]);
/// never replayed twice.
pub(super) fn replay(mut h: Http1, r: Replay) -> Exchange {
    h.0.write = r.head;
    Exchange {
        conn: Some(h),
        sending: Sending::without_body(false),
        method: r.method,
        raw: r.raw,
        write_error: None,
        replayable: false,
        answered: false,
        waits: 0,
    }
}

/// Why an exchange gave no response head, and the request to send again on another connection
/// when the upstream closed this one before answering any of it and the request may be replayed.
pub(super) struct Failed {
    pub(super) error: WireError,
    pub(super) replay: Option<Replay>,
}

/// A request head written and never answered (see [`exchange`]).
pub(super) struct Replay {
    head: Vec<u8>,
    method: Method,
    raw: bool,
}

impl From<WireError> for Failed {
    fn from(error: WireError) -> Self {
        Failed {
            error,
            replay: None,
        }
    }
}

/// The future of [`exchange`].
pub(super) struct Exchange {
    conn: Option<Http1>,
    sending: Sending,
    method: Method,
    /// The response's fields may pass through as bytes.
    raw: bool,
    /// Writing failed; kept while the upstream may still have answered (it can answer and
    /// close before reading everything), reported if it did not.
    write_error: Option<WireError>,
    replayable: bool,
    /// A byte of the response has been read (the request was answered, if only in part).
    answered: bool,
    /// Polls that found no answer yet (the buffers are let go of at the second).
    waits: u8,
}

impl Exchange {
    /// The failure `error` (or the earlier write error), with the request to replay when the
    /// upstream ended the connection without a byte of answer.
    fn failed(&mut self, error: WireError) -> Failed {
        let error = self.write_error.take().unwrap_or(error);
        let replay = match self.conn.as_mut() {
            Some(c) if self.replayable && !self.answered => Some(Replay {
                head: std::mem::take(&mut c.0.write),
                method: self.method.clone(),
                raw: self.raw,
            }),
            _ => None,
        };
        Failed { error, replay }
    }
}

impl Future for Exchange {
    type Output = Result<Exchanged, Failed>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let Some(conn) = this.conn.as_mut() else {
            return Poll::Ready(Err(WireError::Closed("before the response head").into()));
        };
        if this.write_error.is_none() && !this.sending.done {
            match this.sending.poll_send(conn, cx) {
                // The client's body broke: nothing the upstream could answer.
                Poll::Ready(Err(e @ WireError::RequestBody(_))) => {
                    return Poll::Ready(Err(e.into()))
                }
                Poll::Ready(Err(e)) => this.write_error = Some(e),
                _ => {}
            }
        }
        loop {
            if !conn.read_buf().is_empty() {
                if let Some(head) = conn.parse_head(&this.method, this.raw)? {
                    let Some(conn) = this.conn.take() else {
                        return Poll::Ready(Err(
                            WireError::Closed("before the response head").into()
                        ));
                    };
                    let sending = (!this.sending.done).then(|| {
                        Box::new(std::mem::replace(
                            &mut this.sending,
                            Sending::without_body(true),
                        ))
                    });
                    return Poll::Ready(Ok(Exchanged {
                        head,
                        conn,
                        sending,
                    }));
                }
            }
            let read = match conn.poll_read(cx) {
                Poll::Ready(r) => r,
                Poll::Pending => {
                    this.waits = this.waits.saturating_add(1);
                    if this.waits == 2 && this.sending.done {
                        // A second wake-up with no answer (the client connection's timer,
                        // `progress`): the upstream is slow or stalled, so the buffers
                        // that wait with this request are let go of (`Http1::shrink`).
                        conn.shrink(this.sending.keep);
                    }
                    return Poll::Pending;
                }
            };
            match read {
                Ok(0) => {
                    let e = WireError::Closed("before the response head");
                    return Poll::Ready(Err(this.failed(e)));
                }
                Ok(_) => this.answered = true,
                Err(e) => return Poll::Ready(Err(this.failed(e.into()))),
            }
        }
    }
}

/// Polls with a waker that does nothing: for a look at an idle connection, which no task
/// waits on.
pub(super) fn with_noop<R>(f: impl FnOnce(&mut Context<'_>) -> R) -> R {
    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
        fn wake_by_ref(self: &Arc<Self>) {}
    }
    thread_local! {
        // One per thread: cloning it (tokio's registrations do) touches no shared count.
        static NOOP: Waker = Waker::from(Arc::new(Noop));
    }
    NOOP.with(|w| f(&mut Context::from_waker(w)))
}
