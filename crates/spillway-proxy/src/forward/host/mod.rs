//! The request's `host`: checked before anything else reads it, and made to agree with an
//! absolute target.
//!
//! Why a proxy must: a request with two `host` fields, or a `host` that disagrees with its
//! target, is read one way here (routes match on headers) and possibly another way by the
//! upstream — the ambiguity request smuggling and cache poisoning are built on. So the rules of
//! RFC 9112 §3.2 are enforced rather than passed on: an HTTP/1.1 request has exactly one `host`
//! (HTTP/1.0 at most one), a valid `host[:port]` or empty; a request in absolute form has its
//! `host` replaced by the target's authority (§3.2.2: "a proxy MUST"); an HTTP/2 request's
//! `host`, when it has one beside `:authority`, names the same authority (RFC 9113 §8.3.1).
//! Anything else is answered 400 `bad_host` and counted `bad_request`.

use http::header::{self, HeaderValue};
use http::request::Parts;
use http::uri::Authority;
use http::Version;

#[cfg(test)]
mod tests;

/// Why a request's `host` cannot be forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// More than one `host` field.
    #[error("the request has more than one host field (RFC 9112 §3.2 accepts exactly one)")]
    Several,
    /// An HTTP/1.1 request in origin form without a `host`.
    #[error(
        "an HTTP/1.1 request needs a host field (RFC 9112 §3.2), e.g. `host: example.com:8080`"
    )]
    Missing,
    /// A `host` value that is not `host[:port]`.
    #[error(
        "the host field is not host[:port] (accepted: letters, digits, \
         \"-._~!$&'()*+,;=%\", an [IPv6] literal and a :port)"
    )]
    Invalid,
    /// An HTTP/2 request whose `host` names another authority than its `:authority`.
    #[error("the host field differs from the request's :authority (RFC 9113 §8.3.1)")]
    NotAuthority,
}

/// Checks `parts`' `host` (see the module docs); replaces it with the target's authority when
/// an HTTP/1.x request is in absolute form.
pub(crate) fn check(parts: &mut Parts) -> Result<(), HostError> {
    let mut hosts = parts.headers.get_all(header::HOST).iter();
    let first = hosts.next();
    if hosts.next().is_some() {
        return Err(HostError::Several);
    }
    if first.is_some_and(|v| !is_host(v.as_bytes())) {
        return Err(HostError::Invalid);
    }
    let h1 = parts.version <= Version::HTTP_11;
    match (parts.uri.authority(), first) {
        (Some(a), Some(h)) if !h1 => {
            if same_authority(a, h.as_bytes(), parts.uri.scheme_str()) {
                Ok(())
            } else {
                Err(HostError::NotAuthority)
            }
        }
        (Some(a), _) if h1 => {
            // The authority's host and port, never its userinfo (RFC 9112 §3.2.2, §3.2.3).
            let host = match a.port() {
                Some(p) => format!("{}:{}", a.host(), p.as_str()),
                None => a.host().to_owned(),
            };
            let v = HeaderValue::try_from(host).map_err(|_| HostError::Invalid)?;
            if !is_host(v.as_bytes()) {
                return Err(HostError::Invalid);
            }
            parts.headers.insert(header::HOST, v);
            Ok(())
        }
        (None, None) if parts.version == Version::HTTP_11 => Err(HostError::Missing),
        _ => Ok(()),
    }
}

/// Whether `host` names the entity `authority` does: the same host without regard to case, the
/// same port once the scheme's default fills in a missing one (`svc` and `svc:443` over
/// `https` are one entity).
fn same_authority(authority: &Authority, host: &[u8], scheme: Option<&str>) -> bool {
    let Ok(h) = Authority::try_from(host) else {
        return false;
    };
    let default = if scheme == Some("https") { 443 } else { 80 };
    h.host().eq_ignore_ascii_case(authority.host())
        && h.port_u16().unwrap_or(default) == authority.port_u16().unwrap_or(default)
}

/// Whether `v` can be a `host` value: `uri-host [ ":" port ]` (RFC 3986 §3.2.2) by its bytes —
/// a reg-name's unreserved, pct-encoded and sub-delims characters, an IP literal's brackets and
/// colons. Empty is allowed (RFC 9110 §7.2: a target without an authority). Not a full parse:
/// what it refuses — spaces, `/`, `?`, `#`, `@`, controls — is what could make the upstream
/// read a different authority or target than the proxy did. By table: every request pays it,
/// and a test per byte class cost ~10 instructions a byte (callgrind).
fn is_host(v: &[u8]) -> bool {
    v.iter().all(|&b| HOST_BYTES[usize::from(b)])
}

/// [`is_host`]'s bytes.
static HOST_BYTES: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric() || {
            let mut found = false;
            let extra = b"-._~!$&'()*+,;=%:[]";
            let mut i = 0;
            while i < extra.len() {
                found |= extra[i] == c;
                i += 1;
            }
            found
        };
        b += 1;
    }
    t
};
