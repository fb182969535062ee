//! Header plumbing for forwarding: hop-by-hop removal, upgrades, `x-forwarded-for`.

use std::net::SocketAddr;

use http::header::{self, HeaderMap, HeaderValue};
use http::{Request, Version};
use spillway_tower::wire;

use crate::http1::X_FORWARDED_FOR;
use crate::progress::ActiveRequest;

/// Whether `req` asks to switch its connection to another protocol that the proxy tunnels (an
/// HTTP/1.1 `upgrade` its `connection` names).
///
/// Never `h2c`: after the upstream's 101 the tunnel is opaque, and the client would speak
/// HTTP/2 straight to the upstream — any number of requests, none classified, admitted or
/// counted, through the one permit of the upgrade (and past every route's rules: "h2c
/// smuggling"). RFC 9113 §3.1 deprecates the upgrade anyway, and RFC 9110 §7.8 lets a server
/// ignore `upgrade`: such a request is forwarded as a plain one, its `upgrade` and what its
/// `connection` names (`http2-settings`) removed as hop-by-hop.
pub(super) fn is_upgrade<B>(req: &Request<B>) -> bool {
    req.version() == Version::HTTP_11
        && wire::find(req.headers(), &header::UPGRADE).is_some()
        && !req
            .headers()
            .get_all(header::UPGRADE)
            .iter()
            .flat_map(|v| v.as_bytes().split(|b| *b == b','))
            .any(|t| {
                let t = t.trim_ascii();
                // A protocol may carry a version (`h2c/1`, RFC 9110 §7.8): the name decides.
                let name = t.split(|b| *b == b'/').next().unwrap_or(t);
                name.eq_ignore_ascii_case(b"h2c")
            })
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

/// Joins the `cookie` fields of a request into one, separated by `"; "`, as RFC 9113 §8.2.3
/// requires of a request passing from HTTP/2 — where a client may send each cookie as a field
/// of its own, and browsers do — to HTTP/1.1, where many servers read only the first
/// `cookie` line (or join them with commas, which breaks the cookies). Nothing is done for
/// one field or none.
pub(super) fn join_cookies(h: &mut HeaderMap) {
    let mut all = h.get_all(header::COOKIE).iter();
    if all.next().is_none() || all.next().is_none() {
        return;
    }
    let mut joined: Vec<u8> = Vec::new();
    for v in h.get_all(header::COOKIE) {
        if !joined.is_empty() {
            joined.extend_from_slice(b"; ");
        }
        joined.extend_from_slice(v.as_bytes());
    }
    // Made of valid values and "; ": always a valid value.
    if let Ok(v) = HeaderValue::from_bytes(&joined) {
        h.insert(header::COOKIE, v);
    }
}

/// A client connection's peer: its address and its `x-forwarded-for` value, formatted once per
/// connection (clones share the bytes) instead of once per request.
#[derive(Debug)]
pub struct Peer {
    /// The client's address.
    pub addr: SocketAddr,
    alone: Option<HeaderValue>,
    /// The request's mark on its connection's header-read timeout (`progress`), moved
    /// into the response body so the request counts as in progress until its body ends.
    pub(crate) busy: Option<ActiveRequest>,
    /// The client's connection writes an answer's head as bytes (the HTTP/1.1 fast path), so an
    /// HTTP/1.1 upstream's header fields may pass through without a map (`RawFields`).
    pub(crate) raw_fields: bool,
}

impl Peer {
    /// The peer at `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        let alone = forwarded_for(None, addr.ip().to_canonical());
        Peer {
            addr,
            alone,
            busy: None,
            raw_fields: false,
        }
    }

    /// This connection's peer for one request, carrying the request's `busy` token.
    pub fn for_request(&self, busy: ActiveRequest) -> Self {
        Peer {
            addr: self.addr,
            alone: self.alone.clone(),
            busy: Some(busy),
            raw_fields: false,
        }
    }

    /// This peer, on a connection that writes an answer's head as bytes (see `raw_fields`).
    pub fn writing_bytes(mut self) -> Self {
        self.raw_fields = true;
        self
    }
}

/// Appends the peer to `x-forwarded-for`: the connection's own value when the request has no
/// earlier hops, else the list formatted on the stack (one copy into the header value, no
/// `String`s) unless it is too long for the buffer.
/// The `x-forwarded-for` value the request goes on with (written by `super::added`).
pub(super) fn forwarded_for_value(h: &HeaderMap, peer: &Peer) -> Option<HeaderValue> {
    let prev = wire::find(h, &X_FORWARDED_FOR).and_then(|v| v.to_str().ok());
    match (prev, &peer.alone) {
        (None, Some(v)) => Some(v.clone()),
        _ => forwarded_for(prev, peer.addr.ip().to_canonical()),
    }
}

fn forwarded_for(prev: Option<&str>, ip: std::net::IpAddr) -> Option<HeaderValue> {
    use std::io::Write;
    let mut buf = [0u8; 256];
    let mut w = std::io::Cursor::new(&mut buf[..]);
    let written = match prev {
        Some(prev) => write!(w, "{prev}, {ip}"),
        None => write!(w, "{ip}"),
    };
    let len = usize::try_from(w.position()).unwrap_or(usize::MAX);
    let v = match written {
        Ok(()) => HeaderValue::from_bytes(buf.get(..len).unwrap_or_default()),
        Err(_) => match prev {
            Some(prev) => HeaderValue::from_str(&format!("{prev}, {ip}")),
            None => HeaderValue::from_str(&ip.to_string()),
        },
    };
    v.ok()
}

#[cfg(test)]
mod tests {
    use http::header::HeaderName;

    use super::*;
    use crate::http1::{is_hop_by_hop, strip_hop_by_hop, ALWAYS_REMOVED};

    /// The peer appended to `h`'s `x-forwarded-for`, as a forwarded request carries it.
    fn append_forwarded_for(h: &mut HeaderMap, peer: &Peer) {
        if let Some(v) = forwarded_for_value(h, peer) {
            h.insert(X_FORWARDED_FOR, v);
        }
    }

    fn xff(prev: Option<&str>, peer: &str) -> String {
        let mut h = HeaderMap::new();
        if let Some(p) = prev {
            h.insert("x-forwarded-for", HeaderValue::from_str(p).unwrap());
        }
        append_forwarded_for(&mut h, &Peer::new(peer.parse().unwrap()));
        h["x-forwarded-for"].to_str().unwrap().to_string()
    }

    #[test]
    fn hop_by_hop_names_are_exactly_the_listed_ones() {
        let listed: Vec<HeaderName> = [header::CONNECTION, header::UPGRADE, header::TE]
            .into_iter()
            .chain(ALWAYS_REMOVED.iter().cloned())
            .collect();
        for n in &listed {
            assert!(is_hop_by_hop(n), "{n}");
        }
        // Others of the same lengths, standard and custom, and the usual ones.
        for other in [
            "ab",
            "accept-",
            "x-trailer",
            "content-length",
            "content-type",
            "keep-alives",
            "x-connection",
            "proxy-connectio",
            "transfer-encodinh",
            "x-spillway-queue-ms",
            "host",
            "date",
            "endpoint-load-metrics",
            "x-spillway-cost",
            "access-control-allow-origin",
            "user-agent",
            "accept",
            "referer",
            "cache-control",
            "set-cookie",
            "x-spillway-service-ms",
        ] {
            let n = HeaderName::from_static(other);
            assert!(!listed.contains(&n));
            assert!(!is_hop_by_hop(&n), "{n}");
        }
    }

    #[test]
    fn forwarded_for_appends_the_peer() {
        assert_eq!(xff(None, "10.0.0.1:5000"), "10.0.0.1");
        assert_eq!(xff(Some("1.2.3.4"), "10.0.0.1:5000"), "1.2.3.4, 10.0.0.1");
        // An IPv4-mapped IPv6 peer is written as IPv4.
        assert_eq!(xff(None, "[::ffff:10.0.0.2]:80"), "10.0.0.2");
        assert_eq!(xff(None, "[2001:db8::1]:80"), "2001:db8::1");
        // Longer than the stack buffer: still appended in full.
        let long = vec!["192.168.100.200"; 40].join(", ");
        assert_eq!(xff(Some(&long), "10.0.0.1:1"), format!("{long}, 10.0.0.1"));
    }

    fn map(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    fn names(h: &HeaderMap) -> Vec<&str> {
        let mut n: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        n.sort_unstable();
        n
    }

    #[test]
    fn hop_by_hop_headers_are_removed_and_end_to_end_ones_kept() {
        let mut h = map(&[
            ("host", "a"),
            ("connection", "keep-alive, x-secret"),
            ("x-secret", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("proxy-authorization", "basic x"),
            ("transfer-encoding", "chunked"),
            ("trailer", "x-sum"),
            ("te", "gzip"),
            ("upgrade", "websocket"),
            ("x-spillway-customer", "acme"),
        ]);
        strip_hop_by_hop(&mut h, false);
        assert_eq!(names(&h), ["host", "trailer", "x-spillway-customer"]);

        // gRPC's `te: trailers` stays; an upgrade keeps connection/upgrade.
        let mut h = map(&[
            ("te", "trailers"),
            ("connection", "upgrade"),
            ("upgrade", "websocket"),
        ]);
        strip_hop_by_hop(&mut h, true);
        assert_eq!(names(&h), ["connection", "te", "upgrade"]);
    }

    #[test]
    fn cookies_in_several_fields_are_joined_into_one() {
        let mut h = map(&[("cookie", "a=1"), ("x-b", "2"), ("cookie", "b=2; c=3")]);
        join_cookies(&mut h);
        let all: Vec<_> = h.get_all("cookie").iter().collect();
        assert_eq!(all, ["a=1; b=2; c=3"]);
        assert_eq!(h["x-b"], "2");
        let mut one = map(&[("cookie", "a=1")]);
        let before = one.clone();
        join_cookies(&mut one);
        assert_eq!(one, before);
    }

    #[test]
    fn a_map_without_hop_by_hop_headers_is_left_as_it_is() {
        let pairs = [
            ("host", "a"),
            ("accept", "*/*"),
            ("x-spillway-criticality", "CRITICAL"),
            ("x-b", "1"),
        ];
        let mut h = map(&pairs);
        h.append("x-b", HeaderValue::from_static("2"));
        let before = h.clone();
        strip_hop_by_hop(&mut h, false);
        assert_eq!(h, before);
    }

    #[test]
    fn the_connection_value_is_shared_not_copied() {
        let peer = Peer::new("10.0.0.9:1".parse().unwrap());
        let (mut a, mut b) = (HeaderMap::new(), HeaderMap::new());
        append_forwarded_for(&mut a, &peer);
        append_forwarded_for(&mut b, &peer);
        assert_eq!(a["x-forwarded-for"], "10.0.0.9");
        assert_eq!(
            a["x-forwarded-for"].as_bytes().as_ptr(),
            b["x-forwarded-for"].as_bytes().as_ptr(),
            "both requests carry the connection's one value"
        );
    }
}
