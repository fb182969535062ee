//! HTTP/1.1 to an upstream, as bytes: the request head written straight from the `http` types,
//! the response head parsed with `httparse` into them (or, for a client the fast path writes,
//! its fields left as bytes where the proxy does not act on them: [`raw`]), and the body
//! framing both ways (RFC 9112 §6–7).
//!
//! Why the proxy's own and not hyper's client: hyper's HTTP/1.1 client hands every request to
//! its connection through a channel and the response back through a oneshot, and the response
//! body through another channel, even when, as here, one task drives the connection
//! (`super::http1`): each request and response is moved through them, copied whole at every
//! hop, for a hand-over that needs no channel at all. What is left here is what the wire needs:
//! write a head, parse a head, frame a body. Pure functions over
//! buffers, no I/O, so every rule is tested on bytes (`tests.rs`).
//!
//! The rules follow RFC 9112 and, where the RFC leaves a choice, hyper 1.x's client, which the
//! proxy used before: the same request framing (`content-length` kept when given, else the
//! body's exact size, else chunked), the same limits (100 header fields; a head of at most
//! 8 KiB + 100 × 4 KiB), informational (1xx) responses skipped, a non-canonical reason phrase
//! kept for the client. Unlike hyper, a `GET` whose body has no known length is sent chunked
//! rather than without its body: a proxy must not drop what a client sent.

use std::io::Write as _;
use std::mem::MaybeUninit;

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName};
use http::{Method, Request, StatusCode, Version};
use http_body::Body;
use smallvec::SmallVec;

#[cfg(test)]
use super::body::MAX_CHUNK_LINE;
#[cfg(test)]
use super::body::{chunk_header, chunked_end, Decoded, Decoder};
use super::body::{is_chunked, Framing, Lengths};
use super::header::{parsed_value, NameCache};
use super::hop::ConnectionTokens;
use super::raw::{self, RawFields};
use super::AddedHeaders;

#[cfg(test)]
mod tests;

/// Most header fields a response head (or a chunked body's trailer section) may have.
pub(super) const MAX_HEADERS: usize = 100;

/// Largest response head, in bytes (hyper's default read-buffer limit, so the proxy accepts
/// what it accepted before).
pub(crate) const MAX_HEAD: usize = 8192 + 4096 * 100;

/// Why a message from (or to) the upstream could not be framed.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The upstream sent bytes that are not HTTP/1.1 (what was wrong; the caller says whose).
    #[error("{0}")]
    Invalid(String),
    /// The response head did not end within [`MAX_HEAD`] bytes.
    #[error("the upstream's response head is larger than {MAX_HEAD} bytes")]
    HeadTooLarge,
    /// The connection ended before the message did.
    #[error("the upstream closed the connection {0}")]
    Closed(&'static str),
    /// The request body broke or did not match its announced length.
    #[error("request body: {0}")]
    RequestBody(String),
    /// The socket failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

pub(super) fn invalid(what: impl Into<String>) -> WireError {
    WireError::Invalid(what.into())
}

/// How a request's body goes on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outgoing {
    /// No body.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
}

/// Writes `req`'s head (HTTP/1.1, the URI as given: origin form unless it is absolute), with the
/// fields `added` after its map's, into `buf` and says how its body follows; a framing header
/// the request lacks is added on the wire only, the request itself is not changed.
pub(crate) fn encode_request<B: Body>(
    req: &Request<B>,
    added: &AddedHeaders,
    buf: &mut Vec<u8>,
) -> Outgoing {
    let headers = req.headers();
    let body = req.body();
    let ended = body.is_end_stream();
    // The client's own length, when it has a body and a length that parses.
    let mut lengths = (!ended).then(|| Lengths::of(headers));
    let declared = lengths.and_then(|l| l.value().ok().flatten());
    let outgoing = if ended {
        Outgoing::Empty
    } else if headers.contains_key(header::TRANSFER_ENCODING) {
        Outgoing::Chunked
    } else if let Some(n) = declared {
        Outgoing::Length(n)
    } else if let Some(n) = body.size_hint().exact() {
        Outgoing::Length(n)
    } else {
        Outgoing::Chunked
    };
    buf.extend_from_slice(req.method().as_str().as_bytes());
    buf.push(b' ');
    let uri = req.uri();
    if uri.scheme().is_some() {
        buf.extend_from_slice(uri.to_string().as_bytes());
    } else {
        let pq = uri.path_and_query().map_or("/", |p| p.as_str());
        buf.extend_from_slice(if pq.is_empty() { b"/" } else { pq.as_bytes() });
    }
    buf.extend_from_slice(b" HTTP/1.1\r\n");
    // Chunked wins over a length (RFC 9112 §6.3): a `content-length` beside it is not sent,
    // nor one that does not parse when the body's own size is used instead.
    let keep_length = match outgoing {
        Outgoing::Chunked => false,
        Outgoing::Length(_) => declared.is_some(),
        Outgoing::Empty => true,
    };
    let mut length_written = false;
    for (name, value) in headers {
        if *name == header::CONTENT_LENGTH {
            if !keep_length {
                continue;
            }
            // A length repeated (`35, 35`, or in two fields) goes on as the one number it
            // agrees on (RFC 9110 §8.6), one that does not agree not at all; looked at only
            // when there is one, as most requests have none.
            let l = *lengths.get_or_insert_with(|| Lengths::of(headers));
            if !l.is_single() {
                if let (false, Ok(Some(n))) = (length_written, l.value()) {
                    let _ = write!(buf, "content-length: {n}\r\n");
                }
                length_written = true;
                continue;
            }
        }
        buf.extend_from_slice(name.as_str().as_bytes());
        buf.extend_from_slice(b": ");
        buf.extend_from_slice(value.as_bytes());
        buf.extend_from_slice(b"\r\n");
    }
    added.write(buf);
    match outgoing {
        Outgoing::Length(n) if !keep_length => {
            let _ = write!(buf, "content-length: {n}\r\n");
        }
        Outgoing::Chunked if !is_chunked(headers) => {
            // No coding given, or one not ending in chunked: chunked is added last.
            buf.extend_from_slice(b"transfer-encoding: chunked\r\n");
        }
        _ => {}
    }
    buf.extend_from_slice(b"\r\n");
    outgoing
}

/// A parsed response head.
#[derive(Debug)]
pub(crate) struct ResponseHead {
    pub status: StatusCode,
    pub version: Version,
    pub headers: HeaderMap,
    /// The reason phrase when it is not the status code's canonical one.
    pub reason: Option<Bytes>,
    pub framing: Framing,
    /// The connection may carry another exchange after this one.
    pub keep_alive: bool,
}

/// Parses a response head from the front of `buf` (removing it and any informational responses
/// before it) into `spare` (an empty map whose room is reused: the connection's last request's).
/// With `raw` (the client writes bytes: [`raw`]), the fields the proxy does not act on go there
/// instead of into the map when the response allows it ([`RawFields::is_active`] tells).
/// `Ok(None)`: incomplete, read more.
pub(crate) fn parse_response(
    buf: &mut BytesMut,
    method: &Method,
    names: &mut NameCache,
    spare: &mut HeaderMap,
    mut raw: Option<&mut RawFields>,
) -> Result<Option<ResponseHead>, WireError> {
    loop {
        let mut fields = [MaybeUninit::<httparse::Header<'_>>::uninit(); MAX_HEADERS];
        let mut res = httparse::Response::new(&mut []);
        let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
            &mut res,
            buf,
            &mut fields,
        );
        let Some(len) = head_len(parsed, buf.len())? else {
            return Ok(None);
        };
        let status = status_of(res.code)?;
        if status.is_informational() {
            // 100 Continue, 103 Early Hints…: not the response (RFC 9110 §15.2).
            buf.advance(len);
            continue;
        }
        let version = if res.version == Some(1) {
            Version::HTTP_11
        } else {
            Version::HTTP_10
        };
        let reason = res
            .reason
            .filter(|r| Some(*r) != status.canonical_reason())
            .map(|r| Bytes::copy_from_slice(r.as_bytes()));
        // Offsets into the head, so the values can share its bytes once it is frozen (kept on
        // the stack and not zeroed first: zeroing 100 spans per response would cost more than
        // the parse).
        let base = buf.as_ptr() as usize;
        // Filled where it stands: a `collect`, or a helper returning it, would build it and
        // then move all 3,200 bytes, a copy per response for nothing.
        let mut spans: SmallVec<[Span; MAX_HEADERS]> = SmallVec::new();
        spans.extend(res.headers.iter().map(|h| {
            let name = h.name.as_ptr() as usize - base;
            let value = h.value.as_ptr() as usize - base;
            (name, name + h.name.len(), value, value + h.value.len())
        }));
        let head = buf.split_to(len).freeze();
        // Room for a few more: the map goes on to the client side, where it is emptied and
        // reused for the connection's next request, which the proxy adds fields to.
        let mut headers = std::mem::take(spare);
        headers.reserve(spans.len() + 8);
        let raw = raw.as_deref_mut();
        let passing = passes_through(method, status);
        let delimiters = read_fields(&head, &spans, names, &mut headers, raw, passing)?;
        let (framing, keep_alive) = frame(delimiters, &mut headers, method, status, version)?;
        return Ok(Some(ResponseHead {
            status,
            version,
            headers,
            reason,
            framing,
            keep_alive,
        }));
    }
}

/// The length of the head `httparse` found (`None`: incomplete, read more), or why there is
/// none: too large, too many fields, not HTTP.
#[inline]
fn head_len(
    parsed: Result<httparse::Status<usize>, httparse::Error>,
    buffered: usize,
) -> Result<Option<usize>, WireError> {
    let len = match parsed {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buffered >= MAX_HEAD => {
            return Err(WireError::HeadTooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(invalid(format!(
                "more than {MAX_HEADERS} header fields in the response head"
            )))
        }
        Err(e) => return Err(invalid(format!("response head: {e}"))),
    };
    if len > MAX_HEAD {
        return Err(WireError::HeadTooLarge);
    }
    Ok(Some(len))
}

/// The status line's code, refused when out of range or a `101` (the proxy sends no request
/// that asks for an upgrade this way: those go through hyper's client).
#[inline]
fn status_of(code: Option<u16>) -> Result<StatusCode, WireError> {
    let code = code.unwrap_or(0);
    let status = StatusCode::from_u16(code)
        .map_err(|_| invalid(format!("status code {code} out of range")))?;
    if status == StatusCode::SWITCHING_PROTOCOLS {
        return Err(invalid(
            "101 Switching Protocols to a request without Upgrade",
        ));
    }
    Ok(status)
}

/// Whether the status line (and the request's method) leave the response's fields free to pass
/// through as bytes (`raw`'s module docs say what rules it out).
#[inline]
fn passes_through(method: &Method, status: StatusCode) -> bool {
    *method != Method::HEAD
        && !matches!(
            status,
            StatusCode::NO_CONTENT
                | StatusCode::NOT_MODIFIED
                | StatusCode::TOO_MANY_REQUESTS
                | StatusCode::SERVICE_UNAVAILABLE
        )
}

/// Reads the head's fields into `headers`, or, when `passing` and the client writes bytes,
/// those that may pass through into `raw`; falls back to the map alone when the fields rule the
/// pass-through out. Returns what the fields say of the framing.
#[inline]
fn read_fields(
    head: &Bytes,
    spans: &[Span],
    names: &mut NameCache,
    headers: &mut HeaderMap,
    raw: Option<&mut RawFields>,
    passing: bool,
) -> Result<Delimiters, WireError> {
    let Some(r) = raw else {
        return fill(head, spans, names, headers, None);
    };
    if !passing {
        r.clear();
        return fill(head, spans, names, headers, None);
    }
    r.begin(head);
    let d = fill(head, spans, names, headers, Some(&mut *r))?;
    // What the fields rule out: a body of no bytes, fields named for removal, a length the
    // transfer coding overrides, a length repeated (sent on as one).
    let length = d.length.value();
    if length.is_ok_and(|n| n != Some(0))
        && d.length.is_single()
        && !d.both()
        && !d.connection.names_fields()
    {
        r.finish(length.ok().flatten());
        return Ok(d);
    }
    r.clear();
    headers.clear();
    fill(head, spans, names, headers, None)
}

/// The body's framing and the connection's reuse from the fields read, with the map's
/// `content-length` made what the client may be sent.
#[inline]
fn frame(
    delimiters: Delimiters,
    headers: &mut HeaderMap,
    method: &Method,
    status: StatusCode,
    version: Version,
) -> Result<(Framing, bool), WireError> {
    let both = delimiters.both();
    let lengths = delimiters.length;
    let framing = delimiters.framing(method, status, version)?;
    if both {
        // The length is not the body's: sent on, it would make the client read the chunked
        // body by it (RFC 9112 §6.3: "MUST first remove the received Content-Length field"
        // before forwarding).
        headers.remove(header::CONTENT_LENGTH);
    } else {
        // `35, 35` or two fields of 35: one field of 35 for the client (RFC 9110 §8.6).
        lengths.normalise(headers);
    }
    Ok(framing)
}

/// A field's name and value, as offsets into its head: `(name start, name end, value start,
/// value end)`.
type Span = (usize, usize, usize, usize);

/// Reads the fields at `spans` of `head`: into `headers`, or, those that may pass through, into
/// `raw` ([`raw::kind`]); returns what they say of the framing.
fn fill(
    head: &Bytes,
    spans: &[Span],
    names: &mut NameCache,
    headers: &mut HeaderMap,
    mut raw: Option<&mut RawFields>,
) -> Result<Delimiters, WireError> {
    let mut delimiters = Delimiters::new();
    for &(ns, ne, vs, ve) in spans {
        let wire = &head[ns..ne];
        if let Some(r) = raw.as_deref_mut() {
            let kind = raw::kind(wire);
            if kind != raw::Kind::Kept {
                if kind == raw::Kind::Length {
                    delimiters.length.add(&head[vs..ve]);
                }
                r.add(kind, ns, vs, ve);
                continue;
            }
        }
        let name = names
            .name(wire)
            .ok_or_else(|| invalid("a header field name that is not a token"))?;
        let value = parsed_value(head, vs, ve);
        delimiters.field(&name, value.as_bytes());
        headers.append(name, value);
    }
    Ok(delimiters)
}

/// What in a response head decides its body's framing and the connection's reuse, gathered as
/// the fields are read (a standard name compares as an enum tag) instead of looked up in the map
/// afterwards, where each lookup hashes its name again.
struct Delimiters {
    connection: ConnectionTokens,
    /// Whether the `transfer-encoding` fields name `chunked` alone (`None`: no such field).
    chunked: Option<bool>,
    /// The `content-length` fields so far.
    length: Lengths,
}

impl Delimiters {
    fn new() -> Self {
        Delimiters {
            connection: ConnectionTokens::default(),
            chunked: None,
            length: Lengths::default(),
        }
    }

    fn field(&mut self, name: &HeaderName, value: &[u8]) {
        if *name == header::CONNECTION {
            self.connection.add(value);
        } else if *name == header::TRANSFER_ENCODING {
            // A second field adds codings to the first: then it is not `chunked` alone.
            self.chunked =
                Some(self.chunked.is_none() && value.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if *name == header::CONTENT_LENGTH {
            self.length.add(value);
        }
    }

    /// Both a `transfer-encoding` and a `content-length` were seen (the coding wins).
    fn both(&self) -> bool {
        self.chunked.is_some() && self.length.value() != Ok(None)
    }

    /// The body's framing and whether the connection stays open (RFC 9112 §6.3, §9.3).
    fn framing(
        self,
        method: &Method,
        status: StatusCode,
        version: Version,
    ) -> Result<(Framing, bool), WireError> {
        let keep_alive = self.connection.keeps_open(version);
        if *method == Method::HEAD
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED
        {
            return Ok((Framing::Empty, keep_alive));
        }
        // HTTP/1.0 has no transfer codings: such a message's framing is faulty (RFC 9112
        // §6.1), and a reader that took it as chunked could be out of step with one that did
        // not.
        if self.chunked.is_some() && version == Version::HTTP_10 {
            return Err(invalid(
                "a transfer-encoding on an HTTP/1.0 response (faulty framing, RFC 9112 §6.1)",
            ));
        }
        match self.chunked {
            // Another coding (`gzip`, `gzip, chunked`): the proxy decodes only chunked, and
            // the rest could not be passed on — not to an HTTP/2 client, which has no transfer
            // codings, and not as a content coding, which it is not — so the client would get
            // coded bytes unannounced. Refused as nginx refuses it ("upstream sent unknown
            // Transfer-Encoding"); no known server sends one.
            Some(false) => {
                return Err(invalid(
                    "a transfer-encoding other than chunked alone (only chunked can be decoded; \
                     other transfer codings could not be passed on)",
                ))
            }
            // Both present: chunked wins, and the connection must not be reused (§6.3 item 3).
            Some(true) => {
                let both = self.length.value() != Ok(None);
                return Ok((Framing::Chunked, keep_alive && !both));
            }
            None => {}
        }
        match self.length.value() {
            Ok(Some(0)) => Ok((Framing::Empty, keep_alive)),
            Ok(Some(n)) => Ok((Framing::Length(n), keep_alive)),
            Ok(None) => Ok((Framing::UntilClose, false)),
            Err(()) => Err(invalid("an invalid or conflicting content-length")),
        }
    }
}
