//! Hop-by-hop fields (RFC 9110 §7.6.1): the ones a proxy removes before passing a message on,
//! for both HTTP/1.1 sides and the HTTP/2 path, and the `connection` tokens both HTTP/1.1 codecs
//! read to decide whether a connection stays open.
//!
//! Why here, beside the codecs: the upstream side's pass-through of raw fields ([`super::raw`])
//! must keep these out of what it passes as bytes, and the forwarding policy removes them
//! from maps; one list serves both, so they cannot disagree.

use http::header::{self, HeaderMap, HeaderName};
use http::Version;
use spillway_tower::wire;

/// The hop-by-hop headers [`strip_hop_by_hop`] always removes (besides those `connection`
/// lists): RFC 9110 §7.6.1 and the older `keep-alive`/`proxy-connection`; `connection`,
/// `upgrade` and `te` have rules of their own. Not `trailer`: it is end-to-end (RFC 9110
/// §6.6.2), and an HTTP/1.1 server sends a client only the trailer fields it announces, so
/// without it every trailer on the way to an HTTP/1.1 client was dropped. A `static`, not a
/// `const`: a `const` array is built and dropped again at every use.
pub(crate) static ALWAYS_REMOVED: [HeaderName; 5] = [
    header::TRANSFER_ENCODING,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
];

/// `connection`, `upgrade`, `te` or one of [`ALWAYS_REMOVED`] (a test keeps the two lists
/// together).
///
/// By length first: most fields are none of these, and a length tells at once, where comparing
/// each name with nine others costs nine comparisons per field, on two maps a request.
pub(crate) fn is_hop_by_hop(n: &HeaderName) -> bool {
    is_hop_by_hop_name(n.as_str().as_bytes())
}

/// [`is_hop_by_hop`] for a name as it came on the wire, in any case (the upstream codec's
/// pass-through, [`super::raw`], keeps these in the map).
pub(crate) fn is_hop_by_hop_name(wire: &[u8]) -> bool {
    let is = |s: &str| wire.eq_ignore_ascii_case(s.as_bytes());
    match wire.len() {
        2 => is("te"),
        7 => is("upgrade"),
        10 => is("connection") || is("keep-alive"),
        16 => is("proxy-connection"),
        17 => is("transfer-encoding"),
        18 => is("proxy-authenticate"),
        19 => is("proxy-authorization"),
        _ => false,
    }
}

/// Removes hop-by-hop headers (RFC 9110 §7.6.1), keeping `te: trailers` (gRPC needs it) and,
/// for upgrades, `connection`/`upgrade`.
///
/// Most requests and responses carry none of them, so one pass over the names (no hashing;
/// standard names compare as an enum tag) decides first whether there is anything to remove:
/// the removals below hash and probe once per name, twice per forwarded request.
pub(crate) fn strip_hop_by_hop(h: &mut HeaderMap, keep_upgrade: bool) {
    if !h.keys().any(is_hop_by_hop) {
        return;
    }
    let named: Vec<header::HeaderName> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| header::HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .filter(|n| !(keep_upgrade && *n == header::UPGRADE))
        .collect();
    for n in named {
        h.remove(n);
    }
    for n in &ALWAYS_REMOVED {
        h.remove(n);
    }
    if !keep_upgrade {
        h.remove(header::CONNECTION);
        h.remove(header::UPGRADE);
    }
    if wire::find(h, &header::TE).is_some_and(|v| v != "trailers") {
        h.remove(header::TE);
    }
}

/// The `connection` tokens of a message that decide whether its connection stays open, from
/// every `connection` field (RFC 9112 §9.3; `close` wins over `keep-alive` in any order).
#[derive(Debug, Default)]
pub(crate) struct ConnectionTokens {
    close: bool,
    keep_alive: bool,
    /// A token other than those two: it names a field to remove (RFC 9110 §7.6.1).
    others: bool,
}

impl ConnectionTokens {
    /// Takes in one `connection` field's value.
    pub(crate) fn add(&mut self, value: &[u8]) {
        for t in value.split(|b| *b == b',') {
            let t = t.trim_ascii();
            let close = t.eq_ignore_ascii_case(b"close");
            let keep_alive = t.eq_ignore_ascii_case(b"keep-alive");
            self.close |= close;
            self.keep_alive |= keep_alive;
            self.others |= !(close || keep_alive || t.is_empty());
        }
    }

    /// Whether a message of `version` with these tokens leaves its connection open (HTTP/1.1
    /// unless `close`; HTTP/1.0 only with `keep-alive`).
    pub(crate) fn keeps_open(&self, version: Version) -> bool {
        !self.close && (version == Version::HTTP_11 || self.keep_alive)
    }

    /// A `close` token was seen.
    pub(crate) fn close(&self) -> bool {
        self.close
    }

    /// A token other than `close` and `keep-alive` was seen: it names a field to remove.
    pub(crate) fn names_fields(&self) -> bool {
        self.others
    }
}
