use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Method, Request, StatusCode, Version};
use http_body::{Body, Frame};
use http_body_util::{Empty, Full};

use super::*;

/// A body of unknown length (a client's chunked upload).
struct Unsized;

impl Body for Unsized {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(None)
    }
}

fn encoded<B: Body>(req: &Request<B>) -> (String, Outgoing) {
    let mut buf = Vec::new();
    let out = encode_request(req, &crate::http1::AddedHeaders::none(), &mut buf);
    (String::from_utf8(buf).unwrap(), out)
}

#[test]
fn a_get_is_its_request_line_and_headers() {
    let req = Request::get("/a/b?c=1")
        .header("host", "svc:80")
        .header("x-one", "1")
        .body(Empty::<Bytes>::new())
        .unwrap();
    assert_eq!(
        encoded(&req),
        (
            "GET /a/b?c=1 HTTP/1.1\r\nhost: svc:80\r\nx-one: 1\r\n\r\n".to_string(),
            Outgoing::Empty
        )
    );
}

#[test]
fn a_body_of_known_size_gets_a_content_length_unless_it_has_one() {
    let req = Request::post("/")
        .body(Full::new(Bytes::from_static(b"hello")))
        .unwrap();
    assert_eq!(
        encoded(&req),
        (
            "POST / HTTP/1.1\r\ncontent-length: 5\r\n\r\n".to_string(),
            Outgoing::Length(5)
        )
    );
    // The client's own header is kept (and is what the body is held to).
    let req = Request::post("/")
        .header("content-length", "5")
        .body(Unsized)
        .unwrap();
    assert_eq!(
        encoded(&req),
        (
            "POST / HTTP/1.1\r\ncontent-length: 5\r\n\r\n".to_string(),
            Outgoing::Length(5)
        )
    );
}

#[test]
fn a_body_of_unknown_size_is_chunked_whatever_the_method() {
    for m in [Method::POST, Method::GET] {
        let req = Request::builder()
            .method(m.clone())
            .uri("/")
            .header("content-length", "nope")
            .body(Unsized)
            .unwrap();
        assert_eq!(
            encoded(&req),
            (
                format!("{m} / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n"),
                Outgoing::Chunked
            ),
            "an unparsable content-length is not sent"
        );
    }
    // A coding given without chunked last gets chunked added; a length beside it is dropped.
    let req = Request::post("/")
        .header("transfer-encoding", "gzip")
        .header("content-length", "3")
        .body(Full::new(Bytes::from_static(b"abc")))
        .unwrap();
    assert_eq!(
        encoded(&req),
        (
            "POST / HTTP/1.1\r\ntransfer-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n"
                .to_string(),
            Outgoing::Chunked
        )
    );
}

#[test]
fn an_absolute_uri_is_written_whole() {
    let req = Request::get("http://svc:8080/x")
        .body(Empty::<Bytes>::new())
        .unwrap();
    assert!(encoded(&req)
        .0
        .starts_with("GET http://svc:8080/x HTTP/1.1\r\n"));
}

#[test]
fn chunks_are_framed() {
    let mut buf = Vec::new();
    chunk_header(&mut buf, false, 26);
    buf.extend_from_slice(b"abcdefghijklmnopqrstuvwxyz");
    chunk_header(&mut buf, true, 1);
    buf.extend_from_slice(b"!");
    let mut t = HeaderMap::new();
    t.insert("grpc-status", "0".parse().unwrap());
    chunked_end(&mut buf, true, Some(&t));
    assert_eq!(
        buf,
        b"1a\r\nabcdefghijklmnopqrstuvwxyz\r\n1\r\n!\r\n0\r\ngrpc-status: 0\r\n\r\n"
    );
    let mut e = Vec::new();
    chunked_end(&mut e, false, None);
    assert_eq!(e, b"0\r\n\r\n");
}

fn parse(bytes: &[u8], method: Method) -> Result<Option<ResponseHead>, WireError> {
    parse_response(
        &mut BytesMut::from(bytes),
        &method,
        &mut NameCache::default(),
        &mut HeaderMap::new(),
        None,
    )
}

fn head(bytes: &[u8]) -> ResponseHead {
    parse(bytes, Method::GET).unwrap().expect("complete")
}

#[test]
fn a_response_head_is_parsed_into_http_types() {
    let mut buf = BytesMut::from(
        &b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Spillway-Cost: 0.002\r\nx-a: 1\r\nx-a: 2\r\n\r\nokNEXT"[..],
    );
    let h = parse_response(
        &mut buf,
        &Method::GET,
        &mut NameCache::default(),
        &mut HeaderMap::new(),
        None,
    )
    .unwrap()
    .unwrap();
    assert_eq!(h.status, StatusCode::OK);
    assert_eq!(h.version, Version::HTTP_11);
    assert_eq!(h.headers["x-spillway-cost"], "0.002");
    let a: Vec<_> = h.headers.get_all("x-a").iter().collect();
    assert_eq!(a, ["1", "2"]);
    assert_eq!(
        (h.framing, h.keep_alive, h.reason),
        (Framing::Length(2), true, None)
    );
    assert_eq!(&buf[..], b"okNEXT", "only the head is taken");
}

#[test]
fn an_incomplete_head_asks_for_more_and_a_huge_one_is_refused() {
    assert!(parse(b"HTTP/1.1 200 OK\r\ncontent-le", Method::GET)
        .unwrap()
        .is_none());
    let mut big = b"HTTP/1.1 200 OK\r\nx: ".to_vec();
    big.resize(MAX_HEAD + 1, b'a');
    assert!(matches!(
        parse(&big, Method::GET),
        Err(WireError::HeadTooLarge)
    ));
    let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
    for i in 0..=MAX_HEADERS {
        many.extend_from_slice(format!("x-{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    let e = parse(&many, Method::GET).unwrap_err().to_string();
    assert!(e.contains("more than 100 header fields"), "{e}");
}

#[test]
fn informational_responses_are_skipped_and_101_is_refused() {
    let h = head(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n");
    assert_eq!(h.status, StatusCode::CREATED);
    assert_eq!(h.framing, Framing::Empty);
    let e = parse(b"HTTP/1.1 101 Switching Protocols\r\n\r\n", Method::GET).unwrap_err();
    assert!(e.to_string().contains("101"), "{e}");
}

#[test]
fn bodies_are_delimited_as_rfc_9112_says() {
    let cases: [(&[u8], Method, Framing, bool); 8] = [
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n",
            Method::HEAD,
            Framing::Empty,
            true,
        ),
        (
            b"HTTP/1.1 204 No Content\r\n\r\n",
            Method::GET,
            Framing::Empty,
            true,
        ),
        (
            b"HTTP/1.1 304 Not Modified\r\ncontent-length: 9\r\n\r\n",
            Method::GET,
            Framing::Empty,
            true,
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
            Method::GET,
            Framing::Chunked,
            true,
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked \r\ncontent-length: 4\r\n\r\n",
            Method::GET,
            Framing::Chunked,
            false,
        ),
        (
            b"HTTP/1.1 200 OK\r\n\r\n",
            Method::GET,
            Framing::UntilClose,
            false,
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 5, 5\r\nconnection: close\r\n\r\n",
            Method::GET,
            Framing::Length(5),
            false,
        ),
        (
            b"HTTP/1.0 200 OK\r\ncontent-length: 5\r\nconnection: Keep-Alive\r\n\r\n",
            Method::GET,
            Framing::Length(5),
            true,
        ),
    ];
    for (bytes, method, framing, keep) in cases {
        let h = parse(bytes, method).unwrap().unwrap();
        assert_eq!(
            (h.framing, h.keep_alive),
            (framing, keep),
            "{}",
            String::from_utf8_lossy(bytes)
        );
    }
    let h = head(b"HTTP/1.0 200 OK\r\ncontent-length: 5\r\n\r\n");
    assert!(!h.keep_alive, "HTTP/1.0 closes unless it says keep-alive");
    for bad in [
        &b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999\r\n\r\n",
    ] {
        let e = parse(bad, Method::GET).unwrap_err().to_string();
        assert!(e.contains("content-length"), "{e}");
    }
}

#[test]
fn a_reason_phrase_of_its_own_is_kept() {
    assert_eq!(head(b"HTTP/1.1 200 OK\r\n\r\n").reason, None);
    assert_eq!(
        head(b"HTTP/1.1 200 Fine Thanks\r\n\r\n").reason.as_deref(),
        Some(&b"Fine Thanks"[..])
    );
}

#[test]
fn garbage_is_an_error_that_says_so() {
    for bad in [
        &b"SSH-2.0-OpenSSH\r\n\r\n"[..],
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nbad name: v\r\n\r\n",
        // Control characters in a value: refused by httparse, never a `HeaderValue`.
        b"HTTP/1.1 200 OK\r\nx: a\x01b\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nx: a\x7fb\r\n\r\n",
        // Transfer codings other than chunked alone: the client would get the coded bytes
        // unannounced (they used to be passed on so).
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntransfer-encoding: chunked\r\n\r\n",
    ] {
        let e = parse(bad, Method::GET).unwrap_err();
        assert!(matches!(e, WireError::Invalid(_)), "{e:?}");
        assert!(!e.to_string().is_empty());
    }
}

/// Decodes `wire` fed `step` bytes at a time; the data, the trailers and whether it ended.
fn decode_all(
    framing: Framing,
    wire: &[u8],
    step: usize,
) -> Result<(Vec<u8>, Option<HeaderMap>, bool), WireError> {
    let mut d = Decoder::new(framing);
    let mut buf = BytesMut::new();
    let (mut data, mut trailers) = (Vec::new(), None);
    let mut fed = 0;
    loop {
        match d.decode(&mut buf)? {
            Decoded::Data(b) => data.extend_from_slice(&b),
            Decoded::Trailers(t) => trailers = Some(t),
            Decoded::End => return Ok((data, trailers, true)),
            Decoded::More if fed == wire.len() => return Ok((data, trailers, false)),
            Decoded::More => {
                let n = step.min(wire.len() - fed);
                buf.extend_from_slice(&wire[fed..fed + n]);
                fed += n;
            }
        }
    }
}

#[test]
fn a_chunked_body_decodes_however_it_is_split() {
    let wire = b"5;ext=1\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\ngrpc-status: 0\r\nx-b: 2\r\n\r\n";
    for step in 1..=wire.len() {
        let (data, trailers, ended) = decode_all(Framing::Chunked, wire, step).unwrap();
        assert_eq!(data, b"helloabcdefghijklmnopqrstuvwxyz", "step {step}");
        let t = trailers.expect("trailers");
        assert_eq!(
            (t["grpc-status"].as_bytes(), t["x-b"].as_bytes()),
            (&b"0"[..], &b"2"[..])
        );
        assert!(ended);
    }
    let (data, trailers, ended) =
        decode_all(Framing::Chunked, b"3\r\nabc\r\n0\r\n\r\n", 2).unwrap();
    assert_eq!(
        (data.as_slice(), trailers.is_none(), ended),
        (&b"abc"[..], true, true)
    );
}

#[test]
fn a_length_body_ends_at_its_length_and_a_close_delimited_one_never() {
    let (data, _, ended) = decode_all(Framing::Length(5), b"helloEXTRA", 3).unwrap();
    assert_eq!((data.as_slice(), ended), (&b"hello"[..], true));
    let (data, _, ended) = decode_all(Framing::Length(5), b"hel", 1).unwrap();
    assert_eq!((data.as_slice(), ended), (&b"hel"[..], false));
    let (data, _, ended) = decode_all(Framing::UntilClose, b"all of it", 4).unwrap();
    assert_eq!((data.as_slice(), ended), (&b"all of it"[..], false));
    let mut d = Decoder::new(Framing::Length(5));
    assert_eq!((d.remaining(), d.is_done()), (Some(5), false));
    let _ = d.decode(&mut BytesMut::from(&b"hello"[..])).unwrap();
    assert_eq!((d.remaining(), d.is_done()), (Some(0), true));
}

#[test]
fn a_broken_chunked_body_is_an_error() {
    for bad in [
        &b"zz\r\n"[..],
        b"5\r\nhelloXX",
        b"\r\n",
        b"11111111111111111\r\n",
        b"5 x\r\n",
    ] {
        let e = decode_all(Framing::Chunked, bad, 64).unwrap_err();
        assert!(matches!(e, WireError::Invalid(_)), "{e:?}");
    }
    let mut long = b"5;".to_vec();
    long.resize(MAX_CHUNK_LINE + 2, b'x');
    assert!(decode_all(Framing::Chunked, &long, 64).is_err());
}

#[test]
fn names_are_cached_per_connection_whatever_their_case() {
    let mut names = NameCache::default();
    for wire in [
        &b"HTTP/1.1 200 OK\r\nX-Spillway-Cost: 1\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\nx-spillway-cost: 2\r\nX-SPILLWAY-COST: 3\r\n\r\n",
    ] {
        let h = parse_response(
            &mut BytesMut::from(wire),
            &Method::GET,
            &mut names,
            &mut HeaderMap::new(),
            None,
        )
        .unwrap()
        .unwrap();
        assert!(h.headers.get_all("x-spillway-cost").iter().count() >= 1);
    }
    assert_eq!(names.len(), 1, "one name, however spelt");
    // A bad name is still refused when a cached one is near it.
    let e = parse_response(
        &mut BytesMut::from(&b"HTTP/1.1 200 OK\r\nx-spillway-cos(: 1\r\n\r\n"[..]),
        &Method::GET,
        &mut names,
        &mut HeaderMap::new(),
        None,
    );
    assert!(e.is_err());
    // The cache stays within its bound, and names that share a set are still read right.
    for i in 0..200 {
        let wire = format!("HTTP/1.1 200 OK\r\nx-{i}: v\r\nY-{}: w\r\n\r\n", i / 2);
        let h = parse_response(
            &mut BytesMut::from(wire.as_bytes()),
            &Method::GET,
            &mut names,
            &mut HeaderMap::new(),
            None,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.headers[format!("x-{i}").as_str()], "v");
        assert_eq!(h.headers[format!("y-{}", i / 2).as_str()], "w");
    }
    assert!(names.len() <= NameCache::MAX);
}

mod raw_fields;

mod arbitrary_bytes {
    //! Whatever an upstream sends, the codec answers with a head, "more", or an error — never a
    //! panic (the offsets into the head, the chunk arithmetic and the debug-checked
    //! `HeaderValue` constructor are where one could hide).

    use bytes::BytesMut;
    use http::Method;
    use proptest::prelude::*;

    use super::super::*;

    /// Bytes that look like HTTP often enough to reach past the status line.
    fn wire() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            Just(b"HTTP/1.1 200 OK\r\n".to_vec()),
            Just(b"HTTP/1.0 100 Continue\r\n\r\n".to_vec()),
            Just(b"content-length: 3\r\n".to_vec()),
            Just(b"transfer-encoding: chunked\r\n".to_vec()),
            Just(b"connection: close\r\n".to_vec()),
            Just(b"\r\n".to_vec()),
            Just(b"5\r\nhello\r\n0\r\n\r\n".to_vec()),
            prop::collection::vec(any::<u8>(), 0..24),
        ];
        prop::collection::vec(piece, 0..10).prop_map(|v| v.concat())
    }

    /// Decodes what `buf` holds as a body framed by `framing` until it ends, stalls or fails.
    fn drain(framing: Framing, buf: &mut BytesMut) {
        let mut d = Decoder::new(framing);
        for _ in 0..64 {
            match d.decode(buf) {
                Ok(Decoded::Data(_)) | Ok(Decoded::Trailers(_)) => {}
                Ok(Decoded::End) | Ok(Decoded::More) | Err(_) => break,
            }
        }
    }

    proptest! {
        #[test]
        fn no_input_panics_the_head_parser_or_the_body_decoders(bytes in wire(), head in any::<bool>()) {
            let method = if head { Method::HEAD } else { Method::GET };
            let mut buf = BytesMut::from(&bytes[..]);
            let mut names = NameCache::default();
            if let Ok(Some(h)) = parse_response(&mut buf, &method, &mut names, &mut HeaderMap::new(), None) {
                drain(h.framing, &mut buf);
            }
            for framing in [Framing::Chunked, Framing::Length(7), Framing::UntilClose] {
                drain(framing, &mut BytesMut::from(&bytes[..]));
            }
        }
    }
}
