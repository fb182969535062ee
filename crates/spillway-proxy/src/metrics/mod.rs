//! The proxy's own counters and metric names (request-level names live in
//! `spillway_tower::wire::metric`, shared with the tower layers).
//!
//! Why counters and not log lines: a proxy under overload refuses thousands of requests a
//! second, and a log line per refusal would cost more than the refusal, which must stay far
//! cheaper than serving (AWS Builders' Library: rejections aren't free). Every fault is counted
//! twice: in an atomic here for `/status`, and through the `metrics` facade for whatever
//! exporter the admin listener installs.
//!
//! Below: the process's recorder and the `/metrics` text (`recorder`, with the `*_seconds`
//! histograms and the counters the dashboard reads), the offered-demand counter the data path
//! feeds, and the caps on label values (`labels`). The admin listener serves them; the state
//! and the data path write them, so they live below all three.

pub mod counted;
pub mod histograms;
pub mod labels;
pub mod recorder;

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use spillway_core::retry::RetryGate;

pub use recorder::{record_offered, OFFERED_COST, OFFERED_REQUESTS};

/// Faults, by kind (label `kind` on [`FAULTS`]).
pub const FAULTS: &str = "spillway_proxy_faults_total";
/// Requests answered by a route's degraded mode (labels `route`, `mode`).
pub const DEGRADED: &str = "spillway_proxy_degraded_total";
/// Requests forwarded upstream, by task and outcome (labels `upstream`, `outcome`).
pub const UPSTREAM_REQUESTS: &str = "spillway_proxy_upstream_requests_total";
/// Upstream tasks ejected (label `upstream`).
pub const EJECTIONS: &str = "spillway_proxy_ejections_total";
/// Requests sent again on a new connection because the upstream closed the reused one as they
/// went out (the keep-alive race; label `upstream`). A steady rate says the proxy keeps idle
/// connections longer than the upstream does: lower `upstream.idle_timeout_ms` below the
/// upstream's own keep-alive timeout.
pub const KEEPALIVE_RACES: &str = "spillway_proxy_upstream_keepalive_races_total";
/// Requests whose caller went away while their task worked on them, held (their admission and
/// request slots) until the task answers (`upstream.hold_abandoned`).
pub const ABANDONED_HELD: &str = "spillway_proxy_abandoned_held_requests";
/// Holds of abandoned requests ended, by how (label `end`: `answered`, `failed`, `timed_out` —
/// no answer within `upstream.request_timeout_ms` of the send).
pub const ABANDONED_HOLDS: &str = "spillway_proxy_abandoned_holds_total";
/// How a hold ended (label `end` on [`ABANDONED_HOLDS`]): the answer was read to its end.
pub const HOLD_ANSWERED: &str = "answered";
/// The exchange failed.
pub const HOLD_FAILED: &str = "failed";
/// No end within the upstream timeout.
pub const HOLD_TIMED_OUT: &str = "timed_out";
/// Open client connections.
pub const CONNECTIONS: &str = "spillway_proxy_client_connections";
/// Request header fields whose names contain `_`, by what was done with them (label `action`:
/// `dropped`, one per field; `refused`, one per request answered 400).
pub const UNDERSCORE_HEADERS: &str = "spillway_proxy_underscore_headers_total";
/// Overload refusals the proxy did not retry on another task, by the gate that stopped it
/// (label `reason`: `budget`, `widespread`, `attempt_limit`, `dont_retry`, `not_retryable`).
/// A steady `budget` rate says the upstreams refuse more than the retry budget covers.
pub const RETRY_GIVE_UPS: &str = "spillway_proxy_retry_give_ups_total";
/// Admin requests refused for a missing or wrong token.
pub const ADMIN_UNAUTHORIZED: &str = "spillway_admin_unauthorized_total";
/// Admin requests refused for their `Origin` (cross-site).
pub const ADMIN_FORBIDDEN: &str = "spillway_admin_forbidden_total";
/// Label: what was done (`UNDERSCORE_HEADERS`).
pub const L_ACTION: &str = "action";
/// Label: how a hold ended (`ABANDONED_HOLDS`).
pub const L_END: &str = "end";
/// Label: fault kind.
pub const L_KIND: &str = "kind";
/// Label: upstream task address.
pub const L_UPSTREAM: &str = "upstream";
/// Label: route name.
pub const L_ROUTE: &str = "route";
/// Label: retry gate ([`RETRY_GIVE_UPS`]).
pub const L_REASON: &str = "reason";

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Malformed request line or headers (400).
    BadRequest,
    /// Request head larger than `listen.max_header_bytes` (431).
    HeadersTooLarge,
    /// Client did not send its head in time.
    HeaderTimeout,
    /// Accept paused at `listen.max_connections`.
    ConnectionCap,
    /// Upstream refused the connection (502 if no other task could take it).
    UpstreamConnect,
    /// Upstream reset or broke the connection mid-request (502).
    UpstreamReset,
    /// Upstream answered with something that is not a valid HTTP/1.1 response head (502).
    UpstreamInvalid,
    /// No response head within `upstream.request_timeout_ms` (504), or a response body
    /// stalled for `upstream.response_body_timeout_ms` (connection cut).
    UpstreamTimeout,
    /// No upstream slot within `upstream.pool_wait_timeout_ms`, or no task available (503).
    UpstreamUnavailable,
    /// A body larger than `upstream.retry_buffer_bytes`, or past the budget of
    /// `upstream.retry_buffer_total_bytes`, was streamed, so not retried.
    NotRetriedLargeBody,
    /// A TLS handshake failed.
    TlsHandshake,
    /// A request body to be buffered did not arrive within `listen.header_read_timeout_ms`
    /// (408), or a streamed one stalled for `listen.body_read_timeout_ms` (connection cut).
    BodyTimeout,
    /// A client took no byte of its response for `listen.send_timeout_ms` (connection cut).
    SendTimeout,
    /// A request answered 503 at once because `listen.max_requests_in_progress` were held.
    RequestsInProgress,
}

impl Fault {
    const ALL: [Fault; 14] = [
        Fault::BadRequest,
        Fault::HeadersTooLarge,
        Fault::HeaderTimeout,
        Fault::ConnectionCap,
        Fault::UpstreamConnect,
        Fault::UpstreamReset,
        Fault::UpstreamInvalid,
        Fault::UpstreamTimeout,
        Fault::UpstreamUnavailable,
        Fault::NotRetriedLargeBody,
        Fault::TlsHandshake,
        Fault::BodyTimeout,
        Fault::SendTimeout,
        Fault::RequestsInProgress,
    ];

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Fault::BadRequest => "bad_request",
            Fault::HeadersTooLarge => "headers_too_large",
            Fault::HeaderTimeout => "header_timeout",
            Fault::ConnectionCap => "connection_cap",
            Fault::UpstreamConnect => "upstream_connect",
            Fault::UpstreamReset => "upstream_reset",
            Fault::UpstreamInvalid => "upstream_invalid",
            Fault::UpstreamTimeout => "upstream_timeout",
            Fault::UpstreamUnavailable => "upstream_unavailable",
            Fault::NotRetriedLargeBody => "not_retried_large_body",
            Fault::TlsHandshake => "tls_handshake",
            Fault::BodyTimeout => "body_timeout",
            Fault::SendTimeout => "send_timeout",
            Fault::RequestsInProgress => "requests_in_progress",
        }
    }
}

/// Fault counters, one per kind (sized by `Fault::ALL`, so a new kind cannot index past them).
#[derive(Debug, Default)]
pub struct Faults([AtomicU64; Fault::ALL.len()]);

impl Faults {
    /// Counts one `f` (here and in the `metrics` facade).
    pub fn count(&self, f: Fault) {
        self.0[f as usize].fetch_add(1, Ordering::Relaxed);
        metrics::counter!(FAULTS, L_KIND => f.as_str()).increment(1);
    }

    /// How many `f` so far.
    pub fn get(&self, f: Fault) -> u64 {
        self.0[f as usize].load(Ordering::Relaxed)
    }

    /// All counts, for `/status`.
    pub fn snapshot(&self) -> FaultCounts {
        FaultCounts(
            Fault::ALL
                .iter()
                .map(|&f| (f.as_str(), self.get(f)))
                .collect(),
        )
    }
}

/// Fault counts by kind.
#[derive(Debug, Clone, Serialize)]
pub struct FaultCounts(pub std::collections::BTreeMap<&'static str, u64>);

/// One retry give-up at `gate` ([`RETRY_GIVE_UPS`]).
pub fn retry_gave_up(gate: RetryGate) {
    metrics::counter!(RETRY_GIVE_UPS, L_REASON => gate.as_str()).increment(1);
}

/// HELP lines for the proxy's own families, and their fixed label values registered at zero:
/// `rate()` and `increase()` need a sample before the first event, or an alert on a counter's
/// first increase never fires and a dashboard shows "no data" instead of 0.
pub fn describe() {
    metrics::describe_counter!(FAULTS, "Faults, by kind.");
    metrics::describe_counter!(
        DEGRADED,
        "Requests answered by a route's degraded mode, by route and mode."
    );
    metrics::describe_counter!(
        EJECTIONS,
        "Upstream tasks ejected after repeated failures, by upstream."
    );
    metrics::describe_counter!(
        KEEPALIVE_RACES,
        "Requests sent again because the upstream closed the reused connection as they went out."
    );
    metrics::describe_gauge!(CONNECTIONS, "Open client connections.");
    metrics::describe_gauge!(
        ABANDONED_HELD,
        "Requests whose caller went away, held until their upstream task answers."
    );
    metrics::describe_counter!(
        ABANDONED_HOLDS,
        "Holds of requests whose caller went away, ended, by how."
    );
    // Registered, not set: a hold may be under way already.
    metrics::gauge!(ABANDONED_HELD).increment(0.0);
    for end in [HOLD_ANSWERED, HOLD_FAILED, HOLD_TIMED_OUT] {
        metrics::counter!(ABANDONED_HOLDS, L_END => end).absolute(0);
    }
    metrics::describe_counter!(
        UNDERSCORE_HEADERS,
        "Request header fields with '_' in their names, by what was done with them."
    );
    metrics::describe_counter!(
        RETRY_GIVE_UPS,
        "Overload refusals not retried on another task, by the gate that stopped the retry."
    );
    metrics::describe_counter!(
        ADMIN_UNAUTHORIZED,
        "Admin requests refused for a missing or wrong token."
    );
    metrics::describe_counter!(ADMIN_FORBIDDEN, "Admin requests refused for their Origin.");
    metrics::describe_counter!(
        crate::access::DROPPED,
        "Access-log lines dropped because the writer fell behind."
    );
    // The lease task describes its families when it starts, which may be before the recorder.
    spillway_tower::lease::describe();
    for f in Fault::ALL {
        metrics::counter!(FAULTS, L_KIND => f.as_str()).absolute(0);
    }
    for g in RetryGate::ALL {
        metrics::counter!(RETRY_GIVE_UPS, L_REASON => g.as_str()).absolute(0);
    }
    metrics::counter!(ADMIN_UNAUTHORIZED).absolute(0);
    metrics::counter!(ADMIN_FORBIDDEN).absolute(0);
    metrics::counter!(crate::access::DROPPED).absolute(0);
}
