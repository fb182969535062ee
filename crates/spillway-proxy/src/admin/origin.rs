//! Who may change the proxy through the admin API: requests addressed to the admin listener
//! itself, and not forgeable by a web page.
//!
//! The threat: the admin API is on loopback, often without a token, and the operator runs a
//! browser on the same machine. Any page that browser opens can send a *simple* cross-origin
//! request (a form post: `application/x-www-form-urlencoded`, `multipart/form-data` or
//! `text/plain`, no custom header) to `http://127.0.0.1:9901/controls/admit-percent` without
//! asking anyone (Fetch standard, "CORS-safelisted request-header"); the page cannot read the
//! answer, but the state has changed. With DNS rebinding (a name of the attacker's that first
//! resolves to their server, then to 127.0.0.1) the page is even same-origin with the admin
//! API and can read it too. Two checks close both doors for the endpoints that change state:
//!
//! 1. **Host and Origin name the admin listener.** `Host` must be the listener's own address
//!    (its IP literal and bound port; any loopback IP literal or `localhost` when it listens on
//!    loopback; any IP literal when it listens on all addresses) or a name listed in
//!    `admin.allowed_hosts`. A rebinding page's requests carry the attacker's name in `Host`, so
//!    they fail here. `Origin`, when sent (browsers send it on every POST), must name the same
//!    authority over `http` or `https`; `Origin: null` (sandboxed frames, `file:` pages) fails.
//!    `Sec-Fetch-Site`, when sent, must be `same-origin` or `none` (typed by the user).
//! 2. **The request is not simple.** A POST must carry a header a browser sends cross-origin
//!    only after a CORS preflight — `Authorization`, `X-Spillway-Admin` (any value), or
//!    `Content-Type: application/json` — and the admin API answers no preflight (`OPTIONS`
//!    gets 405 without `Access-Control-Allow-*`), so the browser never sends it.
//!
//! `curl`, scripts and the dashboard pass both without effort: they send the `Host` they
//! connected to, and a token, a JSON body or the header. Reads (`/metrics`, `/status`,
//! `/controls`, the dashboard's `/api/*`) are not checked: Prometheus and dashboards reach them
//! under whatever name they use, and they hold no secrets (`/config`, which describes the
//! deployment, is checked like a change).

use std::net::{IpAddr, SocketAddr};

use http::header::{AUTHORIZATION, CONTENT_TYPE, HOST, ORIGIN};
use http::{HeaderMap, StatusCode, Uri};

use super::reply::ApiError;
use crate::config::admin::{host_port, parse_allowed};

/// The header that marks a request as sent by a script rather than a web form.
pub const ADMIN_HEADER: &str = "x-spillway-admin";

/// The addresses requests that change state must be addressed to.
#[derive(Debug, Clone)]
pub struct OwnAddress {
    listen: SocketAddr,
    /// `(lower-case host, port)`; no port = any port.
    allowed: Vec<(String, Option<u16>)>,
}

impl OwnAddress {
    /// The admin listener at `listen` (the bound address: its real port when 0 was asked
    /// for), plus the `allowed_hosts` of the configuration (checked by `AdminConfig::validate`;
    /// an entry that does not parse is skipped).
    pub fn new(listen: SocketAddr, allowed_hosts: &[String]) -> Self {
        OwnAddress {
            listen,
            allowed: allowed_hosts
                .iter()
                .filter_map(|h| parse_allowed(h).ok())
                .collect(),
        }
    }

    /// Whether `host` (as in a URL: brackets around IPv6) at `port` is this listener.
    fn is_own(&self, host: &str, port: u16) -> bool {
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let lower = host.to_ascii_lowercase();
        if self
            .allowed
            .iter()
            .any(|(h, p)| *h == lower && p.is_none_or(|p| p == port))
        {
            return true;
        }
        if port != self.listen.port() {
            return false;
        }
        let ip = self.listen.ip();
        match bare.parse::<IpAddr>() {
            // An IP literal cannot be a rebinding name; it must be one this socket answers on.
            Ok(asked) => {
                asked == ip
                    || ip.is_unspecified()
                    || (ip.is_loopback() && asked.is_loopback())
                    || ip.to_canonical() == asked.to_canonical()
            }
            // Browsers resolve `localhost` to loopback themselves (never through DNS).
            Err(_) => {
                (lower == "localhost" || lower == "localhost.")
                    && (ip.is_loopback() || ip.is_unspecified())
            }
        }
    }

    /// Checks `Host` (or the request target's authority), `Origin` and `Sec-Fetch-Site`.
    pub fn check_addressed(&self, headers: &HeaderMap, uri: &Uri) -> Result<(), ApiError> {
        let mut hosts = headers.get_all(HOST).iter();
        let host = match (hosts.next(), hosts.next()) {
            (Some(h), None) => h.as_bytes(),
            (None, _) => match uri.authority() {
                Some(a) => a.as_str().as_bytes(),
                None => return Err(forbidden("the request has no Host header")),
            },
            (Some(_), Some(_)) => return Err(forbidden("the request has two Host headers")),
        };
        let own = host_port(host).is_some_and(|(h, p)| self.is_own(h, p.unwrap_or(80)));
        if !own {
            return Err(forbidden(&format!(
                "Host {:?} is not this admin listener ({})",
                shown(host),
                self.accepted()
            )));
        }
        let mut origins = headers.get_all(ORIGIN).iter();
        match (origins.next(), origins.next()) {
            (None, _) => {}
            (Some(o), None) if self.origin_is_own(o.as_bytes()) => {}
            (Some(o), None) => {
                return Err(forbidden(&format!(
                    "Origin {:?} is not this admin listener ({}); a web page may not change \
                     the proxy",
                    shown(o.as_bytes()),
                    self.accepted()
                )))
            }
            (Some(_), Some(_)) => return Err(forbidden("the request has two Origin headers")),
        }
        if let Some(site) = headers.get("sec-fetch-site") {
            let ok = site.as_bytes().eq_ignore_ascii_case(b"same-origin")
                || site.as_bytes().eq_ignore_ascii_case(b"none");
            if !ok {
                return Err(forbidden(&format!(
                    "Sec-Fetch-Site {:?}: the browser says another site sent this request",
                    shown(site.as_bytes())
                )));
            }
        }
        Ok(())
    }

    fn origin_is_own(&self, origin: &[u8]) -> bool {
        let Ok(s) = std::str::from_utf8(origin) else {
            return false;
        };
        let (default_port, rest) = if let Some(r) = s.strip_prefix("http://") {
            (80, r)
        } else if let Some(r) = s.strip_prefix("https://") {
            (443, r)
        } else {
            return false; // `null`, or not a web origin
        };
        if rest.contains(['/', '@', '?', '#']) {
            return false;
        }
        host_port(rest.as_bytes()).is_some_and(|(h, p)| self.is_own(h, p.unwrap_or(default_port)))
    }

    /// What `Host` may be, for error messages.
    fn accepted(&self) -> String {
        let port = self.listen.port();
        let ip = self.listen.ip();
        let mut s = if ip.is_unspecified() {
            format!("an IP address of this host with port {port}")
        } else if ip.is_loopback() {
            format!("{} or localhost:{port}", self.listen)
        } else {
            self.listen.to_string()
        };
        if self.allowed.is_empty() {
            s.push_str("; add other names to admin.allowed_hosts");
        } else {
            s.push_str(", or one of admin.allowed_hosts");
        }
        s
    }
}

/// A POST must carry a header no browser sends cross-origin without a CORS preflight.
pub fn check_not_simple(headers: &HeaderMap) -> Result<(), ApiError> {
    let json = headers.get(CONTENT_TYPE).is_some_and(|v| {
        let essence = v.as_bytes().split(|&b| b == b';').next().unwrap_or(&[]);
        essence
            .trim_ascii()
            .eq_ignore_ascii_case(b"application/json")
    });
    if json || headers.contains_key(AUTHORIZATION) || headers.contains_key(ADMIN_HEADER) {
        return Ok(());
    }
    Err(forbidden(
        "a change needs a request a web page cannot forge: send the header \
         X-Spillway-Admin: 1 (any value), a JSON body with Content-Type: application/json, \
         or the admin token",
    ))
}

fn forbidden(message: &str) -> ApiError {
    ::metrics::counter!(crate::metrics::ADMIN_FORBIDDEN).increment(1);
    ApiError::status(StatusCode::FORBIDDEN, message.to_string())
}

/// A header value for an error message: at most 100 bytes, invalid UTF-8 replaced.
fn shown(v: &[u8]) -> String {
    String::from_utf8_lossy(&v[..v.len().min(100)]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::admin::check_allowed_host;
    use http::HeaderValue;

    fn h(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(*k, HeaderValue::from_static(v));
        }
        m
    }

    fn own(listen: &str, allowed: &[&str]) -> OwnAddress {
        let allowed: Vec<String> = allowed.iter().map(|s| s.to_string()).collect();
        OwnAddress::new(listen.parse().unwrap(), &allowed)
    }

    fn ok(o: &OwnAddress, pairs: &[(&'static str, &'static str)]) -> bool {
        o.check_addressed(&h(pairs), &Uri::from_static("/reload"))
            .is_ok()
    }

    #[test]
    fn loopback_listener_accepts_its_own_names_only() {
        let o = own("127.0.0.1:9901", &[]);
        for host in [
            "127.0.0.1:9901",
            "localhost:9901",
            "LOCALHOST:9901",
            "[::1]:9901",
        ] {
            let pairs = [("host", host)];
            assert!(ok(&o, &pairs), "{host}");
        }
        for host in [
            "evil.example:9901",
            "127.0.0.1:9902",
            "127.0.0.1",
            "10.0.0.1:9901",
            "localhost.evil.example:9901",
            "127.0.0.1:9901@evil",
            "127.0.0.1:75437",
            "127.0.0.1:09901x",
        ] {
            let pairs = [("host", host)];
            assert!(!ok(&o, &pairs), "{host}");
        }
        assert!(!ok(&o, &[]), "no Host");
        assert!(!ok(
            &o,
            &[("host", "127.0.0.1:9901"), ("host", "127.0.0.1:9901")]
        ));
    }

    #[test]
    fn origin_must_be_the_same_listener() {
        let o = own("127.0.0.1:9901", &[]);
        let host = ("host", "127.0.0.1:9901");
        assert!(ok(&o, &[host, ("origin", "http://127.0.0.1:9901")]));
        assert!(ok(&o, &[host, ("origin", "http://localhost:9901")]));
        for origin in [
            "https://evil.example",
            "http://evil.example:9901",
            "null",
            "http://127.0.0.1:8080",
            "http://127.0.0.1",
            "http://127.0.0.1:9901/path",
            "file://",
        ] {
            let pairs = [host, ("origin", origin)];
            assert!(!ok(&o, &pairs), "{origin}");
        }
        assert!(!ok(&o, &[host, ("sec-fetch-site", "cross-site")]));
        assert!(!ok(&o, &[host, ("sec-fetch-site", "same-site")]));
        assert!(ok(&o, &[host, ("sec-fetch-site", "same-origin")]));
        assert!(ok(&o, &[host, ("sec-fetch-site", "none")]));
    }

    #[test]
    fn allowed_hosts_and_wildcard_listeners() {
        let o = own("0.0.0.0:9901", &["admin.internal", "Proxy.Example:8443"]);
        assert!(ok(&o, &[("host", "10.1.2.3:9901")]));
        assert!(ok(&o, &[("host", "admin.internal:9901")]));
        assert!(ok(&o, &[("host", "ADMIN.internal:1234")]), "any port");
        assert!(ok(&o, &[("host", "proxy.example:8443")]));
        assert!(!ok(&o, &[("host", "proxy.example:9901")]));
        assert!(!ok(&o, &[("host", "10.1.2.3:9902")]));
        assert!(!ok(&o, &[("host", "evil.example:9901")]));
        assert!(ok(
            &o,
            &[
                ("host", "proxy.example:8443"),
                ("origin", "https://proxy.example:8443")
            ]
        ));
        // A listener on one address answers to that address.
        let o = own("10.0.0.5:9901", &[]);
        assert!(ok(&o, &[("host", "10.0.0.5:9901")]));
        assert!(!ok(&o, &[("host", "127.0.0.1:9901")]));
        assert!(!ok(&o, &[("host", "localhost:9901")]));
    }

    #[test]
    fn allowed_host_entries_are_checked() {
        for good in [
            "admin.internal",
            "admin.internal:9901",
            "[::1]:9901",
            "10.0.0.1",
        ] {
            assert!(check_allowed_host(good).is_ok(), "{good}");
        }
        for bad in ["", "http://a", "a/b", "a b", "user@a", "a:99999", "a:"] {
            let e = check_allowed_host(bad);
            assert!(e.is_err(), "{bad:?}");
        }
        let e = check_allowed_host("http://a").unwrap_err();
        assert!(e.to_string().contains("allowed_hosts"), "{e}");
    }

    #[test]
    fn simple_requests_are_refused() {
        assert!(check_not_simple(&h(&[])).is_err());
        let form = [("content-type", "application/x-www-form-urlencoded")];
        assert!(check_not_simple(&h(&form)).is_err());
        assert!(check_not_simple(&h(&[("content-type", "text/plain")])).is_err());
        assert!(check_not_simple(&h(&[("content-type", "application/json")])).is_ok());
        let json = [("content-type", "Application/JSON; charset=utf-8")];
        assert!(check_not_simple(&h(&json)).is_ok());
        assert!(check_not_simple(&h(&[("x-spillway-admin", "1")])).is_ok());
        assert!(check_not_simple(&h(&[("authorization", "Bearer x")])).is_ok());
        let e = check_not_simple(&h(&[])).unwrap_err();
        assert_eq!(e.status, StatusCode::FORBIDDEN);
        assert!(e.message.contains("X-Spillway-Admin"), "{}", e.message);
    }
}
