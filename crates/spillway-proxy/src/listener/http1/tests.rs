//! The client-side HTTP/1.1 codec on bytes: which requests the fast path takes, what it
//! leaves whole for hyper, and the response heads it writes.

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Response, StatusCode, Version};
use http_body_util::{Empty, Full, StreamBody};
use proptest::prelude::*;

use crate::http1::server::{self as codec, allowed_trailers, Answering, Parsed};
use crate::http1::Framing;
use crate::http1::NameCache;

const MAX: usize = 8192;

fn parse(bytes: &[u8]) -> (Parsed, BytesMut) {
    let mut buf = BytesMut::from(bytes);
    let p = codec::parse_request(
        &mut buf,
        &mut NameCache::default(),
        MAX,
        &mut HeaderMap::new(),
    );
    (p, buf)
}

fn request(bytes: &[u8]) -> codec::RequestHead {
    match parse(bytes) {
        (Parsed::Request(h), rest) => {
            assert!(rest.is_empty(), "left over: {rest:?}");
            h
        }
        (other, _) => panic!("{:?} for {:?}", other, String::from_utf8_lossy(bytes)),
    }
}

#[test]
fn a_get_becomes_the_request_it_says() {
    let h = request(
        b"GET /a/b?c=d HTTP/1.1\r\nHost: example\r\nX-Custom: one\r\nx-custom: two\r\n\r\n",
    );
    assert_eq!(h.parts.method, http::Method::GET);
    assert_eq!(h.parts.uri, "/a/b?c=d");
    assert_eq!(h.parts.version, Version::HTTP_11);
    assert_eq!(h.parts.headers["host"], "example");
    let custom: Vec<_> = h.parts.headers.get_all("x-custom").iter().collect();
    assert_eq!(custom, ["one", "two"]);
    assert!(h.keep_alive);
    assert!(!h.trailers);
}

#[test]
fn keep_alive_follows_the_version_and_the_connection_field() {
    let cases: [(&[u8], bool); 6] = [
        (b"GET / HTTP/1.1\r\n\r\n", true),
        (b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n", false),
        (
            b"GET / HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n",
            false,
        ),
        (b"GET / HTTP/1.0\r\n\r\n", false),
        (b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", true),
        (
            b"GET / HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n",
            false,
        ),
    ];
    for (bytes, keep) in cases {
        let h = request(bytes);
        assert_eq!(h.keep_alive, keep, "{}", String::from_utf8_lossy(bytes));
    }
    assert_eq!(
        request(b"GET / HTTP/1.0\r\n\r\n").parts.version,
        Version::HTTP_10
    );
}

#[test]
fn te_trailers_is_noticed_and_a_zero_length_is_no_body() {
    let h = request(b"GET / HTTP/1.1\r\nTE: gzip, trailers\r\n\r\n");
    assert!(h.trailers);
    let h = request(b"DELETE /x HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(h.parts.method, http::Method::DELETE);
    assert_eq!(h.parts.headers["content-length"], "0");
}

#[test]
fn a_body_of_a_declared_length_is_announced_and_left_in_the_buffer() {
    let (p, rest) = parse(b"POST /up HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\nhelloGET");
    match p {
        Parsed::Request(h) => assert_eq!(h.body, Some(Framing::Length(5))),
        other => panic!("{other:?}"),
    }
    assert_eq!(&rest[..], b"helloGET");
}

#[test]
fn a_repeated_length_is_kept_as_one_field() {
    for wire in [
        &b"POST /up HTTP/1.1\r\nContent-Length: 5, 5\r\nX-A: 1\r\n\r\n"[..],
        b"POST /up HTTP/1.1\r\nContent-Length: 5\r\nX-A: 1\r\ncontent-length: 5\r\n\r\n",
    ] {
        let h = request(wire);
        let all: Vec<_> = h.parts.headers.get_all("content-length").iter().collect();
        assert_eq!(all, ["5"]);
        assert_eq!(
            (h.body, h.parts.headers.len()),
            (Some(Framing::Length(5)), 2)
        );
    }
}

#[test]
fn a_response_s_repeated_length_is_written_once() {
    let mut res = Response::new(Full::new(Bytes::from_static(b"hello")));
    res.headers_mut()
        .append("content-length", HeaderValue::from_static("5, 5"));
    res.headers_mut()
        .append("content-length", HeaderValue::from_static("5"));
    let (h, head) = encode(&res, answering(Version::HTTP_11, false, true));
    assert_eq!(date_free(&h), "HTTP/1.1 200 OK\ncontent-length: 5\n");
    assert_eq!(head.framing, Framing::Length(5));
    // Lengths that disagree are not sent; the body's own size is.
    let mut res = Response::new(Full::new(Bytes::from_static(b"hello")));
    res.headers_mut()
        .append("content-length", HeaderValue::from_static("5"));
    res.headers_mut()
        .append("content-length", HeaderValue::from_static("6"));
    let (h, head) = encode(&res, answering(Version::HTTP_11, false, true));
    assert_eq!(date_free(&h), "HTTP/1.1 200 OK\ncontent-length: 5\n");
    assert_eq!(head.framing, Framing::Length(5));
}

/// What the fast path does not serve is left in the buffer byte for byte, for hyper.
#[test]
fn what_the_fast_path_does_not_serve_is_left_whole() {
    let cases: [&[u8]; 12] = [
        b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        b"GET /ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        b"PUT / HTTP/1.1\r\nExpect: something-else\r\nContent-Length: 4\r\n\r\nbody",
        b"CONNECT example:443 HTTP/1.1\r\nHost: example:443\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        b"GET / HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n",
        b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"GET / HTTP/1.1\r\nbad header\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
        b"GET http://[::1 HTTP/1.1\r\n\r\n",
    ];
    for bytes in cases {
        let (p, rest) = parse(bytes);
        assert!(
            matches!(p, Parsed::Other),
            "{p:?} for {:?}",
            String::from_utf8_lossy(bytes)
        );
        assert_eq!(&rest[..], bytes, "the buffer must be left as it was");
    }
}

#[test]
fn expect_100_continue_is_taken_for_a_1_1_request_with_a_body() {
    for (bytes, expects) in [
        (
            &b"PUT / HTTP/1.1\r\nExpect: 100-Continue\r\nContent-Length: 4\r\n\r\n"[..],
            true,
        ),
        (
            b"PUT / HTTP/1.1\r\nexpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n",
            true,
        ),
        // No body to invite, or HTTP/1.0 (RFC 9110 §10.1.1: ignored).
        (
            b"PUT / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n",
            false,
        ),
        (
            b"PUT / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n",
            false,
        ),
    ] {
        match parse(bytes).0 {
            Parsed::Request(h) => {
                assert_eq!(
                    h.expect_continue,
                    expects,
                    "{}",
                    String::from_utf8_lossy(bytes)
                );
                // Forwarded as hyper's server forwarded it.
                assert!(h.parts.headers.contains_key(header::EXPECT));
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_head_over_the_limit_is_hyper_s_to_refuse() {
    let mut big = b"GET / HTTP/1.1\r\nX-Big: ".to_vec();
    big.extend_from_slice(&[b'a'; MAX]);
    let (p, rest) = parse(&big);
    assert!(matches!(p, Parsed::Other), "{p:?}");
    assert_eq!(rest.len(), big.len());
    big.extend_from_slice(b"\r\n\r\n");
    assert!(matches!(parse(&big).0, Parsed::Other));
}

#[test]
fn a_head_in_pieces_is_partial_until_whole() {
    let bytes = b"GET /p HTTP/1.1\r\nHost: h\r\nAccept: */*\r\n\r\n";
    for cut in 0..bytes.len() {
        let (p, rest) = parse(&bytes[..cut]);
        assert!(matches!(p, Parsed::Partial), "cut at {cut}: {p:?}");
        assert_eq!(rest.len(), cut);
    }
    request(bytes);
}

#[test]
fn pipelined_requests_come_out_one_at_a_time_in_order() {
    let mut buf = BytesMut::from(&b"GET /1 HTTP/1.1\r\n\r\nHEAD /2 HTTP/1.1\r\n\r\nGET /3 HT"[..]);
    let mut names = NameCache::default();
    let mut got = Vec::new();
    let mut spare = HeaderMap::new();
    while let Parsed::Request(h) = codec::parse_request(&mut buf, &mut names, MAX, &mut spare) {
        got.push(h.parts.uri.to_string());
    }
    assert_eq!(got, ["/1", "/2"]);
    assert_eq!(&buf[..], b"GET /3 HT");
}

fn answering(version: Version, head: bool, keep_alive: bool) -> Answering {
    Answering {
        version,
        head,
        keep_alive,
        trailers: false,
    }
}

fn encode<B: http_body::Body>(res: &Response<B>, req: Answering) -> (String, codec::Head) {
    let mut buf = Vec::new();
    let head = codec::encode_response(res, None, req, &mut buf);
    (String::from_utf8(buf).unwrap(), head)
}

fn date_free(head: &str) -> String {
    head.lines()
        .filter(|l| !l.starts_with("date: "))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_response_s_length_comes_from_its_field_or_its_body() {
    let mut res = Response::new(Full::new(Bytes::from_static(b"hello")));
    let (h, head) = encode(&res, answering(Version::HTTP_11, false, true));
    assert_eq!(date_free(&h), "HTTP/1.1 200 OK\ncontent-length: 5\n");
    assert_eq!((head.framing, head.keep_alive), (Framing::Length(5), true));

    res.headers_mut()
        .insert("content-length", HeaderValue::from_static("5"));
    let (h, head) = encode(&res, answering(Version::HTTP_11, false, true));
    assert_eq!(h.matches("content-length").count(), 1, "{h}");
    assert_eq!(head.framing, Framing::Length(5));

    let empty = Response::new(Empty::<Bytes>::new());
    let (h, head) = encode(&empty, answering(Version::HTTP_11, false, true));
    assert!(h.contains("content-length: 0\r\n"), "{h}");
    assert_eq!(head.framing, Framing::Empty);
}

/// A response whose body's length is not known in advance.
fn streamed() -> Response<impl http_body::Body<Data = Bytes>> {
    let frame = Ok::<_, std::convert::Infallible>(http_body::Frame::data(Bytes::from_static(b"x")));
    Response::new(StreamBody::new(tokio_stream::once(frame)))
}

#[test]
fn a_body_of_unknown_length_is_chunked_for_1_1_and_close_delimited_for_1_0() {
    let res = streamed();
    let (h, head) = encode(&res, answering(Version::HTTP_11, false, true));
    assert!(h.contains("transfer-encoding: chunked\r\n"), "{h}");
    assert_eq!((head.framing, head.keep_alive), (Framing::Chunked, true));

    let (h, head) = encode(&res, answering(Version::HTTP_10, false, true));
    assert!(h.starts_with("HTTP/1.0 200 OK\r\n"), "{h}");
    assert!(
        !h.contains("transfer-encoding") && !h.contains("connection"),
        "{h}"
    );
    assert_eq!(
        (head.framing, head.keep_alive),
        (Framing::UntilClose, false)
    );
}

#[test]
fn head_204_and_304_answers_have_no_body_and_keep_their_fields() {
    let mut res = Response::new(Empty::<Bytes>::new());
    res.headers_mut()
        .insert("content-length", HeaderValue::from_static("42"));
    let (h, head) = encode(&res, answering(Version::HTTP_11, true, true));
    assert!(h.contains("content-length: 42\r\n"), "{h}");
    assert_eq!(head.framing, Framing::Empty);

    for status in [StatusCode::NO_CONTENT, StatusCode::NOT_MODIFIED] {
        let mut res = Response::new(Empty::<Bytes>::new());
        *res.status_mut() = status;
        let (h, head) = encode(&res, answering(Version::HTTP_11, false, true));
        assert!(!h.contains("content-length"), "{h}");
        assert_eq!(head.framing, Framing::Empty);
    }
}

#[test]
fn the_connection_s_fate_is_written_as_each_version_expects() {
    let res = Response::new(Full::new(Bytes::from_static(b"x")));
    let (h, head) = encode(&res, answering(Version::HTTP_11, false, false));
    assert!(h.contains("connection: close\r\n"), "{h}");
    assert!(!head.keep_alive);
    let (h, head) = encode(&res, answering(Version::HTTP_10, false, true));
    assert!(h.contains("connection: keep-alive\r\n"), "{h}");
    assert!(head.keep_alive);
    let (h, _) = encode(&res, answering(Version::HTTP_11, false, true));
    assert!(!h.contains("connection"), "{h}");

    // A response that says close closes.
    let mut res = Response::new(Full::new(Bytes::from_static(b"x")));
    res.headers_mut()
        .insert("connection", HeaderValue::from_static("close"));
    let (_, head) = encode(&res, answering(Version::HTTP_11, false, true));
    assert!(!head.keep_alive);
}

#[test]
fn a_date_is_added_only_when_missing_and_a_reason_phrase_is_kept() {
    let mut res = Response::new(Full::new(Bytes::from_static(b"x")));
    let (h, _) = encode(&res, answering(Version::HTTP_11, false, true));
    let date = h
        .lines()
        .find_map(|l| l.strip_prefix("date: "))
        .expect("a date");
    assert!(httpdate::parse_http_date(date).is_ok(), "{date}");

    res.headers_mut().insert(
        "date",
        HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT"),
    );
    *res.status_mut() = StatusCode::IM_A_TEAPOT;
    res.extensions_mut()
        .insert(hyper::ext::ReasonPhrase::from_static(b"Short And Stout"));
    let (h, _) = encode(&res, answering(Version::HTTP_11, false, true));
    assert!(h.starts_with("HTTP/1.1 418 Short And Stout\r\n"), "{h}");
    assert_eq!(h.matches("date: ").count(), 1, "{h}");
}

#[test]
fn only_announced_trailers_go_to_a_client_that_takes_them() {
    let mut res = streamed();
    res.headers_mut().insert(
        "trailer",
        HeaderValue::from_static("grpc-status, content-length, x-sum"),
    );
    let mut req = answering(Version::HTTP_11, false, true);
    let (_, head) = encode(&res, req);
    assert_eq!(head.trailers, None, "the client did not send te: trailers");
    req.trailers = true;
    let (_, head) = encode(&res, req);
    let allowed = head.trailers.expect("announced");
    assert_eq!(
        allowed,
        [
            HeaderName::from_static("grpc-status"),
            HeaderName::from_static("x-sum")
        ]
    );

    let mut t = HeaderMap::new();
    t.insert("grpc-status", HeaderValue::from_static("0"));
    t.insert("content-length", HeaderValue::from_static("9"));
    t.insert("x-other", HeaderValue::from_static("1"));
    let sent = allowed_trailers(t, &allowed);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent["grpc-status"], "0");
}

proptest! {
    /// Arbitrary client bytes never panic the parser, and a buffer is either consumed by one
    /// whole head or left exactly as it was.
    #[test]
    fn arbitrary_bytes_never_panic_and_leave_the_buffer_whole(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let (p, rest) = parse(&bytes);
        match p {
            Parsed::Request(_) => prop_assert!(bytes.ends_with(&rest)),
            Parsed::Partial | Parsed::Other => prop_assert_eq!(&rest[..], &bytes[..]),
        }
    }

    /// Heads built from plausible pieces: the fast path takes exactly those without both
    /// framings, conflicting ones or a change of protocol.
    #[test]
    fn plausible_heads_are_taken_or_left_by_the_rules(
        method in prop::sample::select(vec!["GET", "HEAD", "POST", "DELETE", "OPTIONS", "CONNECT"]),
        fields in proptest::collection::vec(prop::sample::select(vec![
            "Host: h", "Accept: */*", "Content-Length: 0", "Content-Length: 3",
            "Transfer-Encoding: chunked", "Upgrade: h2c", "Expect: 100-continue", "X-A: b",
            "Expect: nothing",
        ]), 0..5),
    ) {
        let mut bytes = format!("{method} /x HTTP/1.1\r\n");
        for f in &fields {
            bytes.push_str(f);
            bytes.push_str("\r\n");
        }
        bytes.push_str("\r\n");
        // Two different lengths disagree (hyper's 400); one length, repeated or not, is a body
        // the fast path reads.
        let lengths = fields.iter().filter(|f| f.starts_with("Content-Length")).collect::<std::collections::BTreeSet<_>>();
        let te = fields.iter().filter(|f| f.starts_with("Transfer-Encoding")).count();
        let body_or_switch = method == "CONNECT"
            || lengths.len() > 1
            || te > 1
            || (te == 1 && !lengths.is_empty())
            || fields.iter().any(|f| matches!(*f, "Upgrade: h2c" | "Expect: nothing"));
        let (p, rest) = parse(bytes.as_bytes());
        match p {
            Parsed::Request(h) => {
                prop_assert!(!body_or_switch);
                prop_assert!(rest.is_empty());
                // A repeated length is kept as one field (RFC 9110 §8.6).
                let repeats = fields.iter().filter(|f| f.starts_with("Content-Length")).count().saturating_sub(1);
                prop_assert_eq!(h.parts.headers.len(), fields.len() - repeats);
                let expected = if te == 1 {
                    Some(Framing::Chunked)
                } else if lengths.iter().any(|f| f.ends_with(" 3")) {
                    Some(Framing::Length(3))
                } else {
                    None
                };
                prop_assert_eq!(h.body, expected);
                // The client waits to be invited only if there is a body to send.
                let expects = fields.contains(&"Expect: 100-continue");
                prop_assert_eq!(h.expect_continue, expects && expected.is_some());
            }
            Parsed::Other => {
                prop_assert!(body_or_switch);
                prop_assert_eq!(rest.len(), bytes.len());
            }
            Parsed::Partial => prop_assert!(false, "a whole head is not partial"),
        }
    }
}
