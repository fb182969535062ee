//! HTTP/1.1 on the wire: the listener's request head parser and the chunked decoder both sides
//! share (the upstream's response head parser is in `response`).

use bytes::BytesMut;
use http::header::{self, HeaderMap, HeaderName};
use http::{Method, Version};

use super::hyper_oracle::hyper_reads;
use super::Input;
use crate::http1::server::{parse_request, Parsed, RequestHead, MAX_HEADERS};
use crate::http1::{chunk_header, chunked_end, Decoded, Decoder, Framing, NameCache};

/// The listener's request head parser (`http1::server::parse_request`), against
/// `httparse` as the oracle, over a buffer of pipelined requests.
///
/// Input: a control byte (the head size limit, where to cut the buffer for the incremental
/// check), then the bytes a client sent. Checks, for each head taken from the front:
/// - a request taken is one `httparse` parses completely, within the limit, with the same
///   method, target, version and fields (name and value, in order), and exactly its head's
///   bytes are removed from the buffer; a head left to hyper (`Other`) or not whole yet
///   (`Partial`) leaves the buffer as it was — `Partial` only for what `httparse` finds
///   incomplete and under the limit;
/// - the body's framing is what the fields say (RFC 9112 §6.3): chunked only from a single
///   `transfer-encoding: chunked` on HTTP/1.1 with no `content-length`, a length only from
///   `content-length` fields that all agree, never both; no `CONNECT`, no `upgrade`;
/// - every prefix of a head that parses is `Partial`, never refused;
/// - every header value is one `HeaderValue::from_bytes` accepts (the values are built
///   unchecked from `httparse`'s spans);
/// - hyper's HTTP/1.1 server (the proxy's fallback for what the fast path does not take) reads
///   the same bytes as the same request — method, target, version, fields — with the same body
///   framing (`hyper_oracle`).
pub fn request_head(data: &[u8]) {
    let mut input = Input::new(data);
    let control = input.byte();
    let max_head = if control & 1 == 0 { 16 * 1024 } else { 200 };
    let cut = usize::from(control >> 1);
    let mut buf = BytesMut::from(input.rest);
    let mut names = NameCache::default();
    for _ in 0..8 {
        let before = buf.clone();
        let mut spare = HeaderMap::new();
        let parsed = parse_request(&mut buf, &mut names, max_head, &mut spare);
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut oracle = httparse::Request::new(&mut fields);
        let status = oracle.parse(&before);
        let head = match parsed {
            Parsed::Partial => {
                assert_eq!(buf, before, "a partial head changed the buffer");
                assert!(before.len() < max_head, "partial past the limit");
                assert!(
                    matches!(status, Ok(httparse::Status::Partial)),
                    "partial where httparse says {status:?}"
                );
                return;
            }
            Parsed::Other => {
                assert_eq!(buf, before, "a head left for hyper was not left whole");
                return;
            }
            Parsed::Request(head) => head,
        };
        let Ok(httparse::Status::Complete(len)) = status else {
            panic!("a request taken where httparse says {status:?}");
        };
        assert!(
            len <= max_head,
            "a head of {len} bytes over the limit {max_head}"
        );
        assert_eq!(buf[..], before[len..], "the head taken is not httparse's");
        same_request(&head, &oracle);
        same_as_hyper(&head, &before, max_head);
        // A prefix of a head that parses is one to wait on.
        let prefix = cut % len;
        let mut part = BytesMut::from(&before[..prefix]);
        let p = parse_request(&mut part, &mut NameCache::default(), max_head, &mut spare);
        assert!(
            matches!(p, Parsed::Partial),
            "the first {prefix} bytes of a {len}-byte head: {p:?}"
        );
        // The next request only when this one has no body (its bytes are not a head).
        if head.body.is_some() {
            return;
        }
    }
}

/// The request `parse_request` took is the one hyper's server reads from the same bytes, with
/// its body framed the same way.
fn same_as_hyper(head: &RequestHead, bytes: &[u8], max_head: usize) {
    // Known and allowed: a `content-length` list of one number repeated (`5, 5`), which RFC
    // 9110 §8.6 lets a recipient take as that number, hyper refuses (it reads one number per
    // field). What the proxy does with it is issue 29's item 2 (framing), not this check's.
    // The codec has already made such a list one number, so the bytes are read again.
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut fields);
    if req.parse(bytes).is_ok()
        && req
            .headers
            .iter()
            .any(|h| h.name.eq_ignore_ascii_case("content-length") && h.value.contains(&b','))
    {
        return;
    }
    let Some(theirs) = hyper_reads(bytes, max_head) else {
        panic!("the fast path took a request hyper's server does not: {head:?}");
    };
    let (ours, hyper) = (&head.parts, &theirs.parts);
    assert_eq!(ours.method, hyper.method, "method (hyper)");
    assert_eq!(ours.uri, hyper.uri, "target (hyper)");
    assert_eq!(ours.version, hyper.version, "version (hyper)");
    // Repeated `content-length` fields of one value become one field of the number here
    // (RFC 9110 §8.6); hyper keeps one of them as written. Compared as numbers, the rest as is.
    let (mut a, mut b) = (ours.headers.clone(), hyper.headers.clone());
    assert!(a.get_all(header::CONTENT_LENGTH).iter().count() <= 1);
    assert_eq!(length_of(&a), length_of(&b), "content-length (hyper)");
    a.remove(header::CONTENT_LENGTH);
    b.remove(header::CONTENT_LENGTH);
    assert_eq!(a, b, "fields (hyper)");
    match head.body {
        None => assert!(theirs.end, "no body, but hyper reads one: {theirs:?}"),
        Some(Framing::Length(n)) => assert_eq!(theirs.exact, Some(n), "length (hyper)"),
        Some(_) => assert!(
            !theirs.end && theirs.exact.is_none(),
            "chunked, but hyper reads {theirs:?}"
        ),
    }
}

/// The request `parse_request` made is the one `httparse` read.
fn same_request(head: &RequestHead, oracle: &httparse::Request<'_, '_>) {
    let parts = &head.parts;
    assert_eq!(Some(parts.method.as_str()), oracle.method, "method");
    assert_ne!(parts.method, Method::CONNECT, "CONNECT is hyper's");
    let version = match oracle.version {
        Some(0) => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    assert_eq!(parts.version, version, "version");
    // A `#` is not allowed in a request target (RFC 9112 §3.2); the `http` crate (hyper's too)
    // takes it as a fragment's start and drops it with what follows, so the proxy routes and
    // forwards the part before it, as hyper does (the `same_as_hyper` check).
    let target = oracle.path.unwrap_or_default();
    let target = target.split('#').next().unwrap_or_default();
    if target.starts_with('/') {
        let pq = parts.uri.path_and_query().map(|p| p.as_str());
        assert_eq!(pq, Some(target), "target");
    }
    let wire: Vec<(String, &[u8])> = oracle
        .headers
        .iter()
        .map(|h| (h.name.to_ascii_lowercase(), h.value))
        .collect();
    let mut expected: Vec<(String, Vec<u8>)> =
        wire.iter().map(|(n, v)| (n.clone(), v.to_vec())).collect();
    one_length(&mut expected);
    assert_eq!(parts.headers.len(), expected.len(), "field count");
    for (name, value) in &parts.headers {
        assert!(
            http::HeaderValue::from_bytes(value.as_bytes()).is_ok(),
            "{name}: a value HeaderValue refuses: {value:?}"
        );
    }
    // The map keeps each name's values in order; compared name by name.
    for (name, _) in &expected {
        let got: Vec<&[u8]> = parts
            .headers
            .get_all(name.as_str())
            .iter()
            .map(|v| v.as_bytes())
            .collect();
        let want: Vec<&[u8]> = expected
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| &v[..])
            .collect();
        assert_eq!(got, want, "the values of {name}");
    }
    let values = |n: &HeaderName| -> Vec<&[u8]> {
        wire.iter()
            .filter(|(w, _)| w == n.as_str())
            .map(|(_, v)| *v)
            .collect()
    };
    assert!(values(&header::UPGRADE).is_empty(), "an upgrade is hyper's");
    let te = values(&header::TRANSFER_ENCODING);
    let lengths = lengths(&values(&header::CONTENT_LENGTH));
    match head.body {
        Some(Framing::Chunked) => {
            assert_eq!(te.len(), 1, "chunked from one transfer-encoding field");
            assert!(te[0].trim_ascii().eq_ignore_ascii_case(b"chunked"));
            assert_eq!(lengths, Ok(None), "chunked with a content-length");
            assert_eq!(parts.version, Version::HTTP_11, "chunked from HTTP/1.0");
        }
        Some(Framing::Length(n)) => {
            assert!(te.is_empty(), "a length with a transfer-encoding");
            assert_eq!(lengths, Ok(Some(n)), "the length");
            assert!(n > 0);
        }
        Some(f) => panic!("a request body framed {f:?}"),
        None => {
            assert!(te.is_empty(), "no body with a transfer-encoding");
            assert!(
                matches!(lengths, Ok(None | Some(0))),
                "no body: {lengths:?}"
            );
        }
    }
    if head.expect_continue {
        assert!(parts.version == Version::HTTP_11 && head.body.is_some());
    }
}

/// RFC 9110 §8.6 read plainly: every `content-length` value a comma-separated list of decimal
/// numbers, all the same. `Ok(None)` for none.
pub(super) fn lengths(values: &[&[u8]]) -> Result<Option<u64>, ()> {
    let mut found = None;
    for v in values {
        for part in std::str::from_utf8(v).map_err(|_| ())?.split(',') {
            let part = part.trim_matches([' ', '\t']);
            // Known (docs/fuzzing.md, "Found"): more than 19 digits are refused even when
            // leading zeros make the number small (RFC 9110 allows them; hyper reads them).
            if part.is_empty() || part.len() > 19 || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(());
            }
            let n: u64 = part.parse().map_err(|_| ())?;
            if found.is_some_and(|f| f != n) {
                return Err(());
            }
            found = Some(n);
        }
    }
    Ok(found)
}

/// The fields as the codec passes them on: repeated `content-length` fields, or a list in
/// one (`5, 5`), that agree become one field holding the number (RFC 9110 §8.6), where the
/// first stood; anything else is kept as it came.
pub(super) fn one_length(fields: &mut Vec<(String, Vec<u8>)>) {
    let values: Vec<&[u8]> = fields
        .iter()
        .filter(|(n, _)| n == "content-length")
        .map(|(_, v)| &v[..])
        .collect();
    let repeated = values.len() > 1 || values.iter().any(|v| v.contains(&b','));
    let Ok(Some(n)) = lengths(&values) else {
        return;
    };
    if !repeated {
        return;
    }
    let Some(first) = fields.iter().position(|(k, _)| k == "content-length") else {
        return;
    };
    fields.retain(|(k, _)| k != "content-length");
    fields.insert(first, ("content-length".into(), n.to_string().into_bytes()));
}

/// The one length a map's `content-length` fields agree on.
pub(super) fn length_of(headers: &HeaderMap) -> Result<Option<u64>, ()> {
    let values: Vec<&[u8]> = headers
        .get_all(header::CONTENT_LENGTH)
        .iter()
        .map(|v| v.as_bytes())
        .collect();
    lengths(&values)
}

/// What a decoder made of a whole body.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// The body ended, with these trailers (if any).
    End(Option<HeaderMap>),
    /// The input ended first.
    Incomplete,
    /// Refused (the message).
    Refused(String),
}

/// Runs a chunked decoder over `pieces`, handed over one after the other as reads would.
fn decode_chunked<'a>(pieces: impl Iterator<Item = &'a [u8]>) -> (Vec<u8>, Outcome) {
    let mut decoder = Decoder::new(Framing::Chunked);
    let mut buf = BytesMut::new();
    let mut data = Vec::new();
    for piece in pieces {
        buf.extend_from_slice(piece);
        loop {
            let before = buf.len();
            match decoder.decode(&mut buf) {
                Ok(Decoded::Data(d)) => {
                    assert!(!d.is_empty(), "an empty data frame");
                    assert!(buf.len() + d.len() <= before, "data out of nothing");
                    data.extend_from_slice(&d);
                }
                Ok(Decoded::More) => break,
                Ok(Decoded::Trailers(t)) => {
                    assert!(decoder.is_done());
                    return (data, Outcome::End(Some(t)));
                }
                Ok(Decoded::End) => {
                    assert!(decoder.is_done());
                    return (data, Outcome::End(None));
                }
                Err(e) => {
                    let message = e.to_string();
                    assert!(!message.is_empty());
                    return (data, Outcome::Refused(message));
                }
            }
        }
    }
    (data, Outcome::Incomplete)
}

/// The chunked decoder (`upstream::Decoder::decode` from `Decoder::new(Framing::Chunked)`, the
/// one both the listener's request bodies and the upstream's response bodies go through).
///
/// Input: a control byte (the size of the pieces the body arrives in), then the body. Checks:
/// - the body decoded whole and decoded arriving in pieces give the same data, trailers and
///   outcome (a streaming decoder must not depend on how reads split the bytes);
/// - data comes only out of the buffer, never empty, and a body that ended is `Done`;
/// - a body that ended, encoded again (`chunk_header`, `chunked_end`) and decoded, gives the
///   same data and trailers.
pub fn chunked(data: &[u8]) {
    let mut input = Input::new(data);
    let step = usize::from(input.byte() % 16) + 1;
    let body = input.rest;
    let whole = decode_chunked(std::iter::once(body));
    let pieces = decode_chunked(body.chunks(step));
    assert_eq!(whole, pieces, "whole vs in pieces of {step}");
    if let (data, Outcome::End(trailers)) = whole {
        let mut again = Vec::new();
        for (i, c) in data.chunks(7).enumerate() {
            chunk_header(&mut again, i > 0, c.len());
            again.extend_from_slice(c);
        }
        chunked_end(&mut again, !data.is_empty(), trailers.as_ref());
        let round = decode_chunked(std::iter::once(&again[..]));
        // A trailer section of no fields comes back as none.
        let trailers = trailers.filter(|t| !t.is_empty());
        let round = match round {
            (d, Outcome::End(t)) => (d, Outcome::End(t.filter(|t| !t.is_empty()))),
            other => other,
        };
        assert_eq!(round, (data, Outcome::End(trailers)), "re-encoded");
    }
}
