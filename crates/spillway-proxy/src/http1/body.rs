//! Body framing, read the same way from a client and from an upstream: the `content-length`
//! fields (RFC 9110 §8.6) and the chunked transfer coding (RFC 9112 §7.1), which both sides
//! also write with the encoders at the end. The listener's
//! HTTP/1.1 server and the upstream client both use what is here, so a rule tightened here holds
//! in both directions.
//!
//! What is refused, and why each limit:
//! - `content-length` values that are not decimal numbers (at most 19 digits), or that disagree
//!   (`5, 6`, or two fields `5` and `6`): the message's length is unknown, so it cannot be
//!   forwarded without one side reading it differently from the other. The same number repeated
//!   (`35, 35`, or two fields `35`) is one length, and is sent on as one field ([`Lengths`]).
//! - A chunk-size line or a trailer line ended by a bare LF: CRLF is the only line end of the
//!   chunked coding, and a recipient that took a bare LF could be out of step with one that did
//!   not (request smuggling).
//! - A chunk-size line longer than [`MAX_CHUNK_LINE`], a body whose chunk extensions add up to
//!   more than [`MAX_CHUNK_EXTENSIONS`] (extensions carry nothing the proxy uses; a sender could
//!   otherwise make it scan any amount of them around one-byte chunks), an extension with a
//!   control character in it.

use std::io::Write as _;

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use super::client::{invalid, WireError, MAX_HEAD, MAX_HEADERS};

/// Longest chunk-size line (size and extensions, without its CRLF) of a chunked body.
pub(crate) const MAX_CHUNK_LINE: usize = 4096;

/// Most bytes of chunk extensions in one chunked body, all chunks together (hyper's limit).
pub(crate) const MAX_CHUNK_EXTENSIONS: usize = 16 * 1024;

/// The `content-length` fields of one message, taken in one at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lengths {
    /// The length so far: `Ok(None)` while no field was seen, `Err` once a value was not a
    /// number or two values disagreed.
    value: Result<Option<u64>, ()>,
    /// More than one field, or a field holding a list: what was received is not what is sent.
    repeated: bool,
}

impl Default for Lengths {
    fn default() -> Self {
        Lengths {
            value: Ok(None),
            repeated: false,
        }
    }
}

impl Lengths {
    /// All the `content-length` fields of `headers`.
    pub(crate) fn of(headers: &HeaderMap) -> Self {
        let mut l = Lengths::default();
        for v in headers.get_all(header::CONTENT_LENGTH) {
            l.add(v.as_bytes());
        }
        l
    }

    /// Takes in one more `content-length` field value.
    pub(crate) fn add(&mut self, value: &[u8]) {
        self.repeated |= self.value != Ok(None) || value.contains(&b',');
        self.value = self.value.and_then(|found| add_length(found, value));
    }

    /// The length: `Ok(None)` when there was no field, `Err` when a value is not a number or
    /// the values disagree.
    pub(crate) fn value(&self) -> Result<Option<u64>, ()> {
        self.value
    }

    /// Whether the fields are at most one field of one number, and so can be sent on as they
    /// came; otherwise the one length they agree on is sent instead ([`Lengths::normalise`]).
    pub(crate) fn is_single(&self) -> bool {
        !self.repeated
    }

    /// Replaces `headers`' `content-length` fields by one holding the length they agree on
    /// (RFC 9110 §8.6: a recipient of a repeated length "MAY ... replace the duplicated field
    /// values with a single valid Content-Length field"); leaves them when they do not agree
    /// (the caller refuses the message) or are single already.
    pub(crate) fn normalise(&self, headers: &mut HeaderMap) {
        if let (true, Ok(Some(n))) = (self.repeated, self.value) {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
        }
    }
}

/// `found` with one more `content-length` field value (a list of numbers) taken in.
pub(crate) fn add_length(mut found: Option<u64>, value: &[u8]) -> Result<Option<u64>, ()> {
    for part in value.split(|b| *b == b',') {
        let part = part.trim_ascii();
        if part.is_empty() || part.len() > 19 || !part.iter().all(u8::is_ascii_digit) {
            return Err(());
        }
        let n = part.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
        if found.is_some_and(|f| f != n) {
            return Err(());
        }
        found = Some(n);
    }
    Ok(found)
}

/// How a response's body is delimited (RFC 9112 §6.3), read from an upstream or written to a
/// client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body (a `HEAD` request's response, 204, 304, a length of zero).
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Everything until the sender closes the connection.
    UntilClose,
}

/// What a body's decoder gives next (a response's from an upstream, a request's from a client).
#[derive(Debug, PartialEq)]
pub(crate) enum Decoded {
    /// Body bytes.
    Data(Bytes),
    /// The trailer section of a chunked body (then the end).
    Trailers(HeaderMap),
    /// The body is complete.
    End,
    /// More bytes are needed.
    More,
}

/// A body's decoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Decoder {
    state: State,
    /// Bytes of chunk extensions read so far (capped by [`MAX_CHUNK_EXTENSIONS`]).
    extensions: usize,
}

/// Where a body's decoder stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// This many bytes left.
    Length(u64),
    /// A chunked body: expecting a chunk-size line.
    ChunkSize,
    /// A chunked body: this many bytes of the current chunk left.
    ChunkData(u64),
    /// A chunked body: the CRLF after a chunk's data.
    ChunkEnd,
    /// A chunked body: the trailer section after the last chunk.
    Trailers,
    /// Until the connection closes.
    UntilClose,
    /// Complete.
    Done,
}

impl Decoder {
    pub(crate) fn new(framing: Framing) -> Self {
        let state = match framing {
            Framing::Empty | Framing::Length(0) => State::Done,
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::ChunkSize,
            Framing::UntilClose => State::UntilClose,
        };
        Decoder {
            state,
            extensions: 0,
        }
    }

    /// Whether the body is complete.
    pub(crate) fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Whether the body ends when the connection does.
    pub(crate) fn is_until_close(&self) -> bool {
        self.state == State::UntilClose
    }

    /// The connection ended a close-delimited body: it is complete.
    pub(crate) fn closed(&mut self) {
        if self.state == State::UntilClose {
            self.state = State::Done;
        }
    }

    /// Bytes left when the body has a length.
    pub(crate) fn remaining(&self) -> Option<u64> {
        match self.state {
            State::Length(n) => Some(n),
            State::Done => Some(0),
            _ => None,
        }
    }

    /// Takes the next piece of the body from the front of `buf`.
    pub(crate) fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, WireError> {
        loop {
            match self.state {
                State::Done => return Ok(Decoded::End),
                State::Length(left) | State::ChunkData(left) => {
                    if buf.is_empty() {
                        return Ok(Decoded::More);
                    }
                    return Ok(self.data(left, buf));
                }
                State::UntilClose => {
                    if buf.is_empty() {
                        return Ok(Decoded::More);
                    }
                    return Ok(Decoded::Data(buf.split().freeze()));
                }
                State::ChunkSize => {
                    if !self.size_line(buf)? {
                        return Ok(Decoded::More);
                    }
                }
                State::ChunkEnd => {
                    if buf.len() < 2 {
                        return Ok(Decoded::More);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(invalid("chunk data not followed by CRLF"));
                    }
                    buf.advance(2);
                    self.state = State::ChunkSize;
                }
                State::Trailers => return self.trailer_section(buf),
            }
        }
    }

    /// Up to `left` bytes of a length-delimited body or of a chunk's data, from a `buf` that
    /// is not empty.
    #[inline]
    fn data(&mut self, left: u64, buf: &mut BytesMut) -> Decoded {
        let take = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
        let rest = left - take as u64;
        self.state = match (self.state, rest) {
            (State::Length(_), 0) => State::Done,
            (State::Length(_), r) => State::Length(r),
            (_, 0) => State::ChunkEnd,
            (_, r) => State::ChunkData(r),
        };
        Decoded::Data(buf.split_to(take).freeze())
    }

    /// Takes a chunk-size line from the front of `buf`; `false`: it is not all in yet.
    #[inline]
    fn size_line(&mut self, buf: &mut BytesMut) -> Result<bool, WireError> {
        let Some(end) = buf.iter().position(|b| *b == b'\n') else {
            // The line's CR may be the last byte read: one more than the limit.
            if buf.len() > MAX_CHUNK_LINE + 1 {
                return Err(line_too_long());
            }
            return Ok(false);
        };
        if end > MAX_CHUNK_LINE + 1 {
            return Err(line_too_long());
        }
        let (size, extensions) = chunk_size(&buf[..end])?;
        self.extensions += extensions;
        if self.extensions > MAX_CHUNK_EXTENSIONS {
            return Err(invalid(format!(
                "chunk extensions adding up to more than {MAX_CHUNK_EXTENSIONS} bytes in one body"
            )));
        }
        buf.advance(end + 1);
        self.state = if size == 0 {
            State::Trailers
        } else {
            State::ChunkData(size)
        };
        Ok(true)
    }

    /// The trailer section after the last chunk (often only its CRLF), which ends the body.
    fn trailer_section(&mut self, buf: &mut BytesMut) -> Result<Decoded, WireError> {
        if buf.starts_with(b"\r\n") {
            buf.advance(2);
            self.state = State::Done;
            return Ok(Decoded::End);
        }
        if buf.first() == Some(&b'\n') {
            return Err(bare_lf_in_trailers());
        }
        if buf.len() < 2 {
            return Ok(Decoded::More);
        }
        let (len, map) = match trailers(buf)? {
            Some(t) => t,
            None => return Ok(Decoded::More),
        };
        buf.advance(len);
        self.state = State::Done;
        Ok(Decoded::Trailers(map))
    }
}

fn line_too_long() -> WireError {
    invalid(format!(
        "a chunk-size line longer than {MAX_CHUNK_LINE} bytes"
    ))
}

fn bare_lf_in_trailers() -> WireError {
    invalid("a trailer line ended by a bare LF (CRLF is required)")
}

/// The trailer section at the front of `buf` (its length and fields), `None` if incomplete.
fn trailers(buf: &[u8]) -> Result<Option<(usize, HeaderMap)>, WireError> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    match httparse::parse_headers(buf, &mut fields) {
        Ok(httparse::Status::Complete((len, fields))) => {
            if has_bare_lf(&buf[..len]) {
                return Err(bare_lf_in_trailers());
            }
            let mut map = HeaderMap::with_capacity(fields.len());
            for f in fields.iter() {
                let name = HeaderName::from_bytes(f.name.as_bytes())
                    .map_err(|_| invalid("a trailer name that is not a token"))?;
                let value = HeaderValue::from_bytes(f.value)
                    .map_err(|_| invalid("a trailer value with control characters"))?;
                map.append(name, value);
            }
            Ok(Some((len, map)))
        }
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
            Err(invalid("a trailer section larger than the head limit"))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(e) => Err(invalid(format!("trailer section: {e}"))),
    }
}

/// Whether a LF in `bytes` is not preceded by a CR.
fn has_bare_lf(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .enumerate()
        .any(|(i, b)| *b == b'\n' && (i == 0 || bytes[i - 1] != b'\r'))
}

/// The size on a chunk-size line (up to, without, its LF) and the length of its extensions:
/// hex digits, optional blanks, then optional extensions (`;` and what follows), then CR.
fn chunk_size(line: &[u8]) -> Result<(u64, usize), WireError> {
    let Some(line) = line.strip_suffix(b"\r") else {
        return Err(invalid(
            "a chunk-size line ended by a bare LF (CRLF is required)",
        ));
    };
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    let rest = &line[digits..];
    let blanks = rest
        .iter()
        .take_while(|b| **b == b' ' || **b == b'\t')
        .count();
    let ext = &rest[blanks..];
    if digits == 0 || digits > 16 || !(ext.is_empty() || ext.starts_with(b";")) {
        return Err(invalid("a chunk-size line that is not a hexadecimal size"));
    }
    if ext.iter().any(|b| (*b < 0x20 && *b != b'\t') || *b == 0x7f) {
        return Err(invalid("a chunk extension with a control character"));
    }
    let mut n = 0u64;
    for d in &line[..digits] {
        // Checked above: at most 16 hex digits fit in a u64.
        n = n << 4 | u64::from(char::from(*d).to_digit(16).unwrap_or(0));
    }
    Ok((n, ext.len()))
}

#[cfg(test)]
mod tests;

/// Whether a field may travel in a trailer section: not one that frames, routes, authenticates
/// or controls the message (RFC 9110 §6.5.1; the list hyper's server applies).
pub(super) fn may_trail(name: &HeaderName) -> bool {
    static NOT: [HeaderName; 18] = [
        header::AUTHORIZATION,
        header::CACHE_CONTROL,
        header::CONTENT_ENCODING,
        header::CONTENT_LENGTH,
        header::CONTENT_RANGE,
        header::CONTENT_TYPE,
        header::EXPECT,
        header::HOST,
        header::MAX_FORWARDS,
        header::PRAGMA,
        header::PROXY_AUTHENTICATE,
        header::PROXY_AUTHORIZATION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::WWW_AUTHENTICATE,
        header::CONNECTION,
        header::UPGRADE,
    ];
    !NOT.contains(name)
}

/// Appends the chunk-size line of a data chunk of `len` bytes (after the CRLF that ends the
/// previous chunk's data, when there was one).
pub(crate) fn chunk_header(buf: &mut Vec<u8>, after_data: bool, len: usize) {
    if after_data {
        buf.extend_from_slice(b"\r\n");
    }
    let _ = write!(buf, "{len:x}\r\n");
}

/// Appends the last chunk and the trailer section.
pub(crate) fn chunked_end(buf: &mut Vec<u8>, after_data: bool, trailers: Option<&HeaderMap>) {
    if after_data {
        buf.extend_from_slice(b"\r\n");
    }
    buf.extend_from_slice(b"0\r\n");
    for (name, value) in trailers.into_iter().flatten() {
        buf.extend_from_slice(name.as_str().as_bytes());
        buf.extend_from_slice(b": ");
        buf.extend_from_slice(value.as_bytes());
        buf.extend_from_slice(b"\r\n");
    }
    buf.extend_from_slice(b"\r\n");
}

/// Whether the last transfer coding is `chunked`.
pub(super) fn is_chunked(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .next_back()
        .is_some_and(|v| ends_in_chunked(v.as_bytes()))
}

/// Whether a `transfer-encoding` field value's last coding is `chunked`.
fn ends_in_chunked(value: &[u8]) -> bool {
    value
        .rsplit(|b| *b == b',')
        .next()
        .is_some_and(|t| t.trim_ascii().eq_ignore_ascii_case(b"chunked"))
}
