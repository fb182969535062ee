//! Header fields out of `httparse`'s spans into the `http` types, for both HTTP/1.1 sides: names
//! through a per-connection cache, values sharing the head's bytes.
//!
//! Why a cache: a peer sends the same few names on every message, and `HeaderName::from_bytes`
//! checks, lower-cases and allocates a name that is not a standard one every time. Why it is
//! direct-mapped: a scan of the cached names compared each looked-up name with ~5 others,
//! ~930 instructions a forwarded request for its ~8 names (callgrind,
//! bench/results/proxy-forwarding.md "Fourteenth round"); a slot chosen from the name's length
//! and three of its bytes, case folded, is one comparison.

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};

/// Slots of a [`NameCache`]: two per set.
const SLOTS: usize = 64;

/// The header names one connection's peer has sent (a clone shares the bytes).
#[derive(Debug, Default)]
pub(crate) struct NameCache {
    /// Empty until the first name, then [`SLOTS`] long; slots `2k` and `2k + 1` form a set.
    slots: Vec<Option<HeaderName>>,
}

/// The set a name goes in: from its length and its first, middle and last bytes, with ASCII
/// letters folded to lower case (every spelling of a name lands in the same set).
fn set_of(wire: &[u8]) -> usize {
    let at = |i: usize| usize::from(wire.get(i).copied().unwrap_or(0) | 0x20);
    let n = wire.len();
    let h = n
        .wrapping_mul(0x9e37)
        .wrapping_add(at(0).wrapping_mul(0x3b))
        .wrapping_add(at(n / 2).wrapping_mul(0x1f1))
        .wrapping_add(at(n.wrapping_sub(1)).wrapping_mul(0x61));
    (h ^ (h >> 7)) % (SLOTS / 2)
}

impl NameCache {
    /// The name `wire` spells (any case), or `None` if it is not a valid field name.
    pub(crate) fn name(&mut self, wire: &[u8]) -> Option<HeaderName> {
        let set = set_of(wire) * 2;
        for n in self.slots.iter().skip(set).take(2).flatten() {
            // A cached name is lower-case and valid, so matching it ignoring case makes `wire`
            // that name. Most peers spell a name the same way every time: the exact comparison
            // (`memcmp`) first.
            let s = n.as_str().as_bytes();
            if s == wire || s.eq_ignore_ascii_case(wire) {
                return Some(n.clone());
            }
        }
        let n = HeaderName::from_bytes(wire).ok()?;
        if self.slots.is_empty() {
            self.slots.resize(SLOTS, None);
        }
        // The set's first free slot, else its first (the newest name wins).
        let taken = |i: usize| self.slots.get(i).is_some_and(Option::is_some);
        let at = if taken(set) && !taken(set + 1) {
            set + 1
        } else {
            set
        };
        if let Some(slot) = self.slots.get_mut(at) {
            *slot = Some(n.clone());
        }
        Some(n)
    }

    /// How many names are cached.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.iter().flatten().count()
    }

    /// The most names the cache holds.
    #[cfg(test)]
    pub(crate) const MAX: usize = SLOTS;
}

/// The header value at `start..end` of `head`, sharing its bytes; the span is one `httparse`
/// returned as a field value.
///
/// Why unchecked: `httparse` accepts in a field value exactly the bytes a `HeaderValue` may
/// hold (HTAB, SP, visible ASCII, obs-text: its `HEADER_VALUE_MAP`, and `http`'s `is_valid`),
/// so checking them again cost a pass over every value, ~550 instructions a forwarded request
/// (callgrind, bench/results/proxy-forwarding.md "Fourteenth round"). hyper's server and client
/// build their values from `httparse`'s spans the same way. Debug builds (the tests) check
/// anyway: `http`'s constructor asserts there.
#[allow(unsafe_code)]
pub(crate) fn parsed_value(head: &Bytes, start: usize, end: usize) -> HeaderValue {
    let bytes = head.slice(start..end);
    // SAFETY: not a memory-safety matter — `from_maybe_shared_unchecked` is `unsafe` because
    // it skips the check of the bytes; `httparse` checked these as a field value (above).
    unsafe { HeaderValue::from_maybe_shared_unchecked(bytes) }
}
