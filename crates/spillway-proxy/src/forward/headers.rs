//! Header plumbing for forwarding: hop-by-hop removal, upgrades, `x-forwarded-for`.

use std::net::SocketAddr;

use http::header::{self, HeaderMap, HeaderValue};
use http::{Request, Version};

pub(super) fn is_upgrade<B>(req: &Request<B>) -> bool {
    req.version() == Version::HTTP_11
        && req.headers().contains_key(header::UPGRADE)
        && req
            .headers()
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| {
                v.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
            })
}

/// Removes hop-by-hop headers (RFC 9110 §7.6.1), keeping `te: trailers` (gRPC needs it) and,
/// for upgrades, `connection`/`upgrade`.
pub(super) fn strip_hop_by_hop(h: &mut HeaderMap, keep_upgrade: bool) {
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
    for n in [
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
    ] {
        h.remove(n);
    }
    h.remove(header::TRANSFER_ENCODING);
    h.remove(header::TRAILER);
    if !keep_upgrade {
        h.remove(header::CONNECTION);
        h.remove(header::UPGRADE);
    }
    if h.get(header::TE).is_some_and(|v| v != "trailers") {
        h.remove(header::TE);
    }
}

pub(super) fn append_forwarded_for(h: &mut HeaderMap, peer: SocketAddr) {
    let ip = peer.ip().to_canonical().to_string();
    let v = match h.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        Some(prev) => format!("{prev}, {ip}"),
        None => ip,
    };
    if let Ok(v) = HeaderValue::from_str(&v) {
        h.insert("x-forwarded-for", v);
    }
}
