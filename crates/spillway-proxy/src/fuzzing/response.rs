//! HTTP/1.1 on the wire, the upstream side: the response head parser.

use bytes::BytesMut;
use http::header::{self, HeaderMap, HeaderName};
use http::{Method, StatusCode};

use super::http1::{length_of, lengths, one_length};
use super::hyper_oracle::hyper_response;
use super::Input;
use crate::http1::client::{parse_response, ResponseHead, MAX_HEAD};
use crate::http1::{Framing, NameCache, RawFields};

/// The upstream's response head parser (`http1::client::parse_response`), against
/// `httparse` and RFC 9112 §6.3 as the oracle.
///
/// Input: a control byte (the request's method, `GET` or `HEAD`; whether the client side takes
/// fields as raw bytes; where to cut for the incremental check), then what the upstream sent.
/// Checks:
/// - a head parsed is `httparse`'s final (non-1xx) response, with the same status and, without
///   raw fields, the same fields; exactly the bytes up to its end are removed;
/// - its framing and keep-alive are RFC 9112 §6.3's, computed separately from `httparse`'s
///   fields; a `content-length` beside `transfer-encoding` is not passed on;
/// - a response the oracle finds well-formed is parsed, not refused (and the other way round);
/// - a prefix of a head that parses is incomplete, never refused;
/// - hyper's HTTP/1.1 client (which the upstream side used before its own codec) reads the
///   same status, version and fields, and the same body framing (`hyper_oracle`).
pub fn response_head(data: &[u8]) {
    let mut input = Input::new(data);
    let control = input.byte();
    let method = if control & 1 == 0 {
        Method::GET
    } else {
        Method::HEAD
    };
    let with_raw = control & 2 != 0;
    let cut = usize::from(control >> 2);
    let bytes = input.rest;
    let parse = |bytes: &[u8]| {
        let mut buf = BytesMut::from(bytes);
        let mut raw = RawFields::default();
        let raw_ref = if with_raw { Some(&mut raw) } else { None };
        let mut spare = HeaderMap::new();
        let r = parse_response(
            &mut buf,
            &method,
            &mut NameCache::default(),
            &mut spare,
            raw_ref,
        );
        (r, buf.len())
    };
    let (result, left) = parse(bytes);
    let expected = expected_response(bytes, &method);
    match (&result, &expected) {
        (Ok(Some(head)), Expected::Head(want)) => {
            assert_eq!(bytes.len() - left, want.end, "bytes taken");
            assert_eq!(head.status.as_u16(), want.status, "status");
            assert_eq!((head.framing, head.keep_alive), want.framing, "framing");
            if want.both {
                assert!(!head.headers.contains_key(header::CONTENT_LENGTH));
            }
            if !with_raw {
                let mut got: Vec<(String, Vec<u8>)> = head
                    .headers
                    .iter()
                    .filter(|(n, _)| !(want.both && *n == header::CONTENT_LENGTH))
                    .map(|(n, v)| (n.as_str().to_string(), v.as_bytes().to_vec()))
                    .collect();
                let mut fields: Vec<(String, Vec<u8>)> = want
                    .fields
                    .iter()
                    .filter(|(n, _)| !(want.both && n == "content-length"))
                    .cloned()
                    .collect();
                got.sort();
                fields.sort();
                assert_eq!(got, fields, "fields");
            }
            for v in head.headers.values() {
                assert!(http::HeaderValue::from_bytes(v.as_bytes()).is_ok());
            }
            if !with_raw {
                same_response_as_hyper(head, bytes, &method);
            }
            let prefix = cut % want.end;
            let (p, _) = parse(&bytes[..prefix]);
            assert!(
                matches!(p, Ok(None)),
                "the first {prefix} bytes of a {}-byte response: {p:?}",
                want.end
            );
        }
        (Ok(None), Expected::Partial) | (Err(_), Expected::Refused) => {}
        (r, e) => panic!("parsed {r:?}, expected {e:?}"),
    }
    if let Err(e) = &result {
        assert!(!e.to_string().is_empty());
    }
}

/// The response `parse_response` read is the one hyper's client reads from the same bytes,
/// its body framed the same way (a chunked body and one read until the connection closes both
/// have no length for hyper).
fn same_response_as_hyper(head: &ResponseHead, bytes: &[u8], method: &Method) {
    let Some(theirs) = hyper_response(bytes, method) else {
        panic!("parsed a response hyper's client refuses: {head:?}");
    };
    let hyper = &theirs.parts;
    assert_eq!(head.status, hyper.status, "status (hyper)");
    assert_eq!(head.version, hyper.version, "version (hyper)");
    let mut ours = head.headers.clone();
    let mut hypers = hyper.headers.clone();
    // hyper keeps a `content-length` beside `transfer-encoding`; the proxy drops it (RFC 9112
    // §6.3), as it must before forwarding.
    if hypers.contains_key(header::TRANSFER_ENCODING) {
        hypers.remove(header::CONTENT_LENGTH);
        ours.remove(header::CONTENT_LENGTH);
    }
    // As for requests: repeated `content-length` fields of one value are one field of the
    // number here, hyper keeps one as written; compared as numbers. Lengths that disagree
    // pass on as they came only where no body is read by them (HEAD, 204, 304).
    if length_of(&ours).is_ok() {
        assert!(ours.get_all(header::CONTENT_LENGTH).iter().count() <= 1);
        assert_eq!(
            length_of(&ours),
            length_of(&hypers),
            "content-length (hyper)"
        );
    } else {
        assert_eq!(
            head.framing,
            Framing::Empty,
            "lengths that disagree framed a body"
        );
    }
    ours.remove(header::CONTENT_LENGTH);
    hypers.remove(header::CONTENT_LENGTH);
    assert_eq!(ours, hypers, "fields (hyper)");
    match head.framing {
        Framing::Empty => assert!(theirs.end, "no body, hyper reads {theirs:?}"),
        Framing::Length(n) => assert_eq!(theirs.exact, Some(n), "length (hyper)"),
        Framing::Chunked | Framing::UntilClose => assert!(
            !theirs.end && theirs.exact.is_none(),
            "{:?}, hyper reads {theirs:?}",
            head.framing
        ),
    }
}

/// What the oracle expects of a response.
#[derive(Debug)]
enum Expected {
    Partial,
    Refused,
    Head(Want),
}

#[derive(Debug)]
struct Want {
    /// Where the final head ends.
    end: usize,
    status: u16,
    /// Framing and keep-alive.
    framing: (Framing, bool),
    /// Both a transfer coding and a length.
    both: bool,
    /// The fields, names lower-cased.
    fields: Vec<(String, Vec<u8>)>,
}

/// RFC 9112 read plainly over `httparse`'s fields.
fn expected_response(bytes: &[u8], method: &Method) -> Expected {
    let mut at = 0;
    loop {
        let rest = &bytes[at..];
        let mut fields = [httparse::EMPTY_HEADER; 100];
        let mut res = httparse::Response::new(&mut fields);
        let len = match res.parse(rest) {
            Ok(httparse::Status::Complete(len)) if len <= MAX_HEAD => len,
            Ok(httparse::Status::Partial) if rest.len() < MAX_HEAD => return Expected::Partial,
            _ => return Expected::Refused,
        };
        let code = res.code.unwrap_or(0);
        if !(100..=999).contains(&code) || code == 101 {
            return Expected::Refused;
        }
        if code < 200 {
            at += len;
            continue;
        }
        let mut list = Vec::new();
        for f in res.headers.iter() {
            if HeaderName::from_bytes(f.name.as_bytes()).is_err() {
                return Expected::Refused;
            }
            list.push((f.name.to_ascii_lowercase(), f.value.to_vec()));
        }
        let all = |n: &str| -> Vec<&[u8]> {
            list.iter()
                .filter(|(k, _)| k == n)
                .map(|(_, v)| &v[..])
                .collect()
        };
        let tokens: Vec<Vec<u8>> = all("connection")
            .iter()
            .flat_map(|v| v.split(|b| *b == b','))
            .map(|t| t.trim_ascii().to_ascii_lowercase())
            .collect();
        let close = tokens.iter().any(|t| t == b"close");
        let keep = tokens.iter().any(|t| t == b"keep-alive");
        let version11 = res.version == Some(1);
        let keep_alive = !close && (version11 || keep);
        let te = all("transfer-encoding");
        let length = lengths(&all("content-length"));
        let both = !te.is_empty() && length != Ok(None);
        let framing = if *method == Method::HEAD || code == 204 || code == 304 {
            (Framing::Empty, keep_alive)
        } else if !te.is_empty() {
            // HTTP/1.0 has no transfer codings: faulty framing (RFC 9112 §6.1).
            if !version11 {
                return Expected::Refused;
            }
            if te.len() != 1 || !te[0].trim_ascii().eq_ignore_ascii_case(b"chunked") {
                return Expected::Refused;
            }
            (Framing::Chunked, keep_alive && !both)
        } else {
            match length {
                Ok(Some(0)) => (Framing::Empty, keep_alive),
                Ok(Some(n)) => (Framing::Length(n), keep_alive),
                Ok(None) => (Framing::UntilClose, false),
                Err(()) => return Expected::Refused,
            }
        };
        debug_assert!(StatusCode::from_u16(code).is_ok());
        one_length(&mut list);
        return Expected::Head(Want {
            end: at + len,
            status: code,
            framing,
            both,
            fields: list,
        });
    }
}
