//! Response fields passed through as bytes (`codec::raw`): the client gets what the map would
//! have carried, and what the proxy acts on never passes unseen.

use bytes::BytesMut;
use http::{HeaderMap, Method, StatusCode};
use proptest::prelude::*;

use super::super::*;

fn parse_with(
    wire: &[u8],
    method: &Method,
    raw: Option<&mut RawFields>,
) -> Result<Option<ResponseHead>, WireError> {
    parse_response(
        &mut BytesMut::from(wire),
        method,
        &mut NameCache::default(),
        &mut HeaderMap::new(),
        raw,
    )
}

fn parse_raw(wire: &[u8], method: Method) -> (ResponseHead, RawFields) {
    let mut raw = RawFields::default();
    let h = parse_with(wire, &method, Some(&mut raw))
        .unwrap()
        .expect("complete");
    (h, raw)
}

fn written(raw: &RawFields) -> String {
    let mut v = Vec::new();
    raw.write(&mut v);
    String::from_utf8(v).unwrap()
}

/// Every field a response carries on: those in its map and those passed through, as
/// (lower-case name, value), sorted.
fn fields(h: &ResponseHead, raw: Option<&RawFields>) -> Vec<(String, Vec<u8>)> {
    let mut all: Vec<_> = h
        .headers
        .iter()
        .map(|(n, v)| (n.as_str().to_string(), v.as_bytes().to_vec()))
        .collect();
    if let Some(r) = raw.filter(|r| r.is_active()) {
        let mut bytes = Vec::new();
        r.write(&mut bytes);
        bytes.extend_from_slice(b"\r\n");
        let mut parsed = [httparse::EMPTY_HEADER; 100];
        match httparse::parse_headers(&bytes, &mut parsed) {
            Ok(httparse::Status::Complete((_, got))) => all.extend(
                got.iter()
                    .map(|f| (f.name.to_ascii_lowercase(), f.value.to_vec())),
            ),
            other => panic!("the passed-through lines are not header fields: {other:?}"),
        }
    }
    all.sort();
    all
}

#[test]
fn end_to_end_fields_pass_as_the_upstream_wrote_them() {
    let wire = b"HTTP/1.1 200 OK\r\nServer: up\r\nX-Spillway-Cost: 0.002\r\n\
        Connection: keep-alive\r\nContent-Length: 2\r\n\
        endpoint-load-metrics: TEXT cpu_utilization=0.5\r\n\
        Date: Tue, 01 Dec 2026 21:48:35 GMT\r\nx-a: 1  \r\nx-a: 2\r\n\r\nok";
    let (h, raw) = parse_raw(wire, Method::GET);
    assert!(raw.is_active());
    assert_eq!(
        written(&raw),
        "Server: up\r\nX-Spillway-Cost: 0.002\r\nContent-Length: 2\r\n\
         endpoint-load-metrics: TEXT cpu_utilization=0.5\r\n\
         Date: Tue, 01 Dec 2026 21:48:35 GMT\r\nx-a: 1\r\nx-a: 2\r\n",
        "the upstream's spelling and order, without trailing whitespace"
    );
    // Adjacent lines are one range: the hop-by-hop field and the trailing spaces split them.
    assert_eq!(raw.ranges(), 3);
    let map: Vec<_> = h.headers.iter().collect();
    assert_eq!(
        map.len(),
        1,
        "only the hop-by-hop field is in the map: {map:?}"
    );
    assert_eq!(h.headers["connection"], "keep-alive");
    assert_eq!(raw.length(), Some(2));
    assert!(raw.has_date());
    assert_eq!(raw.cost().unwrap(), "0.002");
    assert_eq!(raw.load_metrics().unwrap(), "TEXT cpu_utilization=0.5");
    assert_eq!((h.framing, h.keep_alive), (Framing::Length(2), true));
}

#[test]
fn what_the_proxy_removes_or_reads_goes_into_the_map() {
    let wire = b"HTTP/1.1 200 OK\r\nTE: trailers\r\nUpgrade: x\r\nTrailer: grpc-message\r\n\
        Keep-Alive: timeout=5\r\nGrpc-Status: 0\r\nProxy-Connection: x\r\n\
        Transfer-Encoding: chunked\r\nProxy-Authenticate: Basic\r\n\
        Proxy-Authorization: Basic x\r\nx-end-to-end: 1\r\n\r\n";
    let (h, raw) = parse_raw(wire, Method::GET);
    assert!(raw.is_active());
    assert_eq!(written(&raw), "x-end-to-end: 1\r\n");
    for name in [
        "te",
        "upgrade",
        "trailer",
        "keep-alive",
        "grpc-status",
        "proxy-connection",
        "transfer-encoding",
        "proxy-authenticate",
        "proxy-authorization",
    ] {
        assert!(h.headers.contains_key(name), "{name} in the map");
    }
    assert_eq!(h.framing, Framing::Chunked);
    assert_eq!(raw.length(), None);
}

#[test]
fn responses_the_proxy_reads_or_that_end_at_once_keep_every_field_in_the_map() {
    let cases: [(&[u8], Method, &str); 9] = [
        (
            b"HTTP/1.1 503 Busy\r\nretry-after: 1\r\ncontent-length: 1\r\n\r\nx",
            Method::GET,
            "a 503",
        ),
        (
            b"HTTP/1.1 429 Slow\r\nx-spillway-retry: no\r\ncontent-length: 1\r\n\r\nx",
            Method::GET,
            "a 429",
        ),
        (
            b"HTTP/1.1 200 OK\r\nx-a: 1\r\ncontent-length: 5\r\n\r\n",
            Method::HEAD,
            "HEAD's answer",
        ),
        (
            b"HTTP/1.1 204 No Content\r\nx-a: 1\r\n\r\n",
            Method::GET,
            "a 204",
        ),
        (
            b"HTTP/1.1 304 Not Modified\r\nx-a: 1\r\n\r\n",
            Method::GET,
            "a 304",
        ),
        (
            b"HTTP/1.1 200 OK\r\nx-a: 1\r\ncontent-length: 0\r\n\r\n",
            Method::GET,
            "an empty body",
        ),
        (
            b"HTTP/1.1 200 OK\r\nx-hop: 1\r\nconnection: x-hop\r\ncontent-length: 1\r\n\r\nx",
            Method::GET,
            "a field named by connection",
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n",
            Method::GET,
            "a length beside chunked",
        ),
        (
            b"HTTP/1.1 200 OK\r\nconnection: close, x-hop\r\nx-hop: 1\r\n\r\n",
            Method::GET,
            "a field named after close",
        ),
    ];
    for (wire, method, why) in cases {
        let (h, raw) = parse_raw(wire, method.clone());
        assert!(!raw.is_active(), "{why}: not passed through");
        assert_eq!(written(&raw), "", "{why}: nothing left of the fields");
        let whole = parse_with(wire, &method, None).unwrap().unwrap();
        assert_eq!(
            fields(&h, None),
            fields(&whole, None),
            "{why}: the whole map"
        );
    }
}

#[test]
fn a_new_head_forgets_the_last_ones_fields() {
    let mut raw = RawFields::default();
    let ok = b"HTTP/1.1 200 OK\r\nx-a: 1\r\nx-spillway-cost: 2\r\ncontent-length: 1\r\n\r\nx";
    parse_with(ok, &Method::GET, Some(&mut raw))
        .unwrap()
        .unwrap();
    assert!(raw.is_active() && raw.cost().is_some());
    let busy = b"HTTP/1.1 503 Busy\r\ncontent-length: 1\r\n\r\nx";
    let h = parse_with(busy, &Method::GET, Some(&mut raw))
        .unwrap()
        .unwrap();
    assert_eq!(h.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(!raw.is_active());
    assert!(raw.cost().is_none() && raw.length().is_none() && written(&raw).is_empty());
    raw.clear();
    assert!(!raw.is_active());
}

/// Heads with fields of every kind `raw::kind` tells apart, in any order and spelling.
fn head_wire() -> impl Strategy<Value = Vec<u8>> {
    let status = prop_oneof![
        Just(&b"HTTP/1.1 200 OK\r\n"[..]),
        Just(&b"HTTP/1.0 200 OK\r\n"[..]),
        Just(&b"HTTP/1.1 503 Service Unavailable\r\n"[..]),
        Just(&b"HTTP/1.1 204 No Content\r\n"[..]),
        Just(&b"HTTP/1.1 404 Gone Fishing\r\n"[..]),
    ];
    let field = prop_oneof![
        Just(&b"Server: s\r\n"[..]),
        Just(&b"x-a: 1  \r\n"[..]),
        Just(&b"X-A: 2\r\n"[..]),
        Just(&b"content-length: 3\r\n"[..]),
        Just(&b"Content-Length: 0\r\n"[..]),
        Just(&b"transfer-encoding: chunked\r\n"[..]),
        Just(&b"connection: close\r\n"[..]),
        Just(&b"Connection: keep-alive, x-a\r\n"[..]),
        Just(&b"date: today\r\n"[..]),
        Just(&b"X-Spillway-Cost: 0.5\r\n"[..]),
        Just(&b"endpoint-load-metrics: TEXT cpu_utilization=0.1\r\n"[..]),
        Just(&b"trailer: grpc-status\r\n"[..]),
        Just(&b"keep-alive: timeout=1\r\n"[..]),
        Just(&b"te: trailers\r\n"[..]),
    ];
    (status, prop::collection::vec(field, 0..8)).prop_map(|(s, fs)| {
        let mut v = s.to_vec();
        for f in fs {
            v.extend_from_slice(f);
        }
        v.extend_from_slice(b"\r\n");
        v
    })
}

proptest! {
    /// Passing through changes where the fields are, never which: the same answer, framing and
    /// reuse, and the same fields (map and bytes together) as a head read into a map alone.
    #[test]
    fn passing_through_carries_the_same_fields(
        wire in head_wire(),
        head in any::<bool>(),
    ) {
        let method = if head { Method::HEAD } else { Method::GET };
        let mut raw = RawFields::default();
        let passed = parse_with(&wire, &method, Some(&mut raw));
        let whole = parse_with(&wire, &method, None);
        match (passed, whole) {
            (Ok(Some(p)), Ok(Some(w))) => {
                prop_assert_eq!((p.status, p.framing, p.keep_alive), (w.status, w.framing, w.keep_alive));
                prop_assert_eq!(fields(&p, Some(&raw)), fields(&w, None));
            }
            (Err(_), Err(_)) => {}
            (p, w) => prop_assert!(false, "different outcomes: {:?} / {:?}", p.map(|_| ()), w.map(|_| ())),
        }
    }
}
