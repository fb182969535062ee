//! Graceful degradation: past a utilisation threshold, a route answers from a cheaper path.
//!
//! Why: the SRE book (ch. 21/22, "graceful degradation") — when a service is overloaded, it is
//! better to serve a cheaper, lower-quality answer (a cached or static page, a lighter
//! endpoint) to many than full answers to few. Each route may name a degraded mode — another
//! upstream path, or a static response — engaged when the controller's utilisation reaches the
//! route's threshold. An operator can switch it off (`ProxyState::set_degradation`), and it has
//! counters of its own so that a degraded mode that is silently always on is visible. Health
//! checks are never degraded.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use serde::Serialize;

use crate::body::{full_body, ResponseBody};
use crate::config::DegradeConfig;

/// How a request was degraded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Sent to the route's alternative upstream path.
    UpstreamPath,
    /// Answered with the route's static response.
    Static,
}

/// Per-route degradation counters.
#[derive(Debug, Default)]
pub struct DegradeCounters {
    upstream_path: AtomicU64,
    static_response: AtomicU64,
    exercised: AtomicU64,
    suppressed: AtomicU64,
}

/// Counter values.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct DegradeCounts {
    /// Requests sent to the alternative upstream path.
    pub upstream_path: u64,
    /// Requests answered with the static response.
    pub static_response: u64,
    /// Of those, requests degraded on purpose by the "exercise the degraded path" control.
    pub exercised: u64,
    /// Requests that would have been degraded but the switch was off.
    pub suppressed: u64,
}

impl DegradeCounters {
    /// Counts one degraded request.
    pub fn count(&self, route: &str, mode: Mode, exercised: bool) {
        let (c, label) = match mode {
            Mode::UpstreamPath => (&self.upstream_path, "upstream_path"),
            Mode::Static => (&self.static_response, "static"),
        };
        c.fetch_add(1, Ordering::Relaxed);
        if exercised {
            self.exercised.fetch_add(1, Ordering::Relaxed);
        }
        metrics::counter!(crate::metrics::DEGRADED, crate::metrics::L_ROUTE => route.to_string(), "mode" => label)
            .increment(1);
    }

    /// Counts one request not degraded because the switch was off.
    pub fn suppressed(&self) {
        self.suppressed.fetch_add(1, Ordering::Relaxed);
    }

    /// The values.
    pub fn snapshot(&self) -> DegradeCounts {
        DegradeCounts {
            upstream_path: self.upstream_path.load(Ordering::Relaxed),
            static_response: self.static_response.load(Ordering::Relaxed),
            exercised: self.exercised.load(Ordering::Relaxed),
            suppressed: self.suppressed.load(Ordering::Relaxed),
        }
    }
}

/// `/status` view of a route.
#[derive(Debug, Clone, Serialize)]
pub struct RouteStatus {
    /// Route name.
    pub name: String,
    /// Whether the route has a degraded mode.
    pub degrade_configured: bool,
    /// Its utilisation threshold.
    pub threshold: Option<f64>,
    /// Whether the off switch allows degrading.
    pub degradation_enabled: bool,
    /// Counters.
    pub counters: DegradeCounts,
}

/// The mode of `d`.
pub fn mode(d: &DegradeConfig) -> Mode {
    if d.upstream_path.is_some() {
        Mode::UpstreamPath
    } else {
        Mode::Static
    }
}

/// The static response of `d`, marked with `x-spillway-degraded: 1`.
pub fn static_response(d: &DegradeConfig) -> Response<ResponseBody> {
    let body = d.body.clone().unwrap_or_default();
    let mut res = Response::new(full_body(Bytes::from(body)));
    *res.status_mut() = d
        .status
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK);
    let ct = d
        .content_type
        .as_deref()
        .and_then(|c| HeaderValue::from_str(c).ok())
        .unwrap_or(HeaderValue::from_static("text/plain; charset=utf-8"));
    res.headers_mut().insert(http::header::CONTENT_TYPE, ct);
    res.headers_mut()
        .insert(DEGRADED_HEADER, HeaderValue::from_static("1"));
    res
}

/// Marks responses produced by a degraded mode.
pub const DEGRADED_HEADER: http::HeaderName = http::HeaderName::from_static("x-spillway-degraded");

/// Rewrites `uri`'s path to `path`, keeping the query.
pub fn rewrite_path(uri: &http::Uri, path: &str) -> Option<http::Uri> {
    let pq = match uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_string(),
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(pq.parse().ok()?);
    http::Uri::from_parts(parts).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_and_rewrite() {
        let d = DegradeConfig {
            threshold: 0.9,
            upstream_path: None,
            status: Some(203),
            body: Some("cached".into()),
            content_type: Some("application/json".into()),
        };
        assert_eq!(mode(&d), Mode::Static);
        let r = static_response(&d);
        assert_eq!(r.status(), 203);
        assert_eq!(r.headers()["content-type"], "application/json");
        let u: http::Uri = "/a/b?x=1".parse().unwrap();
        assert_eq!(rewrite_path(&u, "/lite").unwrap(), "/lite?x=1");
        let c = DegradeCounters::default();
        c.count("r", Mode::Static, true);
        c.suppressed();
        let s = c.snapshot();
        assert_eq!((s.static_response, s.exercised, s.suppressed), (1, 1, 1));
    }
}
