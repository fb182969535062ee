//! The fast path's request body channel on bytes and wakers: what the connection's task takes
//! from its read buffer, when each side is woken, and how a cut or invalid body ends.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use bytes::BytesMut;
use http_body::Body;

use super::{channel, BodyError, Need, BUFFERED, DISCARD_LIMIT};
use crate::http1::Framing;

/// A waker that counts its wakes.
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

fn waker() -> (Arc<Count>, Waker) {
    let c = Arc::new(Count(AtomicUsize::new(0)));
    (Arc::clone(&c), Waker::from(c))
}

#[test]
fn bytes_move_from_the_connection_to_the_reader_and_the_rest_stays() {
    let (mut body, filler) = channel(Framing::Length(5), false);
    let (reader_wakes, rw) = waker();
    let (_, cw) = waker();
    let mut rcx = Context::from_waker(&rw);
    let mut ccx = Context::from_waker(&cw);
    assert_eq!(body.size_hint().exact(), Some(5));
    assert!(Pin::new(&mut body).poll_frame(&mut rcx).is_pending());

    let mut read = BytesMut::from(&b"hel"[..]);
    assert_eq!(filler.take_from(&mut read, &mut ccx), Need::Read);
    assert_eq!(
        reader_wakes.0.load(SeqCst),
        1,
        "the waiting reader is woken"
    );
    let mut read = BytesMut::from(&b"loGET / HTTP/1.1\r\n\r\n"[..]);
    assert_eq!(filler.take_from(&mut read, &mut ccx), Need::Done);
    assert_eq!(
        &read[..],
        b"GET / HTTP/1.1\r\n\r\n",
        "the next request stays"
    );
    assert_eq!(body.size_hint().exact(), Some(5));
    assert!(!body.is_end_stream());

    let mut got = Vec::new();
    while let Poll::Ready(Some(f)) = Pin::new(&mut body).poll_frame(&mut rcx) {
        got.extend_from_slice(&f.unwrap().into_data().unwrap());
    }
    assert_eq!(got, b"hello");
    assert!(body.is_end_stream());
}

#[test]
fn the_connection_waits_for_room_and_the_reader_makes_it() {
    let (mut body, filler) = channel(Framing::Length(10 * BUFFERED as u64), false);
    let (conn_wakes, cw) = waker();
    let (_, rw) = waker();
    let mut ccx = Context::from_waker(&cw);
    let mut read = BytesMut::from(&vec![0u8; BUFFERED][..]);
    assert_eq!(filler.take_from(&mut read, &mut ccx), Need::Room);
    assert_eq!(conn_wakes.0.load(SeqCst), 0);
    let frame = Pin::new(&mut body).poll_frame(&mut Context::from_waker(&rw));
    assert!(matches!(frame, Poll::Ready(Some(Ok(_)))));
    assert_eq!(
        conn_wakes.0.load(SeqCst),
        1,
        "taking bytes wakes the connection"
    );
    assert_eq!(filler.take_from(&mut read, &mut ccx), Need::Read);
}

#[test]
fn a_dropped_body_is_discarded_within_the_limit_and_given_up_beyond() {
    let (body, filler) = channel(Framing::Length(100), false);
    let (_, cw) = waker();
    let mut ccx = Context::from_waker(&cw);
    drop(body);
    let mut read = BytesMut::from(&vec![1u8; 150][..]);
    assert_eq!(filler.take_from(&mut read, &mut ccx), Need::Done);
    assert_eq!(read.len(), 50, "only the body's bytes are discarded");

    let (body, filler) = channel(Framing::Length(DISCARD_LIMIT + 1), false);
    drop(body);
    let mut read = BytesMut::from(&[1u8; 10][..]);
    assert_eq!(filler.take_from(&mut read, &mut ccx), Need::GiveUp);
    assert_eq!(read.len(), 10);
}

#[test]
fn a_body_cut_short_by_the_client_fails_and_says_how_much_was_missing() {
    let (mut body, filler) = channel(Framing::Length(8), false);
    let (_, w) = waker();
    let mut cx = Context::from_waker(&w);
    let mut read = BytesMut::from(&b"abc"[..]);
    assert_eq!(filler.take_from(&mut read, &mut cx), Need::Read);
    filler.cut();
    assert!(matches!(
        Pin::new(&mut body).poll_frame(&mut cx),
        Poll::Ready(Some(Ok(_)))
    ));
    match Pin::new(&mut body).poll_frame(&mut cx) {
        Poll::Ready(Some(Err(BodyError::Cut(Some(5))))) => {}
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        Pin::new(&mut body).poll_frame(&mut cx),
        Poll::Ready(None)
    ));
    assert_eq!(filler.take_from(&mut read, &mut cx), Need::GiveUp);
}

#[test]
fn a_chunked_body_is_decoded_with_its_trailers_and_the_next_request_stays() {
    let (mut body, filler) = channel(Framing::Chunked, false);
    let (_, w) = waker();
    let mut cx = Context::from_waker(&w);
    assert_eq!(body.size_hint().exact(), None);
    let mut read = BytesMut::from(&b"3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nx-sum: 5\r\n\r\nGET /"[..]);
    assert_eq!(filler.take_from(&mut read, &mut cx), Need::Done);
    assert_eq!(&read[..], b"GET /");
    let mut data = Vec::new();
    let mut trailers = None;
    while let Poll::Ready(Some(f)) = Pin::new(&mut body).poll_frame(&mut cx) {
        match f.unwrap().into_data() {
            Ok(d) => data.extend_from_slice(&d),
            Err(f) => trailers = f.into_trailers().ok(),
        }
    }
    assert_eq!(data, b"abcde");
    assert_eq!(trailers.expect("trailers")["x-sum"], "5");
    assert!(body.is_end_stream());
}

#[test]
fn invalid_chunked_coding_fails_the_body_once_and_stops_the_connection_reading() {
    let (mut body, filler) = channel(Framing::Chunked, false);
    let (_, w) = waker();
    let mut cx = Context::from_waker(&w);
    let mut read = BytesMut::from(&b"zz\r\nGET / HTTP/1.1\r\n\r\n"[..]);
    assert_eq!(filler.take_from(&mut read, &mut cx), Need::GiveUp);
    match Pin::new(&mut body).poll_frame(&mut cx) {
        Poll::Ready(Some(Err(e @ BodyError::Invalid(_)))) => {
            assert!(e.to_string().contains("chunked coding is invalid"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        Pin::new(&mut body).poll_frame(&mut cx),
        Poll::Ready(None)
    ));
    // Never `Done`: what follows must not be taken for a request.
    assert_eq!(filler.take_from(&mut read, &mut cx), Need::GiveUp);
}

#[test]
fn a_waiting_client_is_invited_once_when_the_reader_first_finds_nothing() {
    let (mut body, filler) = channel(Framing::Length(3), true);
    let (conn_wakes, cw) = waker();
    let (_, rw) = waker();
    let mut ccx = Context::from_waker(&cw);
    let mut rcx = Context::from_waker(&rw);
    // The connection looks first: nothing to invite yet, nothing read.
    let mut read = BytesMut::new();
    assert_eq!(filler.take_from(&mut read, &mut ccx), Need::Read);
    assert!(!filler.take_continue());
    // The reader asks: the connection (perhaps another task) is woken to invite.
    assert!(Pin::new(&mut body).poll_frame(&mut rcx).is_pending());
    assert_eq!(conn_wakes.0.load(SeqCst), 1);
    assert!(filler.take_continue());
    assert!(!filler.take_continue(), "invited once");
    assert!(Pin::new(&mut body).poll_frame(&mut rcx).is_pending());
    assert!(!filler.take_continue());
    // Invited: the connection may carry the next request after the answer.
    assert!(filler.answering());
}

#[test]
fn an_answer_before_the_invitation_closes_the_connection_unless_the_body_came_anyway() {
    let (body, filler) = channel(Framing::Length(3), true);
    assert!(!filler.answering(), "the client may never send the body");
    drop(body);

    let (_body, filler) = channel(Framing::Length(3), true);
    let (_, w) = waker();
    let mut read = BytesMut::from(&b"abc"[..]);
    // A client that did not wait (allowed: RFC 9110 §10.1.1).
    assert_eq!(
        filler.take_from(&mut read, &mut Context::from_waker(&w)),
        Need::Done
    );
    assert!(filler.answering());

    let (mut body, filler) = channel(Framing::Length(3), true);
    assert!(!filler.answering());
    // After the final answer, no invitation.
    assert!(Pin::new(&mut body)
        .poll_frame(&mut Context::from_waker(&w))
        .is_pending());
    assert!(!filler.take_continue());
}

#[test]
fn a_connection_done_before_the_body_ends_fails_it_for_its_reader() {
    let (mut body, filler) = channel(Framing::Length(8), false);
    let (reader_wakes, rw) = waker();
    let mut rcx = Context::from_waker(&rw);
    assert!(Pin::new(&mut body).poll_frame(&mut rcx).is_pending());
    drop(filler);
    assert_eq!(reader_wakes.0.load(SeqCst), 1);
    match Pin::new(&mut body).poll_frame(&mut rcx) {
        Poll::Ready(Some(Err(BodyError::Cut(Some(8))))) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_dropped_chunked_body_is_discarded_to_its_end() {
    let (body, filler) = channel(Framing::Chunked, false);
    let (_, w) = waker();
    let mut cx = Context::from_waker(&w);
    drop(body);
    let mut read = BytesMut::from(&b"4\r\nabcd\r\n"[..]);
    assert_eq!(filler.take_from(&mut read, &mut cx), Need::Read);
    let mut read = BytesMut::from(&b"0\r\n\r\nNEXT"[..]);
    assert_eq!(filler.take_from(&mut read, &mut cx), Need::Done);
    assert_eq!(&read[..], b"NEXT");
}
