//! The header-read timeout on tokio's paused clock (no real waiting, no timing assertions on the
//! host's speed): a connection future that never ends stands for a client that sends nothing
//! more.

use std::future::{pending, Future};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use std::task::Poll;

use std::pin::Pin;

use bytes::Bytes;
use http_body::Body;

use super::{
    watch, ActiveRequest, Ended, IdlePressure, Progress, ReportingResponseBody, Timeouts, Watched,
};
use crate::body::full_body;

/// [`watch`] with nothing counted and never overloaded.
async fn watch_plain<F: Future>(
    conn: F,
    progress: &Progress,
    limits: Timeouts,
    slots: &Semaphore,
) -> Ended<F::Output> {
    watch(conn, progress, limits, slots, |_| {}, |_| false).await
}

const T: Duration = Duration::from_millis(1_000);

/// Both limits `T`.
const SAME: Timeouts = Timeouts {
    header: T,
    idle: T,
    send: T,
    body: T,
    upstream_body: T,
    idle_pressure: IdlePressure::OFF,
};

/// A connection cap with slots to spare.
static ROOM: Semaphore = Semaphore::const_new(8);

/// Runs the watch over a connection that never ends; returns how it ended and after how long.
async fn cut(progress: &Progress) -> (Ended<()>, Duration) {
    cut_with(progress, SAME, &ROOM).await
}

async fn cut_with(
    progress: &Progress,
    limits: Timeouts,
    slots: &Semaphore,
) -> (Ended<()>, Duration) {
    let start = Instant::now();
    let ended = watch_plain(pending::<()>(), progress, limits, slots).await;
    (ended, start.elapsed())
}

/// The watch ended by cutting a connection it counted, within 1–1.25 timeouts.
fn cut_and_counted((ended, after): (Ended<()>, Duration)) {
    assert_eq!(ended, Ended::TimedOut { counted: true });
    assert!(after >= T && after <= T + T / 4, "{after:?}");
}

#[tokio::test(start_paused = true)]
async fn a_connection_that_sends_nothing_is_cut_at_the_timeout_and_counted() {
    let p = Progress::default();
    cut_and_counted(cut(&p).await);
}

#[tokio::test(start_paused = true)]
async fn a_stalled_head_after_a_request_is_cut_and_counted() {
    let p = Arc::new(Progress::default());
    drop(p.begin(http::Version::HTTP_11)); // one request, answered
    p.read.store(true, Relaxed); // part of the next head arrived
    cut_and_counted(cut(&p).await);
}

#[tokio::test(start_paused = true)]
async fn an_idle_keep_alive_connection_is_closed_uncounted() {
    let p = Arc::new(Progress::default());
    drop(p.begin(http::Version::HTTP_11));
    let (ended, _) = cut(&p).await;
    assert_eq!(ended, Ended::TimedOut { counted: false });
}

#[tokio::test(start_paused = true)]
async fn a_request_in_progress_is_never_cut_and_the_wait_restarts_when_it_ends() {
    let p = Arc::new(Progress::default());
    let busy = p.begin(http::Version::HTTP_11);
    let start = Instant::now();
    let released = async {
        tokio::time::sleep(T * 10).await;
        drop(busy);
        Instant::now()
    };
    let (ended, released) = tokio::join!(watch_plain(pending::<()>(), &p, SAME, &ROOM), released);
    let after = Instant::now() - released;
    assert_eq!(ended, Ended::TimedOut { counted: false });
    assert!(released - start >= T * 10);
    assert!(
        after >= T && after <= T + T / 4,
        "{after:?} after the response ended"
    );
}

#[tokio::test(start_paused = true)]
async fn heads_arriving_keep_the_connection_open() {
    let p = Arc::new(Progress::default());
    let requests = async {
        for _ in 0..40 {
            drop(p.begin(http::Version::HTTP_11));
            tokio::time::sleep(T / 2).await;
        }
    };
    tokio::select! {
        e = watch_plain(pending::<()>(), &p, SAME, &ROOM) => panic!("cut while requests arrived: {e:?}"),
        () = requests => {}
    }
}

#[tokio::test(start_paused = true)]
async fn the_connection_future_ends_the_watch() {
    let p = Progress::default();
    let conn = async {
        tokio::time::sleep(T / 2).await;
        7
    };
    assert_eq!(watch_plain(conn, &p, SAME, &ROOM).await, Ended::Done(7));
}

#[tokio::test(start_paused = true)]
async fn an_http2_preface_without_a_request_is_cut_and_counted() {
    let p = Arc::new(Progress::default());
    let mut s = Watched::new(&b"PRI * HTTP/2.0\r\n"[..], Arc::clone(&p));
    let mut buf = [0u8; 64];
    assert!(s.read(&mut buf).await.unwrap() > 0);
    cut_and_counted(cut(&p).await);
}

#[tokio::test(start_paused = true)]
async fn an_idle_http2_connection_is_closed_gracefully_a_busy_one_never() {
    let p = Arc::new(Progress::default());
    p.h2.store(true, Relaxed);
    // A stream open for ten timeouts (a long gRPC stream) is never cut…
    let busy = p.begin(http::Version::HTTP_2);
    let released = async {
        tokio::time::sleep(T * 10).await;
        drop(busy);
        p.read.store(true, Relaxed); // a PING or WINDOW_UPDATE since: not a head
        Instant::now()
    };
    // …and once none is open for the timeout the connection is asked to close (its server
    // sends GOAWAY and ends), not dropped.
    let conn = async {
        p.close.notified().await;
        "closed gracefully"
    };
    // Its own idle timeout, here three header timeouts.
    let limits = long_but(|l| l.idle = T * 3);
    let (ended, released) = tokio::join!(watch_plain(conn, &p, limits, &ROOM), released);
    assert_eq!(ended, Ended::Done("closed gracefully"));
    let after = Instant::now() - released;
    assert!(after >= T * 3 && after <= T * 3 + T / 4, "{after:?}");
}

#[tokio::test(start_paused = true)]
async fn a_kept_alive_connection_waits_for_its_idle_timeout_not_the_header_timeout() {
    let p = Arc::new(Progress::default());
    drop(p.begin(http::Version::HTTP_11));
    let limits = long_but(|l| l.idle = T * 6);
    let (ended, after) = cut_with(&p, limits, &ROOM).await;
    assert_eq!(ended, Ended::TimedOut { counted: false });
    assert!(after >= T * 6 && after <= T * 6 + T / 4, "{after:?}");
}

#[tokio::test(start_paused = true)]
async fn the_next_heads_time_starts_at_its_first_bytes() {
    let p = Arc::new(Progress::default());
    drop(p.begin(http::Version::HTTP_11));
    let limits = long_but(|l| l.idle = T * 6);
    // Idle for four header timeouts, then part of a head that never ends.
    let start = Instant::now();
    let partial = async {
        tokio::time::sleep(T * 4).await;
        p.read.store(true, Relaxed);
    };
    let (ended, ()) = tokio::join!(watch_plain(pending::<()>(), &p, limits, &ROOM), partial);
    let after = start.elapsed() - T * 4;
    assert_eq!(ended, Ended::TimedOut { counted: true });
    assert!(
        after >= T && after <= T + T / 4,
        "{after:?} after the head began"
    );
}

#[tokio::test(start_paused = true)]
async fn at_the_connection_cap_an_idle_connection_gives_its_slot_up_a_slow_head_does_not() {
    let full = Semaphore::new(0);
    let limits = long_but(|l| l.send = T);
    // Between requests: closed at the first check, long before its idle timeout.
    let p = Arc::new(Progress::default());
    drop(p.begin(http::Version::HTTP_11));
    let (ended, after) = cut_with(&p, limits, &full).await;
    assert_eq!(ended, Ended::TimedOut { counted: false });
    assert!(after <= T / 4, "{after:?}");
    // An idle HTTP/2 connection: asked to close gracefully.
    let p = Arc::new(Progress::default());
    drop(p.begin(http::Version::HTTP_2));
    let conn = async {
        p.close.notified().await;
        "closed gracefully"
    };
    let ended = watch_plain(conn, &p, limits, &full).await;
    assert_eq!(ended, Ended::Done("closed gracefully"));
    // A head under way, or a first one, keeps its header timeout: the cap reclaims only idle
    // connections, never one whose client is sending a request.
    let p = Arc::new(Progress::default());
    drop(p.begin(http::Version::HTTP_11));
    p.read.store(true, Relaxed);
    cut_and_counted(cut_with(&p, limits, &full).await);
    cut_and_counted(cut_with(&Progress::default(), limits, &full).await);
    // With a slot free the same idle connection is left to its idle timeout.
    let p = Arc::new(Progress::default());
    drop(p.begin(http::Version::HTTP_11));
    let (_, after) = cut_with(&p, limits, &ROOM).await;
    assert!(after >= T * 60, "{after:?}");
}

/// An idle timeout of 60 `T` scaled down to `T` from half of a cap of 8 connections.
fn pressured() -> Timeouts {
    long_but(|l| l.idle_pressure = IdlePressure::new(T, 50, 8))
}

async fn idle_for(p: &Progress, slots: &Semaphore, overloaded: bool) -> (Ended<()>, Duration) {
    let start = Instant::now();
    let conn = async {
        p.close.notified().await;
    };
    let ended = watch(conn, p, pressured(), slots, |_| {}, |_| overloaded).await;
    (ended, start.elapsed())
}

#[tokio::test(start_paused = true)]
async fn overloaded_an_idle_keep_alive_connection_goes_at_the_minimum_idle_timeout() {
    let p = Arc::new(Progress::default());
    drop(p.begin(http::Version::HTTP_11));
    let (ended, after) = idle_for(&p, &ROOM, true).await;
    assert_eq!(ended, Ended::TimedOut { counted: false });
    assert!(after >= T && after <= T + T / 4, "{after:?}");
    // Not overloaded, with few connections open: the configured idle timeout.
    let p = Arc::new(Progress::default());
    drop(p.begin(http::Version::HTTP_11));
    let (_, after) = idle_for(&p, &ROOM, false).await;
    assert!(after >= T * 60 && after <= T * 60 + T / 4, "{after:?}");
}

#[tokio::test(start_paused = true)]
async fn with_three_quarters_of_the_cap_open_the_idle_timeout_is_halfway_down() {
    // 6 of 8 open: halfway from 4 (50%) to 8, so halfway from 60 T to T.
    let two_left = Semaphore::new(2);
    let p = Arc::new(Progress::default());
    drop(p.begin(http::Version::HTTP_11));
    let (ended, after) = idle_for(&p, &two_left, false).await;
    assert_eq!(ended, Ended::TimedOut { counted: false });
    let half = T + T * 59 / 2;
    assert!(after >= half && after <= half + T / 4, "{after:?}");
}

#[tokio::test(start_paused = true)]
async fn pressure_shortens_neither_http2_idle_nor_a_head_under_way_nor_a_request() {
    // HTTP/2: one connection per client, its idle timeout stays (then a graceful close).
    let p = Arc::new(Progress::default());
    drop(p.begin(http::Version::HTTP_2));
    let (ended, after) = idle_for(&p, &ROOM, true).await;
    assert_eq!(ended, Ended::Done(()));
    assert!(after >= T * 60, "{after:?}");
    // A head under way keeps its header timeout and is counted.
    let p = Arc::new(Progress::default());
    drop(p.begin(http::Version::HTTP_11));
    p.read.store(true, Relaxed);
    let (ended, after) = idle_for(&p, &ROOM, true).await;
    assert_eq!(ended, Ended::TimedOut { counted: true });
    assert!(after >= T, "{after:?}");
    // A request in progress is never cut by it.
    let p = Arc::new(Progress::default());
    let busy = p.begin(http::Version::HTTP_11);
    let limits = pressured();
    let watched = watch(pending::<()>(), &p, limits, &ROOM, |_| {}, |_| true);
    let out = tokio::time::timeout(T * 30, watched).await;
    assert!(out.is_err(), "a busy connection was cut");
    drop(busy);
}

/// The header timeout `T`, every other limit a minute of them, but for what `set` changes.
fn long_but(set: impl FnOnce(&mut Timeouts)) -> Timeouts {
    let mut l = Timeouts {
        header: T,
        idle: T * 60,
        send: T * 60,
        body: T * 60,
        upstream_body: T * 60,
        idle_pressure: IdlePressure::OFF,
    };
    set(&mut l);
    l
}

/// Watches a connection that never ends until a stall rule cuts it (failing after 100 `T`
/// rather than hanging); how it ended and after how long.
async fn stalled_out(p: &Progress, limits: Timeouts) -> (Ended<()>, Duration) {
    let start = Instant::now();
    let ended = tokio::time::timeout(T * 100, watch_plain(pending::<()>(), p, limits, &ROOM))
        .await
        .expect("cut, not held for ever");
    (ended, start.elapsed())
}

/// Fails if the watch ends while `activity` (a peer moving, or just time) runs.
async fn not_cut_during(p: &Progress, limits: Timeouts, activity: impl Future<Output = ()>) {
    tokio::select! {
        e = watch_plain(pending::<()>(), p, limits, &ROOM) => panic!("cut: {e:?}"),
        () = activity => {}
    }
}

/// A request in progress whose response the client takes nothing of: the socket full, no
/// write taken since.
fn stalled(p: &Arc<Progress>) -> ActiveRequest {
    let busy = p.begin(http::Version::HTTP_11);
    p.write_blocked.store(true, Relaxed);
    busy
}

#[tokio::test(start_paused = true)]
async fn a_response_the_client_takes_nothing_of_is_cut_at_the_send_timeout() {
    let p = Arc::new(Progress::default());
    let _busy = stalled(&p);
    let limits = long_but(|l| l.send = T * 3);
    let (ended, after) = stalled_out(&p, limits).await;
    assert_eq!(ended, Ended::SendStalled);
    assert!(after >= T * 3 && after <= T * 3 + T / 4, "{after:?}");
}

#[tokio::test(start_paused = true)]
async fn a_slow_reader_that_takes_something_now_and_then_is_never_cut() {
    let p = Arc::new(Progress::default());
    let _busy = stalled(&p);
    let limits = long_but(|l| l.send = T * 3);
    // A write taken every two timeouts' worth of checks, then blocked again.
    let reader = async {
        for _ in 0..20 {
            tokio::time::sleep(T * 2).await;
            p.wrote(&Poll::Ready(Ok(1)));
            p.wrote(&Poll::Pending);
        }
    };
    not_cut_during(&p, limits, reader).await;
}

#[tokio::test(start_paused = true)]
async fn a_body_whose_data_hyper_holds_with_nothing_written_is_cut() {
    // HTTP/2 without credit: the socket is not full, but a body handed over data and was not
    // asked for more, and nothing was written since.
    let p = Arc::new(Progress::default());
    let _busy = p.begin(http::Version::HTTP_2);
    let mut body =
        ReportingResponseBody::new(full_body(Bytes::from_static(b"data")), Some(Arc::clone(&p)));
    let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
    assert!(frame.is_some_and(|f| f.is_ok_and(|f| f.is_data())));
    let limits = long_but(|l| l.send = T * 2);
    let (ended, _) = stalled_out(&p, limits).await;
    assert_eq!(ended, Ended::SendStalled);
    // Asked for more (or dropped), the body holds nothing.
    drop(body);
    assert_eq!(p.holding.load(Relaxed), 0);
}

#[tokio::test(start_paused = true)]
async fn a_request_body_the_client_stops_sending_is_cut_at_the_body_read_timeout() {
    let p = Arc::new(Progress::default());
    let _busy = p.begin(http::Version::HTTP_11);
    p.body_wait(true); // the upstream asked for more; nothing came
    let limits = long_but(|l| l.body = T * 2);
    let (ended, after) = stalled_out(&p, limits).await;
    assert_eq!(ended, Ended::BodyStalled);
    assert!(after >= T * 2 && after <= T * 2 + T / 4, "{after:?}");
}

#[tokio::test(start_paused = true)]
async fn a_request_body_that_keeps_coming_slowly_is_never_cut() {
    let p = Arc::new(Progress::default());
    let _busy = p.begin(http::Version::HTTP_11);
    p.body_wait(true);
    let limits = long_but(|l| l.body = T * 2);
    let sender = async {
        for _ in 0..30 {
            tokio::time::sleep(T).await;
            p.body_came();
        }
    };
    not_cut_during(&p, limits, sender).await;
}

#[tokio::test(start_paused = true)]
async fn a_response_body_its_upstream_stops_sending_is_cut_and_says_so() {
    let p = Arc::new(Progress::default());
    let _busy = p.begin(http::Version::HTTP_11);
    p.upstream_wait(true);
    let limits = long_but(|l| l.upstream_body = T * 3);
    let (ended, after) = stalled_out(&p, limits).await;
    assert_eq!(ended, Ended::UpstreamStalled);
    assert!(after >= T * 3 && after <= T * 3 + T / 4, "{after:?}");
    assert!(
        p.upstream_stalled.load(Relaxed),
        "the response's guard learns why"
    );
}

#[tokio::test(start_paused = true)]
async fn a_response_with_nothing_to_send_is_never_cut() {
    // A long poll or a quiet stream: in progress, nothing pending, so nothing blocked.
    let p = Arc::new(Progress::default());
    let _busy = p.begin(http::Version::HTTP_11);
    p.wrote(&Poll::Ready(Ok(10)));
    let limits = long_but(|l| l.send = T);
    not_cut_during(&p, limits, tokio::time::sleep(T * 100)).await;
}

#[tokio::test]
async fn the_stream_reports_reads_and_the_http2_preface() {
    let p = Arc::new(Progress::default());
    let mut s = Watched::new(&b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..], Arc::clone(&p));
    let mut buf = [0u8; 64];
    assert_eq!(s.read(&mut buf).await.unwrap(), 24);
    assert!(p.h2.load(Relaxed) && p.read.load(Relaxed));

    let p = Arc::new(Progress::default());
    let mut s = Watched::new(&b"GET / HTTP/1.1\r\n"[..], Arc::clone(&p));
    assert!(s.read(&mut buf).await.unwrap() > 0);
    assert!(!p.h2.load(Relaxed) && p.read.load(Relaxed));
    drop(p.begin(http::Version::HTTP_11));
    assert!(
        !p.read.load(Relaxed),
        "a request's end clears the partial-head mark"
    );
}
