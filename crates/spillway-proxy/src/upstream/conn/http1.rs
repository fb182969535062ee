//! An HTTP/1.1 upstream connection driven by the request that uses it, and the idle lists that
//! keep such connections between requests.
//!
//! Why not a task per connection (hyper's usual way, and this proxy's until the fifth round of
//! issue #4): an HTTP/1.1 connection carries one exchange at a time, so a driver task only
//! relays. A request was put on a channel to that task, the task was woken to write it, woken
//! again by the upstream's answer, parsed it and woke the request's task through a oneshot; the
//! response body crossed another channel the same way. Here the request's own task polls the
//! connection (`hyper::client::conn::http1::Connection` is a future) next to its response
//! future until the head is in, and its response body polls the connection for the rest: the
//! upstream socket's readiness wakes the request's task directly, one task poll instead of two
//! per event (bench/results/proxy-forwarding.md, fifth round).
//!
//! The response future and the response body are polled with a no-op waker: they are only
//! ever completed by the connection's dispatcher, inside `Connection::poll`, which this module
//! calls just before. The connection itself is polled with the no-op waker first and with the
//! task's waker only when the task must wait ([`drive`]): whatever it registers the task's
//! waker with (its socket, the response body's channel) would otherwise wake the running task
//! when the task takes what the connection delivered, and a task woken while it runs is polled
//! again (callgrind: 3.03 task polls per request that way, 2.03 with [`drive`]).
//!
//! A connection nobody polls cannot notice on its own that the upstream closed it or that it
//! has been idle too long, so the idle lists do it: a peer-closed connection is found by the
//! first poll after checkout (hyper's dispatcher reads EOF before it writes, and hands the
//! unsent request back, which `super::Connections::send` sends on another connection), and one
//! sweeper task per thread (running only while that thread has idle connections) closes the
//! connections idle for `idle_timeout_ms`, and those it finds ended, at each expiry and at
//! least once a second ([`TICK`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{ready, Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper::client::conn::TrySendError;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::Multiplexed;
use crate::upstream::ProxyBody;

type Conn = http1::Connection<TokioIo<TcpStream>, ProxyBody>;

/// An HTTP/1.1 connection: the handle requests are sent with and the connection itself, which
/// whoever holds this polls. Boxed once per connection: the connection (buffers, state) is
/// large and moves between the idle list, the send future and the response body.
pub(crate) struct Http1 {
    pub(super) tx: http1::SendRequest<ProxyBody>,
    conn: Box<Conn>,
}

impl Http1 {
    pub(super) fn new(tx: http1::SendRequest<ProxyBody>, conn: Conn) -> Self {
        Http1 {
            tx,
            conn: Box::new(conn),
        }
    }

    /// Polls the connection (writes the request and its body, reads the response). `Ready`
    /// when it has ended (closed by either side, or broken).
    pub(super) fn poll_conn(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut *self.conn).poll(cx).map(|_| ())
    }

    /// Lets the connection finish an exchange whose response body has ended (it then waits
    /// for the next request) and says whether it can take one.
    pub(super) fn settle(&mut self) -> bool {
        // Usually it already is (the dispatcher asks for the next request in the poll that
        // reads the body's end): no poll then.
        let ready = self.tx.is_ready()
            || (with_noop(|cx| self.poll_conn(cx)).is_pending() && self.tx.is_ready());
        ready && !self.is_closed()
    }

    pub(super) fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// The connection on its own task, for a request that may upgrade it (the upgraded
    /// connection outlives the exchange); never reused afterwards.
    pub(super) fn spawn_for_upgrade(self) -> http1::SendRequest<ProxyBody> {
        let Http1 { tx, conn } = self;
        tokio::spawn(async move {
            let _ = (*conn).with_upgrades().await;
        });
        tx
    }
}

/// What one exchange on a connection gave: the response head (or why not), and the connection
/// if it is still open.
pub(super) struct Exchanged {
    pub(super) result: Result<Response<Incoming>, Failed>,
    pub(super) conn: Option<Http1>,
}

/// Why an exchange gave no response head.
// Returned once per failed exchange, never stored: boxing the request would cost an allocation.
#[allow(clippy::large_enum_variant)]
pub(super) enum Failed {
    /// hyper's error, with the request when it was never sent.
    Send(TrySendError<Request<ProxyBody>>),
    /// The connection ended without answering (hyper answers first; kept rather than a hang).
    Ended,
}

/// Sends `req` on `h` and drives the connection until the response head is in.
///
/// The request goes into hyper's queue here; the future ([`Exchange`]) is written out rather
/// than an `async` block, which would keep a second copy of hyper's send future (and the
/// request in it) in its state: 2,120 against 1,592 bytes for `Connections::send`'s future.
pub(super) fn exchange(
    mut h: Http1,
    req: Request<ProxyBody>,
) -> Exchange<impl Future<Output = Result<Response<Incoming>, SendError>>> {
    let pending = h.tx.try_send_request(req);
    Exchange {
        pending,
        conn: Some(h),
        polled: false,
    }
}

type SendError = TrySendError<Request<ProxyBody>>;

pin_project_lite::pin_project! {
    /// The future of [`exchange`].
    pub(super) struct Exchange<F> {
        #[pin]
        pending: F,
        conn: Option<Http1>,
        // The first poll writes the request and cannot yet have an answer to read: the task's
        // waker at once (one connection poll instead of two; see `drive`).
        polled: bool,
    }
}

impl<F: Future<Output = Result<Response<Incoming>, SendError>>> Future for Exchange<F> {
    type Output = Exchanged;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Exchanged> {
        let this = self.project();
        let mut pending = this.pending;
        let waker_first = !std::mem::replace(this.polled, true);
        let result = ready!(drive(this.conn, cx, waker_first, |ended| {
            match with_noop(|n| pending.as_mut().poll(n)) {
                Poll::Ready(r) => Poll::Ready(r.map_err(Failed::Send)),
                Poll::Pending if ended => Poll::Ready(Err(Failed::Ended)),
                Poll::Pending => Poll::Pending,
            }
        }));
        Poll::Ready(Exchanged {
            result,
            conn: this.conn.take(),
        })
    }
}

/// Drives `conn` until `check` (which polls what the connection completes, with the no-op
/// waker; its argument: the connection has ended) is ready: first with the no-op waker, and
/// only when that is not enough, once more with the task's waker so that the socket wakes the
/// task (`waker_first`: at once with the task's waker, when nothing can have arrived yet).
///
/// Why not the task's waker at once: whatever the connection registers it with is woken when
/// the task then takes what the connection delivered — hyper's body channel wakes its writer
/// on every chunk read — and a task woken while it runs is polled again: a whole extra poll of
/// the client's connection per request (callgrind, bench/results/proxy-forwarding.md fifth
/// round: 3.03 task polls per request instead of 2.03). A connection that ends is dropped
/// (which answers a request still waiting on it with an error).
pub(super) fn drive<R>(
    conn: &mut Option<Http1>,
    cx: &mut Context<'_>,
    waker_first: bool,
    mut check: impl FnMut(bool) -> Poll<R>,
) -> Poll<R> {
    if !waker_first {
        if conn
            .as_mut()
            .is_some_and(|c| with_noop(|n| c.poll_conn(n)).is_ready())
        {
            *conn = None;
        }
        if let Poll::Ready(r) = check(conn.is_none()) {
            return Poll::Ready(r);
        }
    }
    if conn.as_mut().is_some_and(|c| c.poll_conn(cx).is_ready()) {
        *conn = None;
    }
    let r = check(conn.is_none());
    if r.is_ready()
        && conn
            .as_mut()
            .is_some_and(|c| with_noop(|n| c.poll_conn(n)).is_ready())
    {
        // Rare (the answer came in between): the task's waker replaced, as above.
        *conn = None;
    }
    r
}

/// Polls with a waker that does nothing (see the module doc for when that is right).
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

struct Idle {
    h: Http1,
    since: Instant,
}

/// One thread's connections, indexed by task, with the limits that apply to them.
pub(super) struct Local {
    http1: Vec<Vec<Idle>>,
    pub(super) http2: Vec<Option<Multiplexed>>,
    max_idle: usize,
    idle_timeout: Duration,
    sweeping: bool,
}

/// One thread's [`Local`], shared with its sweeper and with response bodies that put
/// connections back (a lock nobody else takes on the thread-per-core runtime).
pub(crate) type Home = Arc<Mutex<Local>>;

pub(super) fn home(tasks: usize, max_idle: usize, idle_timeout: Duration) -> Home {
    Arc::new(Mutex::new(Local {
        http1: (0..tasks).map(|_| Vec::new()).collect(),
        http2: (0..tasks).map(|_| None).collect(),
        max_idle,
        idle_timeout,
        sweeping: false,
    }))
}

pub(super) fn lock(home: &Home) -> MutexGuard<'_, Local> {
    // Nothing here panics while holding it; a poisoned list is still a list.
    home.lock().unwrap_or_else(|p| p.into_inner())
}

impl Local {
    /// Idle HTTP/1.1 connections to `task`.
    pub(super) fn idle(&self, task: usize) -> usize {
        self.http1.get(task).map_or(0, Vec::len)
    }

    /// The most recently used connection that can take a request (LIFO: the warmest, and the
    /// older ones age out under the idle timeout when traffic falls). Closed ones are dropped.
    pub(super) fn checkout(&mut self, task: usize) -> Option<Http1> {
        let list = self.http1.get_mut(task)?;
        while let Some(i) = list.pop() {
            if i.h.tx.is_ready() && !i.h.is_closed() {
                return Some(i.h);
            }
        }
        None
    }
}

/// Puts a connection whose exchange is complete back on `home`'s idle list for `task` (drops
/// it, which closes it, when the list is full of live connections or when no runtime could run
/// the sweeper that would close it later).
pub(super) fn put_back(home: &Home, task: usize, mut h: Http1) {
    if !h.settle() {
        return;
    }
    let mut l = lock(home);
    let spawn = if l.sweeping {
        None
    } else {
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => Some(rt),
            Err(_) => return,
        }
    };
    let max = l.max_idle;
    let Some(list) = l.http1.get_mut(task) else {
        return;
    };
    if list.len() >= max {
        // Connections the upstream closed make room first.
        list.retain(|i| !i.h.is_closed());
    }
    if list.len() >= max {
        return;
    }
    list.push(Idle {
        h,
        since: Instant::now(),
    });
    if let Some(rt) = spawn {
        l.sweeping = true;
        let idle = l.idle_timeout;
        drop(l);
        rt.spawn(sweep(Arc::clone(home), idle));
    }
}

/// The sweeper's longest sleep.
///
/// Why a tick and not only the next expiry: a peer-closed idle connection is closed within a
/// second instead of at its idle timeout; and while a thread has idle connections (it does
/// whenever it carries traffic) a timer at most this far ahead keeps tokio's time driver from
/// waking its own thread for each per-request timer — hyper's header-read timer (10 s) and the
/// request timeout (30 s) were the earliest deadline whenever the wheel had no other, and
/// registering a timer earlier than the driver's next wake unparks the driver, an eventfd
/// `write` and an early `epoll_wait` return (tokio 1.54 `runtime/time/mod.rs`, `reregister`:
/// `when < next_wake` → `unpark`; 0.21–0.27 such writes per request, fourth round's strace).
const TICK: Duration = Duration::from_secs(1);

/// Closes `home`'s connections idle for `idle` or found ended, at each expiry and at least
/// every [`TICK`], until none is left (a later `put_back` starts it again) or the pool is gone.
async fn sweep(home: Home, idle: Duration) {
    loop {
        let next = {
            let mut l = lock(&home);
            // Only this task still holds the list: the pool was replaced or dropped.
            let orphan = Arc::strong_count(&home) == 1;
            let now = Instant::now();
            let mut oldest: Option<Instant> = None;
            for list in &mut l.http1 {
                if orphan {
                    list.clear();
                    continue;
                }
                // Oldest first: entries are pushed as they become idle.
                let expired = list
                    .iter()
                    .take_while(|i| now.saturating_duration_since(i.since) >= idle)
                    .count();
                list.drain(..expired);
                list.retain_mut(|i| with_noop(|cx| i.h.poll_conn(cx)).is_pending());
                if let Some(first) = list.first() {
                    oldest = Some(oldest.map_or(first.since, |o| o.min(first.since)));
                }
            }
            match oldest {
                Some(o) => (o + idle).min(now + TICK),
                None => {
                    l.sweeping = false;
                    return;
                }
            }
        };
        tokio::time::sleep_until(next.into()).await;
    }
}
