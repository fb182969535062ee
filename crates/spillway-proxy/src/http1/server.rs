//! HTTP/1.1 from a client, as bytes: the request head parsed with `httparse` into the `http`
//! types, the response head written straight from them, the response body framed
//! (RFC 9112 §6–7, §9). Pure functions over buffers, tested on bytes (`tests.rs`).
//!
//! Only requests the fast path serves come out of [`parse_request`] — a complete, valid head
//! with no body, one of a declared length or a chunked one (with or without
//! `Expect: 100-continue`), and no change of protocol; anything
//! else is [`Parsed::Other`] and hyper's server takes the connection over (`super`). The
//! response rules are those of hyper 1.x's server, which answered every request before: the
//! status line in the client's version, a `content-length` from the response or its body's
//! exact size, else chunked for HTTP/1.1 and close-delimited for HTTP/1.0; no body for `HEAD`,
//! 204 and 304; `connection: close` when the connection closes after an HTTP/1.1 answer,
//! `connection: keep-alive` when an HTTP/1.0 one stays open; a `date` when the response has none
//! (RFC 9110 §6.6.1).

use std::cell::RefCell;
use std::io::Write as _;
use std::mem::MaybeUninit;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{request, Method, Request, Response, StatusCode, Uri, Version};
use http_body::Body;
use smallvec::SmallVec;

pub(crate) use super::body::Framing;
use super::body::{may_trail, Lengths};
use super::header::{parsed_value, NameCache};
use super::hop::ConnectionTokens;
use super::raw::RawFields;

/// Most header fields a request head may have (hyper's server limit, as before).
pub(crate) const MAX_HEADERS: usize = 100;

/// Fields the proxy may add to a request before forwarding it (criticality, customer, deadline,
/// attempt, `x-forwarded-for`, a degraded mark, with some to spare).
const ADDED_FIELDS: usize = 8;

/// What the front of a connection's read buffer holds.
// Not boxed: one is made per request and moved straight into the request; a box would be an
// allocation per request.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Parsed {
    /// Not a whole head yet: read more.
    Partial,
    /// A request the fast path serves (its head removed from the buffer).
    Request(RequestHead),
    /// Anything else — an upgrade, an expectation other than `100-continue`, `CONNECT`,
    /// HTTP/2's preface, a transfer coding
    /// other than chunked, both framings, a malformed or oversized head: left in the buffer for
    /// hyper's server, which answers it as before.
    Other,
}

/// A parsed request head.
#[derive(Debug)]
pub(crate) struct RequestHead {
    pub parts: request::Parts,
    /// The client lets the connection carry another request after this one.
    pub keep_alive: bool,
    /// The client takes a trailer section after a chunked body (`te: trailers`).
    pub trailers: bool,
    /// How the body follows the head (`None`: no body).
    pub body: Option<Framing>,
    /// The client waits for `100 Continue` before it sends the body (`Expect: 100-continue`
    /// on an HTTP/1.1 request with a body; RFC 9110 §10.1.1 has a server ignore it from
    /// HTTP/1.0).
    pub expect_continue: bool,
}

/// Parses the request head at the front of `buf`, at most `max_head` bytes long, into `spare`
/// (an empty map whose room is reused: the connection's previous answer's).
pub(crate) fn parse_request(
    buf: &mut BytesMut,
    names: &mut NameCache,
    max_head: usize,
    spare: &mut HeaderMap,
) -> Parsed {
    if buf.starts_with(b"PRI ") {
        return Parsed::Other;
    }
    let mut fields = [MaybeUninit::<httparse::Header<'_>>::uninit(); MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_request_with_uninit_headers(
        &mut req,
        buf,
        &mut fields,
    ) {
        Ok(httparse::Status::Complete(len)) if len <= max_head => len,
        Ok(httparse::Status::Partial) if buf.len() < max_head => return Parsed::Partial,
        _ => return Parsed::Other,
    };
    let Some((method, version)) = request_line(&req) else {
        return Parsed::Other;
    };
    // Every field is looked at before anything is taken from the buffer: a head the fast path
    // does not serve stays whole for hyper.
    let base = buf.as_ptr() as usize;
    let span = |s: &[u8]| {
        let start = s.as_ptr() as usize - base;
        (start, start + s.len())
    };
    let target = span(req.path.unwrap_or_default().as_bytes());
    let mut fields: SmallVec<[(HeaderName, (usize, usize)); 16]> = SmallVec::new();
    let mut seen = Framers::default();
    for h in req.headers.iter() {
        let Some(name) = names.name(h.name.as_bytes()) else {
            return Parsed::Other;
        };
        if !seen.field(&name, h.value) {
            return Parsed::Other;
        }
        fields.push((name, span(h.value)));
    }
    let Some(body) = seen.body(version) else {
        return Parsed::Other;
    };
    let head = buf.split_to(len).freeze();
    let Ok(uri) = Uri::from_maybe_shared(head.slice(target.0..target.1)) else {
        return put_back(buf, &head);
    };
    // Room for the fields the proxy adds before forwarding (the request's context, the
    // forwarded-for list), so that none of them grows the map (a one-field head would
    // otherwise grow it three times, rehashing each time).
    let mut headers = std::mem::take(spare);
    headers.reserve(fields.len() + ADDED_FIELDS);
    // Drained where it stands (moving it into an iterator would copy it whole).
    for (name, (vs, ve)) in fields.drain(..) {
        headers.append(name, parsed_value(&head, vs, ve));
    }
    // `35, 35`, or two fields of 35: forwarded as one field of 35.
    seen.lengths.normalise(&mut headers);
    let (mut parts, ()) = Request::new(()).into_parts();
    parts.method = method;
    parts.uri = uri;
    parts.version = version;
    parts.headers = headers;
    Parsed::Request(RequestHead {
        parts,
        keep_alive: seen.conn.keeps_open(version),
        trailers: seen.trailers,
        body,
        expect_continue: seen.expect && version == Version::HTTP_11 && body.is_some(),
    })
}

/// The request line's method and version, `None` for what the fast path leaves to hyper
/// (`CONNECT`, a version other than 1.0 and 1.1).
#[inline]
fn request_line(req: &httparse::Request<'_, '_>) -> Option<(Method, Version)> {
    let version = match req.version {
        Some(1) => Version::HTTP_11,
        Some(0) => Version::HTTP_10,
        _ => return None,
    };
    match req.method.map(|m| Method::from_bytes(m.as_bytes())) {
        Some(Ok(m)) if m != Method::CONNECT => Some((m, version)),
        _ => None,
    }
}

/// What a request's fields say of how it is framed and answered, gathered as they are read
/// (a standard name compares as an enum tag) instead of looked up in the map afterwards.
#[derive(Default)]
struct Framers {
    conn: ConnectionTokens,
    /// The client takes a trailer section (`te: trailers`).
    trailers: bool,
    lengths: Lengths,
    /// A `transfer-encoding: chunked` field.
    chunked: bool,
    /// `Expect: 100-continue`.
    expect: bool,
}

impl Framers {
    /// Takes in one field; `false` for one that leaves the request to hyper's server.
    #[inline]
    fn field(&mut self, name: &HeaderName, value: &[u8]) -> bool {
        if *name == header::CONNECTION {
            self.conn.add(value);
        } else if *name == header::TE {
            self.trailers |= value
                .split(|b| *b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"trailers"));
        } else if *name == header::CONTENT_LENGTH {
            self.lengths.add(value);
        } else if *name == header::TRANSFER_ENCODING {
            // Chunked alone, once; any other coding (or a list) is hyper's to refuse.
            if self.chunked || !value.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                return false;
            }
            self.chunked = true;
        } else if *name == header::EXPECT {
            // `100-continue` is compared without case (RFC 9110 §10.1.1); any other
            // expectation is hyper's, as before. The field itself is forwarded, as hyper's
            // server leaves it in the request.
            if !value.trim_ascii().eq_ignore_ascii_case(b"100-continue") {
                return false;
            }
            self.expect = true;
        } else if *name == header::UPGRADE {
            return false;
        }
        true
    }

    /// How the body follows the head (`Some(None)`: no body), `None` for a framing hyper's
    /// server is to refuse.
    #[inline]
    fn body(&self, version: Version) -> Option<Option<Framing>> {
        // One that does not parse, or lengths that disagree (RFC 9110 §8.6): hyper's server
        // answers them with a 400.
        let Ok(length) = self.lengths.value() else {
            return None;
        };
        // Both framings (a smuggling pattern, RFC 9112 §6.3), or chunked from HTTP/1.0:
        // hyper's to refuse.
        if self.chunked && (length.is_some() || version == Version::HTTP_10) {
            return None;
        }
        Some(match (self.chunked, length) {
            (true, _) => Some(Framing::Chunked),
            (false, Some(n)) if n > 0 => Some(Framing::Length(n)),
            _ => None,
        })
    }
}

/// Puts a head taken from the buffer back in front of it, for hyper (a target or value only
/// found wrong once taken: rare, so copied).
fn put_back(buf: &mut BytesMut, head: &[u8]) -> Parsed {
    let mut whole = BytesMut::with_capacity(head.len() + buf.len());
    whole.extend_from_slice(head);
    whole.extend_from_slice(buf);
    *buf = whole;
    Parsed::Other
}

/// The request a response answers, as far as its head depends on it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Answering {
    pub version: Version,
    pub head: bool,
    /// The connection may carry another request after this answer.
    pub keep_alive: bool,
    /// The client takes trailers.
    pub trailers: bool,
}

/// How the response's body follows its head.
#[derive(Debug)]
pub(crate) struct Head {
    pub framing: Framing,
    /// The connection stays open after the body.
    pub keep_alive: bool,
    /// The trailer fields the response announced (`trailer`), when the client takes trailers
    /// and the body is chunked: only those are sent (hyper's rule).
    pub trailers: Option<Vec<HeaderName>>,
}

/// Writes `res`'s head into `buf`, with the upstream's fields `raw` passed through as bytes
/// besides those in its map; returns how its body follows, and whether the connection stays
/// open after it (`keep_alive` unless the framing or the response itself closes it).
pub(crate) fn encode_response<B: Body>(
    res: &Response<B>,
    raw: Option<&RawFields>,
    req: Answering,
    buf: &mut Vec<u8>,
) -> Head {
    let status = res.status();
    let headers = res.headers();
    let reason = res.extensions().get::<hyper::ext::ReasonPhrase>();
    status_line(buf, req.version, status, reason);
    let mut out = Written::new(req.keep_alive);
    for (name, value) in headers {
        if out.field(name, value, headers, req.trailers, buf) {
            buf.extend_from_slice(name.as_str().as_bytes());
            buf.extend_from_slice(b": ");
            buf.extend_from_slice(value.as_bytes());
            buf.extend_from_slice(b"\r\n");
        }
    }
    if let Some(r) = raw {
        // End-to-end fields the proxy does not act on, a length and a date (`RawFields`; every
        // `content-length` is among them when one is, none in the map).
        r.write(buf);
        out.length = out.length.or(r.length());
        out.has_date |= r.has_date();
    }
    let bodiless = status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED;
    let framing = if req.head || bodiless || status.is_informational() {
        Framing::Empty
    } else {
        out.framing(res.body(), req.version, buf)
    };
    if req.version == Version::HTTP_10 {
        if out.keep_alive {
            buf.extend_from_slice(b"connection: keep-alive\r\n");
        }
    } else if !out.keep_alive {
        buf.extend_from_slice(b"connection: close\r\n");
    }
    if !out.has_date {
        buf.extend_from_slice(b"date: ");
        now_imf_fixdate(buf);
        buf.extend_from_slice(b"\r\n");
    }
    buf.extend_from_slice(b"\r\n");
    Head {
        framing,
        keep_alive: out.keep_alive,
        trailers: out.announced.filter(|_| framing == Framing::Chunked),
    }
}

/// Appends the status line, in the client's version, with the upstream's reason phrase when
/// it was not the canonical one.
#[inline]
fn status_line(
    buf: &mut Vec<u8>,
    version: Version,
    status: StatusCode,
    reason: Option<&hyper::ext::ReasonPhrase>,
) {
    buf.extend_from_slice(if version == Version::HTTP_10 {
        b"HTTP/1.0 "
    } else {
        b"HTTP/1.1 "
    });
    buf.extend_from_slice(status.as_str().as_bytes());
    buf.push(b' ');
    match reason {
        Some(r) => buf.extend_from_slice(r.as_bytes()),
        None => buf.extend_from_slice(status.canonical_reason().unwrap_or("<none>").as_bytes()),
    }
    buf.extend_from_slice(b"\r\n");
}

/// What a response's fields, as they are written, say of its framing, its connection and its
/// trailers.
struct Written {
    /// The connection stays open after the body.
    keep_alive: bool,
    /// The body's length, from a `content-length` the response carries.
    length: Option<u64>,
    /// The map's `content-length` fields, looked at once the first is met.
    lengths: Option<Lengths>,
    has_date: bool,
    /// The trailer fields the response announced, when the client takes trailers.
    announced: Option<Vec<HeaderName>>,
}

impl Written {
    fn new(keep_alive: bool) -> Self {
        Written {
            keep_alive,
            length: None,
            lengths: None,
            has_date: false,
            announced: None,
        }
    }

    /// Takes in one field of `headers`; `true`: it is to be written as it is (a repeated
    /// length is written here, once).
    #[inline]
    fn field(
        &mut self,
        name: &HeaderName,
        value: &HeaderValue,
        headers: &HeaderMap,
        trailers: bool,
        buf: &mut Vec<u8>,
    ) -> bool {
        if *name == header::TRANSFER_ENCODING {
            // The framing is this server's to choose (a forwarded response had its hop-by-hop
            // fields removed already).
            return false;
        }
        if *name == header::CONTENT_LENGTH {
            let l = *self.lengths.get_or_insert_with(|| Lengths::of(headers));
            match l.value() {
                // Not a length, or lengths that disagree: left out, the body's own size is
                // used.
                Err(()) => return false,
                Ok(n) if l.is_single() => self.length = n,
                // Repeated (`35, 35`, or two fields): written once, as one number
                // (RFC 9110 §8.6).
                Ok(n) => {
                    if self.length.is_none() {
                        self.length = n;
                        let _ = write!(buf, "content-length: {}\r\n", n.unwrap_or(0));
                    }
                    return false;
                }
            }
        } else if *name == header::CONNECTION {
            let mut c = ConnectionTokens::default();
            c.add(value.as_bytes());
            self.keep_alive &= !c.close();
        } else if *name == header::DATE {
            self.has_date = true;
        } else if *name == header::TRAILER && trailers {
            let list = self.announced.get_or_insert_with(Vec::new);
            for t in value.as_bytes().split(|b| *b == b',') {
                if let Ok(n) = HeaderName::from_bytes(t.trim_ascii()) {
                    if may_trail(&n) {
                        list.push(n);
                    }
                }
            }
        }
        true
    }

    /// The framing of a body the response may have, writing the field that announces it when
    /// the response's own fields did not: its length, the body's exact size, else chunked for
    /// HTTP/1.1 and close-delimited (closing the connection) for HTTP/1.0.
    #[inline]
    fn framing<B: Body>(&mut self, body: &B, version: Version, buf: &mut Vec<u8>) -> Framing {
        if let Some(n) = self.length {
            if n == 0 {
                Framing::Empty
            } else {
                Framing::Length(n)
            }
        } else if body.is_end_stream() {
            buf.extend_from_slice(b"content-length: 0\r\n");
            Framing::Empty
        } else if let Some(n) = body.size_hint().exact() {
            let _ = write!(buf, "content-length: {n}\r\n");
            if n == 0 {
                Framing::Empty
            } else {
                Framing::Length(n)
            }
        } else if version == Version::HTTP_11 {
            buf.extend_from_slice(b"transfer-encoding: chunked\r\n");
            Framing::Chunked
        } else {
            self.keep_alive = false;
            Framing::UntilClose
        }
    }
}

/// The trailer fields of `all` that `allowed` lists.
pub(crate) fn allowed_trailers(all: HeaderMap, allowed: &[HeaderName]) -> HeaderMap {
    let mut out = HeaderMap::new();
    for name in allowed {
        for v in all.get_all(name) {
            out.append(name.clone(), v.clone());
        }
    }
    out
}

thread_local! {
    /// The current second and its IMF-fixdate, formatted once a second per thread.
    static DATE: RefCell<(u64, Bytes)> = const { RefCell::new((u64::MAX, Bytes::new())) };
}

/// Appends the current time as an HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`).
fn now_imf_fixdate(buf: &mut Vec<u8>) {
    let now = SystemTime::now();
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    DATE.with(|d| {
        let mut d = d.borrow_mut();
        if d.0 != secs {
            *d = (secs, Bytes::from(httpdate::fmt_http_date(now)));
        }
        buf.extend_from_slice(&d.1);
    });
}
