use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap};
use http::{Method, Request};
use http_body_util::Full;

use super::super::{encode_request, parse_response, NameCache, RawFields};
use super::*;

fn lengths(fields: &[&str]) -> Lengths {
    let mut l = Lengths::default();
    for f in fields {
        l.add(f.as_bytes());
    }
    l
}

#[test]
fn a_repeated_length_is_one_length_and_disagreeing_ones_none() {
    for (fields, value, single) in [
        (&[][..], Ok(None), true),
        (&["35"][..], Ok(Some(35)), true),
        (&["35, 35"][..], Ok(Some(35)), false),
        (&["35,35 ,35"][..], Ok(Some(35)), false),
        (&["35", "35"][..], Ok(Some(35)), false),
        (&["35", "35, 35"][..], Ok(Some(35)), false),
        (&["35, 36"][..], Err(()), false),
        (&["35", "36"][..], Err(()), false),
        (&["35,"][..], Err(()), false),
        (&["+35"][..], Err(()), true),
        (&["3 5"][..], Err(()), true),
        (&["12345678901234567890"][..], Err(()), true),
    ] {
        let l = lengths(fields);
        assert_eq!((l.value(), l.is_single()), (value, single), "{fields:?}");
    }
    let mut h = HeaderMap::new();
    h.append(header::CONTENT_LENGTH, "35, 35".parse().unwrap());
    h.append(header::CONTENT_LENGTH, "35".parse().unwrap());
    Lengths::of(&h).normalise(&mut h);
    assert_eq!(h.get_all(header::CONTENT_LENGTH).iter().count(), 1);
    assert_eq!(h[header::CONTENT_LENGTH], "35");
    // Disagreeing ones are left for the caller to refuse.
    let mut h = HeaderMap::new();
    h.append(header::CONTENT_LENGTH, "1, 2".parse().unwrap());
    Lengths::of(&h).normalise(&mut h);
    assert_eq!(h[header::CONTENT_LENGTH], "1, 2");
}

fn response(wire: &[u8], raw: Option<&mut RawFields>) -> Result<HeaderMap, WireError> {
    let head = parse_response(
        &mut BytesMut::from(wire),
        &Method::GET,
        &mut NameCache::default(),
        &mut HeaderMap::new(),
        raw,
    )?
    .expect("a whole head");
    assert_eq!(head.framing, Framing::Length(2));
    Ok(head.headers)
}

#[test]
fn an_upstreams_repeated_length_reaches_the_client_as_one_field() {
    for wire in [
        &b"HTTP/1.1 200 OK\r\ncontent-length: 2, 2\r\nx-a: 1\r\n\r\nok"[..],
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-a: 1\r\nContent-Length: 2\r\n\r\nok",
    ] {
        for passing in [false, true] {
            let mut raw = RawFields::default();
            let h = response(wire, passing.then_some(&mut raw)).unwrap();
            // Never passed through as bytes: the map holds the one length.
            assert!(!raw.is_active());
            let all: Vec<_> = h.get_all(header::CONTENT_LENGTH).iter().collect();
            assert_eq!(all, ["2"], "{}", String::from_utf8_lossy(wire));
            assert_eq!(h["x-a"], "1");
        }
    }
    // A single length still passes through as the upstream wrote it.
    let mut raw = RawFields::default();
    let wire = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
    response(wire, Some(&mut raw)).unwrap();
    assert_eq!((raw.is_active(), raw.length()), (true, Some(2)));
    for bad in [
        &b"HTTP/1.1 200 OK\r\ncontent-length: 2, 3\r\n\r\nok"[..],
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nok",
    ] {
        let e = response(bad, None).unwrap_err();
        assert!(e.to_string().contains("conflicting content-length"), "{e}");
    }
}

fn request_head(fields: &[(&str, &str)], body: &'static [u8]) -> String {
    let mut b = Request::post("/u");
    for (n, v) in fields {
        b = b.header(*n, *v);
    }
    let req = b.body(Full::new(Bytes::from_static(body))).unwrap();
    let mut buf = Vec::new();
    encode_request(&req, &crate::http1::AddedHeaders::none(), &mut buf);
    String::from_utf8(buf).unwrap()
}

#[test]
fn a_repeated_length_goes_to_the_upstream_as_one_field() {
    for fields in [
        &[("content-length", "2, 2"), ("x-a", "1")][..],
        &[
            ("content-length", "2"),
            ("x-a", "1"),
            ("content-length", "2"),
        ][..],
    ] {
        let head = request_head(fields, b"ok");
        assert_eq!(head.matches("content-length").count(), 1, "{head}");
        assert!(head.contains("content-length: 2\r\n"), "{head}");
        assert!(head.contains("x-a: 1\r\n"), "{head}");
    }
    // One length is written as it came.
    let head = request_head(&[("content-length", "02")], b"ok");
    assert!(head.contains("content-length: 02\r\n"), "{head}");
    // Disagreeing ones are not sent; the body's own size is.
    let head = request_head(&[("content-length", "2"), ("content-length", "3")], b"ok");
    assert_eq!(head.matches("content-length").count(), 1, "{head}");
    assert!(head.contains("content-length: 2\r\n"), "{head}");
}

/// Decodes `wire` as a chunked body all at once: the data, or the error's text.
fn chunked(wire: &[u8]) -> Result<Vec<u8>, String> {
    let mut d = Decoder::new(Framing::Chunked);
    let mut buf = BytesMut::from(wire);
    let mut data = Vec::new();
    loop {
        match d.decode(&mut buf).map_err(|e| e.to_string())? {
            Decoded::Data(b) => data.extend_from_slice(&b),
            Decoded::Trailers(_) | Decoded::End => return Ok(data),
            Decoded::More => return Err("more".into()),
        }
    }
}

#[test]
fn a_bare_lf_anywhere_in_the_chunked_framing_is_refused() {
    assert_eq!(
        chunked(b"5\r\nhello\r\n0\r\nx-t: 1\r\n\r\n").unwrap(),
        b"hello"
    );
    for (bad, says) in [
        (&b"5\nhello\r\n0\r\n\r\n"[..], "bare LF"),
        (b"5;a=b\nhello\r\n0\r\n\r\n", "bare LF"),
        (b"5\r\nhello\r\n0\n\r\n", "bare LF"),
        (b"5\r\nhello\r\n0\r\n\n", "bare LF"),
        (b"5\r\nhello\r\n0\r\nx-t: 1\n\r\n", "bare LF"),
        (b"5\r\nhello\r\n0\r\nx-t: 1\r\n\n", "bare LF"),
        (b"5\r\nhello\n0\r\n\r\n", "not followed by CRLF"),
        (b"5\r\r\nhello\r\n0\r\n\r\n", "not a hexadecimal size"),
        (b"5;a\rb\r\nhello\r\n0\r\n\r\n", "control character"),
        (b"5;a\0b\r\nhello\r\n0\r\n\r\n", "control character"),
    ] {
        let e = chunked(bad).unwrap_err();
        assert!(e.contains(says), "{}: {e}", String::from_utf8_lossy(bad));
    }
    // Blanks before an extension, and tabs in one, are allowed.
    assert_eq!(
        chunked(b"5 \t;a=\"b\tc\"\r\nhello\r\n0\r\n\r\n").unwrap(),
        b"hello"
    );
}

#[test]
fn chunk_extensions_are_capped_per_line_and_per_body() {
    // One line at the limit passes; one byte more is refused.
    let mut line = b"1;".to_vec();
    line.resize(MAX_CHUNK_LINE, b'x');
    let mut ok = line.clone();
    ok.extend_from_slice(b"\r\na\r\n0\r\n\r\n");
    assert_eq!(chunked(&ok).unwrap(), b"a");
    let mut long = line.clone();
    long.extend_from_slice(b"x\r\na\r\n0\r\n\r\n");
    assert!(chunked(&long).unwrap_err().contains("longer than 4096"));
    // Many short lines: the body's extensions add up.
    let ext = format!(";{}", "e".repeat(1023));
    let mut body = Vec::new();
    for _ in 0..MAX_CHUNK_EXTENSIONS / ext.len() {
        body.extend_from_slice(format!("1{ext}\r\na\r\n").as_bytes());
    }
    let mut whole = body.clone();
    whole.extend_from_slice(b"0\r\n\r\n");
    assert_eq!(
        chunked(&whole).unwrap().len(),
        MAX_CHUNK_EXTENSIONS / ext.len()
    );
    body.extend_from_slice(b"1;e\r\na\r\n0\r\n\r\n");
    let e = chunked(&body).unwrap_err();
    assert!(
        e.contains("chunk extensions adding up to more than 16384"),
        "{e}"
    );
    // Split at every byte, the same answer.
    let mut d = Decoder::new(Framing::Chunked);
    let mut buf = BytesMut::new();
    let mut failed = false;
    'feed: for b in &body {
        buf.extend_from_slice(&[*b]);
        loop {
            match d.decode(&mut buf) {
                Ok(Decoded::More) => break,
                Ok(Decoded::End) | Ok(Decoded::Trailers(_)) => break 'feed,
                Ok(Decoded::Data(_)) => {}
                Err(_) => {
                    failed = true;
                    break 'feed;
                }
            }
        }
    }
    assert!(failed);
}

mod against_httparse {
    //! The chunk-size line read here against `httparse::parse_chunk_size`, an independent
    //! reading of the same grammar: what is accepted here is accepted there with the same size
    //! and length; what is refused here and accepted there is only what is stricter on purpose
    //! (no size digits, a control character in an extension).

    use proptest::prelude::*;

    use super::super::chunk_size;

    fn line() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            Just(b"0".to_vec()),
            Just(b"a".to_vec()),
            Just(b"F".to_vec()),
            Just(b"1f".to_vec()),
            Just(b" ".to_vec()),
            Just(b"\t".to_vec()),
            Just(b";".to_vec()),
            Just(b"=".to_vec()),
            Just(b"\"".to_vec()),
            Just(b"x".to_vec()),
            Just(b"\r".to_vec()),
            Just(b"\n".to_vec()),
            Just(b"\r\n".to_vec()),
            Just(b"g".to_vec()),
            prop::collection::vec(any::<u8>(), 0..3),
        ];
        prop::collection::vec(piece, 0..12).prop_map(|v| v.concat())
    }

    proptest! {
        #[test]
        fn the_chunk_size_line_agrees_with_httparse(mut wire in line()) {
            wire.extend_from_slice(b"\r\n");
            // The first line, as the decoder takes it (up to its LF).
            let lf = wire.iter().position(|b| *b == b'\n').unwrap();
            let ours = chunk_size(&wire[..lf]);
            let theirs = httparse::parse_chunk_size(&wire);
            match (&ours, theirs) {
                (Ok((size, _)), Ok(httparse::Status::Complete((len, n)))) => {
                    prop_assert_eq!((*size, lf + 1), (n, len));
                }
                (Ok(_), other) => prop_assert!(false, "accepted here, not by httparse: {:?}", other),
                (Err(_), Ok(httparse::Status::Complete((len, _)))) => {
                    // The line as httparse read it, without its CRLF (a bare LF before that
                    // is, to it, a byte of an extension).
                    let line = &wire[..len - 2];
                    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
                    let ctl = line.iter().any(|b| (*b < 0x20 && *b != b'\t') || *b == 0x7f);
                    prop_assert!(digits == 0 || ctl, "refused here only: {:?}", line);
                }
                (Err(_), _) => {}
            }
        }
    }
}

mod no_bare_lf {
    //! Whatever bytes make a chunked body the decoder accepts to its end, every LF it read
    //! outside the chunks' data was part of a CRLF.

    use bytes::BytesMut;
    use proptest::prelude::*;

    use super::super::{Decoded, Decoder, Framing};

    /// A line end: mostly CRLF, sometimes a bare LF or a bare CR.
    fn eol() -> impl Strategy<Value = &'static str> {
        prop_oneof![6 => Just("\r\n"), 2 => Just("\n"), 1 => Just("\r")]
    }

    /// Chunked bodies, well-formed but for the line ends.
    fn wire() -> impl Strategy<Value = Vec<u8>> {
        let chunk = (
            prop::sample::select(vec!["x", "hello", "a\nb"]),
            any::<bool>(),
            eol(),
            eol(),
        )
            .prop_map(|(data, ext, size_end, data_end)| {
                let ext = if ext { ";e=1" } else { "" };
                format!("{:x}{ext}{size_end}{data}{data_end}", data.len())
            });
        (
            prop::collection::vec(chunk, 0..4),
            eol(),
            prop::option::of(eol()),
            eol(),
        )
            .prop_map(|(chunks, last_end, trailer, end)| {
                let trailer = trailer.map_or(String::new(), |e| format!("t: 1{e}"));
                format!("{}0{last_end}{trailer}{end}", chunks.concat()).into_bytes()
            })
    }

    proptest! {
        #[test]
        fn an_accepted_body_has_no_bare_lf(wire in wire()) {
            let mut d = Decoder::new(Framing::Chunked);
            let mut buf = BytesMut::from(&wire[..]);
            // Where the data was: a size may take in a separator's bytes as data.
            let mut data = vec![false; wire.len()];
            let ended = loop {
                match d.decode(&mut buf) {
                    Ok(Decoded::End) | Ok(Decoded::Trailers(_)) => break true,
                    // The data ends where the decoder stopped reading.
                    Ok(Decoded::Data(b)) => {
                        let end = wire.len() - buf.len();
                        data[end - b.len()..end].fill(true);
                    }
                    Ok(Decoded::More) | Err(_) => break false,
                }
            };
            if ended {
                let read = &wire[..wire.len() - buf.len()];
                for (i, b) in read.iter().enumerate() {
                    if *b == b'\n' && !data[i] {
                        prop_assert!(i > 0 && read[i - 1] == b'\r', "bare LF at {} in {:?}", i, String::from_utf8_lossy(read));
                    }
                }
            }
        }
    }
}
