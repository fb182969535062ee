//! hyper's HTTP/1.1 server as a second, independent reader of a request head: what the fast
//! path takes must be what hyper's server (which serves everything the fast path leaves)
//! would have taken — the same request, framed the same way — or a client could have one
//! request read two ways depending on which side of the proxy reads it.

use std::cell::RefCell;
use std::convert::Infallible;
use std::future::Future;
use std::pin::pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use bytes::Bytes;
use http::request::Parts;
use http::{Request, Response};
use http_body::Body as _;
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead as _, AsyncWriteExt};

/// What hyper's server made of the first request in a buffer.
#[derive(Debug)]
pub(super) struct HyperRead {
    pub parts: Parts,
    /// The body is empty (no body).
    pub end: bool,
    /// The body's exact length when hyper knows it (a `content-length`).
    pub exact: Option<u64>,
}

/// A waker for polling by hand: the duplex stream in memory makes all progress within a poll.
struct Noop;

impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

/// The first request hyper's HTTP/1.1 server reads from `bytes` (with the proxy's settings for
/// the listener: `max_buf_size`, no header timeout), or `None` when it refuses them or waits
/// for more.
pub(super) fn hyper_reads(bytes: &[u8], max_buf: usize) -> Option<HyperRead> {
    let waker = Waker::from(Arc::new(Noop));
    let mut cx = Context::from_waker(&waker);
    let (mut client, server) = tokio::io::duplex(bytes.len() + 64 * 1024);
    // The duplex has room for all of it: written in one poll.
    if pin!(client.write_all(bytes)).poll(&mut cx).is_pending() {
        return None;
    }
    let seen: Rc<RefCell<Option<HyperRead>>> = Rc::default();
    let record = Rc::clone(&seen);
    let svc = service_fn(move |req: Request<Incoming>| {
        let mut seen = record.borrow_mut();
        if seen.is_none() {
            let end = req.body().is_end_stream();
            let exact = req.body().size_hint().exact();
            let (parts, _) = req.into_parts();
            *seen = Some(HyperRead { parts, end, exact });
        }
        async { Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new())) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .header_read_timeout(None)
        .max_buf_size(max_buf.max(8192));
    let mut conn = pin!(builder.serve_connection(TokioIo::new(server), svc));
    for _ in 0..64 {
        if seen.borrow().is_some() {
            break;
        }
        if conn.as_mut().poll(&mut cx).is_ready() {
            break;
        }
    }
    drop(client);
    seen.take()
}

/// What hyper's HTTP/1.1 client made of a response.
#[derive(Debug)]
pub(super) struct HyperResponse {
    pub parts: http::response::Parts,
    /// The body is empty.
    pub end: bool,
    /// The body's exact length when hyper knows it.
    pub exact: Option<u64>,
}

/// The response hyper's HTTP/1.1 client reads from `bytes` for a `method` request (the
/// proxy's upstream side used hyper's client before its own codec), or `None` when it refuses
/// them or waits for more.
pub(super) fn hyper_response(bytes: &[u8], method: &http::Method) -> Option<HyperResponse> {
    let waker = Waker::from(Arc::new(Noop));
    let mut cx = Context::from_waker(&waker);
    let (client, mut upstream) = tokio::io::duplex(bytes.len() + 64 * 1024);
    let handshake = pin!(hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(
        TokioIo::new(client)
    ))
    .poll(&mut cx);
    let Poll::Ready(Ok((mut sender, conn))) = handshake else {
        return None;
    };
    let req = Request::builder()
        .method(method.clone())
        .uri("/")
        .header(http::header::HOST, "upstream")
        .body(Empty::new())
        .ok()?;
    let mut conn = pin!(conn);
    let mut response = pin!(sender.send_request(req));
    let done = |res: Response<Incoming>| {
        let end = res.body().is_end_stream();
        let exact = res.body().size_hint().exact();
        let (parts, _) = res.into_parts();
        HyperResponse { parts, end, exact }
    };
    // The response is sent once the request has gone out (hyper's client refuses a response
    // to no request).
    let mut answered = false;
    for _ in 0..64 {
        if let Poll::Ready(r) = response.as_mut().poll(&mut cx) {
            return r.ok().map(done);
        }
        if conn.as_mut().poll(&mut cx).is_ready() {
            return match response.as_mut().poll(&mut cx) {
                Poll::Ready(Ok(res)) => Some(done(res)),
                _ => None,
            };
        }
        if !answered {
            let mut sink = [0u8; 1024];
            let mut read = tokio::io::ReadBuf::new(&mut sink);
            let got = pin!(&mut upstream).poll_read(&mut cx, &mut read);
            if matches!(got, Poll::Ready(Ok(()))) && !read.filled().is_empty() {
                if pin!(upstream.write_all(bytes)).poll(&mut cx).is_pending() {
                    return None;
                }
                answered = true;
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The oracles read what hyper reads: a plain request and response are taken, hyper's
    /// client refuses `transfer-encoding` on an HTTP/1.0 response (RFC 9112 §6.1), the
    /// divergence `response_head` skips until the proxy refuses it too, and hyper's server
    /// reads a length padded past 19 digits.
    #[test]
    fn hyper_reads_what_it_should() {
        let req = hyper_reads(b"GET /a#b HTTP/1.1\r\nHost: x\r\n\r\n", 8192).expect("a request");
        assert_eq!(req.parts.uri, "/a");
        assert!(req.end);
        let get = http::Method::GET;
        let ok = hyper_response(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc", &get);
        assert_eq!(ok.expect("a response").exact, Some(3));
        let te10 = b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
        assert!(hyper_response(te10, &get).is_none());
        // 21 digits, 5 bytes: hyper reads it (docs/fuzzing.md, "Found", 5).
        let zeros = b"POST / HTTP/1.1\r\nContent-Length: 000000000000000000005\r\n\r\nhello";
        assert_eq!(hyper_reads(zeros, 8192).expect("a request").exact, Some(5));
    }
}
