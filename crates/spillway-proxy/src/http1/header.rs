//! Header fields out of `httparse`'s spans into the `http` types, for both HTTP/1.1 sides: names
//! through a per-connection cache, values sharing the head's bytes.
//!
//! Why a cache: a peer sends the same few names on every message, and `HeaderName::from_bytes`
//! checks, lower-cases and allocates a name that is not a standard one every time. Why the
//! search starts after the last name found: a peer sends its fields in the same order every
//! time, so the name after the last one found is usually the next one asked for — one
//! comparison, where a scan from the front compares each name with half the list (and a hashed
//! set pays for the hash on every name).

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};

/// The header names one connection's peer has sent, in the order first seen (a clone shares
/// the bytes).
#[derive(Debug, Default)]
pub(crate) struct NameCache {
    names: Vec<HeaderName>,
    /// Where the next search starts: after the last name found.
    next: usize,
}

impl NameCache {
    /// Most names kept: a peer inventing names cannot make the search long.
    pub(crate) const MAX: usize = 32;

    /// The name `wire` spells (any case), or `None` if it is not a valid field name.
    pub(crate) fn name(&mut self, wire: &[u8]) -> Option<HeaderName> {
        let len = self.names.len();
        let start = self.next.min(len);
        let (before, after) = self.names.split_at(start);
        // A cached name is lower-case and valid, so matching it ignoring case makes `wire` that
        // name; the exact comparison (`memcmp`) first, as most peers spell a name one way.
        let found = after.iter().chain(before).position(|n| {
            let s = n.as_str().as_bytes();
            s == wire || s.eq_ignore_ascii_case(wire)
        });
        if let Some(p) = found {
            let i = if start + p >= len {
                start + p - len
            } else {
                start + p
            };
            self.next = i + 1;
            return self.names.get(i).cloned();
        }
        let n = HeaderName::from_bytes(wire).ok()?;
        if len < Self::MAX {
            self.names.push(n.clone());
            self.next = len + 1;
        }
        Some(n)
    }

    /// How many names are cached.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.names.len()
    }
}

/// The header value at `start..end` of `head`, sharing its bytes; the span is one `httparse`
/// returned as a field value.
///
/// Why unchecked: `httparse` accepts in a field value exactly the bytes a `HeaderValue` may
/// hold (HTAB, SP, visible ASCII, obs-text: its `HEADER_VALUE_MAP`, and `http`'s `is_valid`),
/// so checking them again would be a second pass over every value of every message for nothing.
/// hyper's server and client build their values from `httparse`'s spans the same way. Debug builds (the tests) check
/// anyway: `http`'s constructor asserts there.
#[allow(unsafe_code)]
pub(crate) fn parsed_value(head: &Bytes, start: usize, end: usize) -> HeaderValue {
    let bytes = head.slice(start..end);
    // SAFETY: not a memory-safety matter — `from_maybe_shared_unchecked` is `unsafe` because
    // it skips the check of the bytes; `httparse` checked these as a field value (above).
    unsafe { HeaderValue::from_maybe_shared_unchecked(bytes) }
}
