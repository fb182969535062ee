//! The client side's HTTP/1.1 fast path: requests read, handled and answered by the
//! connection's own task, with hyper's server taking over the connection for what the fast
//! path does not serve.
//!
//! Why the proxy's own: with the upstream side on the proxy's own codec, hyper's server was the
//! largest part left of a forwarded request — ~9,000 of its ~31,000 user-space instructions
//! (callgrind, bench/results/proxy-forwarding.md "Thirteenth round"): `hyper_util`'s protocol
//! detection and `Rewind` on every read, the dispatcher's state machine, the request body's
//! channel, a response written through two layers of buffers. A request needs less: parse a
//! head, call the handler, write a head and the body — and, for an upload (a declared length
//! or chunked), decode its bytes for whoever reads it (`crate::request_body::fast`).
//!
//! Why a fast path and not a whole server: what it does not serve — an upgrade, an
//! expectation other than `100-continue`, `CONNECT`, HTTP/2's preface, a transfer coding other
//! than chunked, a malformed or oversized head — hyper's server serves, as it did before, from
//! the first byte the fast path did not consume ([`Prefixed`]): the same answers (400, 431), the
//! same counters, the same body handling. A connection goes over to hyper at a request boundary and stays
//! there. What the fast path keeps of hyper's server behaviour: pipelined requests answered in
//! order; a client that closes its side while its request runs cancels the request (hyper's
//! default, no half-close); a request body read while the answer streams (an upstream may answer
//! before the upload ends); `100 Continue` written when the body is first read, never after the
//! final answer, and the connection closed after an answer that came before the client was
//! invited to send its body; the response framing and keep-alive rules (`codec`); on shutdown, a
//! connection waiting for a request closes, one with a request in progress answers it with
//! `connection: close`.

mod prefixed;
#[cfg(test)]
mod tests;
mod write;

use std::future::Future;
use std::io;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{HeaderMap, Method};
use spillway_tower::wire::Protocol;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

pub use prefixed::Prefixed;

use self::write::write_body;
use crate::body::ResponseBody;
use crate::forward::Peer;
use crate::http1::server::{self as codec, Answering, Parsed, RequestHead};
use crate::http1::NameCache;
use crate::progress::Progress;
use crate::read_buffer::ReadBuffer;
use crate::request_body::fast::{self, Filler, Need};
use crate::request_body::UnreadRequestBody;
use crate::state::ProxyState;

/// Body data up to this size is copied behind the head (one write for both); larger data is
/// written from its own buffer.
const COPY_MAX: usize = 16 * 1024;
/// Buffered output is written out once it reaches this size, even if more body is ready.
const FLUSH_AT: usize = 64 * 1024;
/// The write buffer's first size: a response head and a small body.
const WRITE_FIRST: usize = 1024;
/// The interim answer to `Expect: 100-continue` (always in HTTP/1.1: only 1.1 clients get it).
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// A client connection's settings for the fast path.
#[derive(Debug)]
pub struct Settings {
    /// The proxy.
    pub state: Arc<ProxyState>,
    /// The client.
    pub peer: Peer,
    /// The connection's header-read timer's counts.
    pub progress: Arc<Progress>,
    /// The largest request head (`listen.max_header_bytes`).
    pub max_head: usize,
}

/// What the handler's future gives: always a response (`forward::handle`).
type Answer = Result<http::Response<ResponseBody>, std::convert::Infallible>;

/// How the fast path left a connection.
#[derive(Debug)]
pub enum Served<S> {
    /// Finished: either side closed it, it failed, or the proxy is shutting down.
    Closed,
    /// A request the fast path does not serve: hyper's server takes the connection, the bytes
    /// read and not consumed first.
    HandOff(Prefixed<S>),
}

/// What a connection keeps from one request to the next, let go of while it waits
/// (`Kept::poll_next`, `Kept::poll_answer`).
struct Kept {
    /// What the client sent and the fast path has not consumed yet.
    read: ReadBuffer,
    /// Allocated when an answer is written (`WRITE_FIRST`), let go of when idle.
    write: Vec<u8>,
    /// Header names already seen on the connection, reused.
    names: NameCache,
    /// The last answer's header map, emptied: the next request's (no allocation per request
    /// once it has grown to fit).
    spare: HeaderMap,
    /// The largest request head (`Settings::max_head`): no more is read ahead while a
    /// request runs.
    max_head: usize,
}

/// What waiting for a request's answer carries from one wake-up to the next.
#[derive(Default)]
struct Waiting {
    /// What is left to write of `100 Continue`.
    interim: &'static [u8],
    /// Wake-ups that brought no answer.
    wakes: u32,
}

/// Serves requests on `io` until the connection ends or needs hyper's server; `shutdown` ends
/// it at the next request boundary.
pub async fn serve<S>(mut io: S, set: &Settings, shutdown: &CancellationToken) -> Served<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut kept = Kept::new(set.max_head);
    let mut stop = pin!(shutdown.cancelled());
    loop {
        let head = loop {
            if !kept.read.buf.is_empty() {
                match kept.parse() {
                    Parsed::Request(h) => break h,
                    Parsed::Other => {
                        return Served::HandOff(Prefixed::new(kept.read.buf.freeze(), io))
                    }
                    Parsed::Partial => {}
                }
            }
            // Between requests the connection closes on shutdown; within a head it waits for
            // the rest (the header-read timeout bounds that).
            let idle = kept.read.buf.is_empty();
            let mut wakes = 0u32;
            let got = std::future::poll_fn(|cx| {
                let stop = if idle { Some(stop.as_mut()) } else { None };
                kept.poll_next(&mut io, stop, &mut wakes, cx)
            })
            .await;
            match got {
                Some(Ok(n)) if n > 0 => {}
                // End of stream (a head cut short is dropped, as hyper drops it), a failed
                // socket, or shutdown.
                _ => return Served::Closed,
            }
        };
        let (mut handling, answering, filler) = start(head, set);
        // From the answer to its body's writer in one block that ends before the write's
        // `.await`: a binding still in scope at an `.await` is kept in the connection's
        // future, and the response (336 bytes) and its body were written there twice more per
        // request, into memory cold since the connection's last request (cachegrind with 256
        // connections, bench/results/proxy-forwarding.md "Nineteenth round").
        let keep_alive;
        let mut whole = {
            let mut waiting = Waiting::default();
            let res = std::future::poll_fn(|cx| {
                let filler = filler.as_ref();
                kept.poll_answer(&mut io, handling.as_mut(), filler, &mut waiting, cx)
            })
            .await;
            let Some(res) = res else {
                return Served::Closed;
            };
            let (head, body) =
                kept.encode(res, answering, shutdown, filler.as_ref(), waiting.interim);
            keep_alive = head.keep_alive;
            let feed = filler.as_ref().map(|f| (f, &mut kept.read));
            // Boxed for the reason `start` boxes the handler (its 712 bytes were half of what an idle
            // connection's future kept).
            Box::pin(write_body(&mut io, &mut kept.write, body, head, feed))
        }
        .await;
        if kept.write.capacity() > FLUSH_AT {
            // A large answer's buffer is not kept for the connection's life.
            kept.write = Vec::new();
        }
        if let (Some(f), true) = (&filler, whole && keep_alive) {
            // The rest of the body (if the answer came first) is read before the next request
            // can be: discarded once let go of, within `DISCARD_LIMIT`.
            whole = std::future::poll_fn(|cx| poll_rest(f, &mut io, &mut kept.read, cx)).await;
        }
        if !(whole && keep_alive) {
            let _ = std::future::poll_fn(|cx| Pin::new(&mut io).poll_shutdown(cx)).await;
            return Served::Closed;
        }
    }
}

/// Starts handling `head`'s request: the handler's future, how its answer is to be framed,
/// and the filler of its body when it has one.
///
/// The handler's future is boxed, not pinned in place: it is most of what a connection's
/// task would otherwise hold for its whole life, idle or not (10 KiB a task before,
/// heaptrack; docs/soak.md); one allocation per request instead.
#[inline(always)]
fn start(
    head: RequestHead,
    set: &Settings,
) -> (
    Pin<Box<impl Future<Output = Answer>>>,
    Answering,
    Option<Filler>,
) {
    let RequestHead {
        parts,
        keep_alive,
        trailers,
        body,
        expect_continue,
    } = head;
    let answering = Answering {
        version: parts.version,
        head: parts.method == Method::HEAD,
        keep_alive,
        trailers,
    };
    let busy = set.progress.begin(parts.version);
    let (body, filler) = match body {
        None => (UnreadRequestBody::empty(), None),
        Some(framing) => {
            let (body, filler) = fast::channel(framing, expect_continue);
            let body = UnreadRequestBody::fast(body);
            // gRPC(-Web) streams do not report (`progress::ReportingResponseBody::new` says why).
            let grpc = Protocol::of(&parts.headers) == Protocol::Grpc;
            let body = if grpc {
                body
            } else {
                body.reporting(&set.progress)
            };
            (body, Some(filler))
        }
    };
    let handling = Box::pin(crate::forward::handle(
        set.state.current(),
        Some(set.peer.for_request(busy).writing_bytes()),
        parts,
        body,
        None,
    ));
    (handling, answering, filler)
}

impl Kept {
    fn new(max_head: usize) -> Self {
        Kept {
            read: ReadBuffer::new(),
            write: Vec::new(),
            names: NameCache::default(),
            spare: HeaderMap::new(),
            max_head,
        }
    }

    /// Parses the request head at the start of the read buffer.
    #[inline(always)]
    fn parse(&mut self) -> Parsed {
        let (buf, names, spare) = (&mut self.read.buf, &mut self.names, &mut self.spare);
        codec::parse_request(buf, names, self.max_head, spare)
    }

    /// Reads the client's next bytes; `None` once `stop` (given between requests) resolves.
    #[inline(always)]
    fn poll_next<S: AsyncRead + Unpin>(
        &mut self,
        io: &mut S,
        stop: Option<Pin<&mut WaitForCancellationFuture<'_>>>,
        wakes: &mut u32,
        cx: &mut Context<'_>,
    ) -> Poll<Option<io::Result<usize>>> {
        if let Poll::Ready(r) = self.read.poll_fill(io, cx) {
            return Poll::Ready(Some(r));
        }
        if let Some(stop) = stop {
            if stop.poll(cx).is_ready() {
                return Poll::Ready(None);
            }
            // Between requests the connection holds no read buffer (8 KiB): the next
            // read goes onto the stack and allocates for what came
            // (`ReadBuffer::poll_fill`), so a burst of connections that then sit idle
            // holds little and leaves few holes in the heap (docs/soak.md).
            self.read.release();
            // The write buffer (1 KiB) and the header map kept for the next request
            // are let go of at the second wait, not the first, which every request of
            // a busy keep-alive connection has (the client has not read the answer
            // yet): when a wake-up brought no request — in practice the connection's
            // timer (`progress::watch`, every quarter of the shortest timeout: 2.5 s by
            // default).
            *wakes += 1;
            if *wakes == 2 {
                self.write = Vec::new();
                self.spare = HeaderMap::new();
            }
        }
        Poll::Pending
    }

    /// Polls the request's `handling` for its answer while moving its body (through `filler`)
    /// and reading what the client sends next; `None` when the client left, which cancels
    /// the request.
    #[inline(always)]
    fn poll_answer<S, F>(
        &mut self,
        io: &mut S,
        handling: Pin<&mut F>,
        filler: Option<&Filler>,
        waiting: &mut Waiting,
        cx: &mut Context<'_>,
    ) -> Poll<Option<http::Response<ResponseBody>>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
        F: Future<Output = Answer>,
    {
        if let Poll::Ready(r) = handling.poll(cx) {
            return Poll::Ready(Some(match r {
                Ok(res) => res,
                Err(never) => match never {},
            }));
        }
        // While the request runs, its body is read as its reader takes it (the client
        // invited first, if it waits to be); the client leaving before the body's end
        // cancels the request.
        if let Some(f) = filler {
            if f.take_continue() {
                waiting.interim = CONTINUE;
            }
            while !waiting.interim.is_empty() {
                match Pin::new(&mut *io).poll_write(cx, waiting.interim) {
                    Poll::Ready(Ok(0) | Err(_)) => return Poll::Ready(None),
                    Poll::Ready(Ok(n)) => waiting.interim = &waiting.interim[n..],
                    Poll::Pending => break,
                }
            }
            match poll_feed(f, io, &mut self.read, cx) {
                Err(()) => return Poll::Ready(None),
                Ok(Need::Done) => {}
                // What follows in `read` is body, not another request.
                Ok(_) => return Poll::Pending,
            }
        }
        // Then the client's next bytes are read (pipelining), and its closing the
        // connection cancels the request.
        while self.read.buf.len() < self.max_head {
            match self.read.poll_fill(io, cx) {
                Poll::Ready(Ok(0) | Err(_)) => return Poll::Ready(None),
                Poll::Ready(Ok(_)) => {}
                Poll::Pending => break,
            }
        }
        // A second wake-up with no answer (in practice the connection's timer): the
        // request waits (queued, or on a slow upstream), so what the connection keeps
        // for its next request is let go of, as between requests — the read buffer
        // (when no body streams through it) and the last answer's write buffer.
        waiting.wakes += 1;
        if waiting.wakes == 2 {
            if filler.is_none() {
                self.read.release();
            }
            self.write = Vec::new();
        }
        Poll::Pending
    }

    /// Writes `res`'s head into the write buffer, after the rest of a `100 Continue` already
    /// begun (`interim`); how its body follows, and the body. The answer's header map is kept
    /// for the next request.
    #[inline(always)]
    fn encode(
        &mut self,
        res: http::Response<ResponseBody>,
        mut answering: Answering,
        shutdown: &CancellationToken,
        filler: Option<&Filler>,
        interim: &[u8],
    ) -> (codec::Head, ResponseBody) {
        // Shutting down: this answer is the connection's last; so is one whose client may
        // still be waiting to be invited to send its body.
        answering.keep_alive &= !shutdown.is_cancelled();
        if let Some(f) = filler {
            answering.keep_alive &= f.answering();
        }
        self.write.reserve(WRITE_FIRST);
        self.write.extend_from_slice(interim);
        let raw = res.body().raw_fields();
        let head = codec::encode_response(&res, raw, answering, &mut self.write);
        let (parts, mut body) = res.into_parts();
        body.clear_raw_fields();
        self.spare = parts.headers;
        self.spare.clear();
        (head, body)
    }
}

/// Moves the request body from the client to its reader as far as the reader has room;
/// `Err` when the client's side ended first (the body then fails).
fn poll_feed<S: AsyncRead + Unpin>(
    filler: &Filler,
    io: &mut S,
    read: &mut ReadBuffer,
    cx: &mut Context<'_>,
) -> Result<Need, ()> {
    loop {
        match filler.take_from(&mut read.buf, cx) {
            Need::Read => match read.poll_fill(io, cx) {
                Poll::Ready(Ok(0) | Err(_)) => {
                    filler.cut();
                    return Err(());
                }
                Poll::Ready(Ok(_)) => {}
                Poll::Pending => return Ok(Need::Read),
            },
            need => return Ok(need),
        }
    }
}

/// Reads the rest of the request body after its answer; whether it came whole.
fn poll_rest<S: AsyncRead + Unpin>(
    filler: &Filler,
    io: &mut S,
    read: &mut ReadBuffer,
    cx: &mut Context<'_>,
) -> Poll<bool> {
    match poll_feed(filler, io, read, cx) {
        Ok(Need::Done) => Poll::Ready(true),
        Err(()) | Ok(Need::GiveUp) => Poll::Ready(false),
        Ok(_) => Poll::Pending,
    }
}
