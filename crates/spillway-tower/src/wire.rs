//! Every name Spillway puts on the wire, defined once: headers, gRPC metadata keys, status codes
//! and metric names, with the pure functions that parse and format their values.
//!
//! Why one module: the server layer, the client layers, the proxy and the README must agree on
//! spelling and units, and a header parsed in two places is eventually parsed two ways. Every
//! parser here is a pure function of the header bytes (no clock, no I/O) returning a
//! [`HeaderError`] that names the header and what it accepts, so a 400 response or a log line can
//! quote it verbatim.
//!
//! | purpose | HTTP | gRPC (metadata, same lowercase keys) |
//! | --- | --- | --- |
//! | criticality | [`CRITICALITY`] `x-spillway-criticality: CRITICAL` | same key |
//! | deadline | [`DEADLINE_MS`] `x-spillway-deadline-ms: 250` (remaining ms) | [`GRPC_TIMEOUT`] `grpc-timeout: 250m` |
//! | attempt | [`ATTEMPT`] `x-spillway-attempt: 2` (1-based) | [`GRPC_PREVIOUS_RPC_ATTEMPTS`] `grpc-previous-rpc-attempts: 1` |
//! | customer | [`CUSTOMER`] `x-spillway-customer: acme` | same key |
//! | don't retry | [`DONT_RETRY`] `x-spillway-dont-retry: 1` | [`GRPC_RETRY_PUSHBACK_MS`] `grpc-retry-pushback-ms: -1` |
//! | retry later | `Retry-After: 2` (seconds) | `grpc-retry-pushback-ms: 1500` |
//! | load report | [`ENDPOINT_LOAD_METRICS`] `endpoint-load-metrics: TEXT cpu_utilization=0.42` | same key, or [`ENDPOINT_LOAD_METRICS_BIN`] (protobuf, usually a trailer) |
//! | per-response cost | [`COST`], [`QUEUE_MS`], [`SERVICE_MS`] | same keys |
//!
//! Attempt conversion: gRPC's `grpc-previous-rpc-attempts` counts the attempts *before* this one
//! (absent on the first, 1 on the second — gRFC A6 "Exposed Retry Metadata"), while
//! `x-spillway-attempt` is the 1-based number of this attempt, so `attempt = previous + 1`.
//!
//! Pushback (gRFC A6, "Pushback", <https://github.com/grpc/proposal/blob/master/A6-client-retries.md>):
//! `grpc-retry-pushback-ms` is an ASCII signed 32-bit integer; a non-negative value asks the
//! client to wait that many ms before retrying, a *negative or unparseable* value asks it not to
//! retry at all. An *absent* value leaves the client's own backoff in charge (it is not a
//! "don't retry"), so Spillway writes `-1` explicitly when retrying cannot help.
//!
//! ORCA (xDS "Open Request Cost Aggregation", envoyproxy/envoy#6614; gRFC A51): the native HTTP
//! form is `endpoint-load-metrics: TEXT key=value, key=value` with the `OrcaLoadReport` field
//! names (`cpu_utilization`, `mem_utilization`, `rps_fractional`, `application_utilization`, …).

use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use spillway_core::Criticality;

mod orca;
mod orca_metrics;
pub use orca::{format_orca, parse_orca, OrcaReport};
pub use orca_metrics::{
    format_orca_bin, parse_orca_bin, OrcaLoadReportMessage, OrcaMetric, OrcaMetricError,
    OrcaUtilisation, MAX_ORCA_BIN_BYTES, ORCA_METRIC_ACCEPTS,
};

// ---------------------------------------------------------------------------------------------
// Header names
// ---------------------------------------------------------------------------------------------

/// The header names as `&'static str` (for error messages, logs and non-`http` users).
pub mod name {
    /// `x-spillway-criticality`
    pub const CRITICALITY: &str = "x-spillway-criticality";
    /// `x-spillway-deadline-ms`
    pub const DEADLINE_MS: &str = "x-spillway-deadline-ms";
    /// `grpc-timeout`
    pub const GRPC_TIMEOUT: &str = "grpc-timeout";
    /// `x-spillway-attempt`
    pub const ATTEMPT: &str = "x-spillway-attempt";
    /// `grpc-previous-rpc-attempts`
    pub const GRPC_PREVIOUS_RPC_ATTEMPTS: &str = "grpc-previous-rpc-attempts";
    /// `x-spillway-customer`
    pub const CUSTOMER: &str = "x-spillway-customer";
    /// `x-spillway-dont-retry`
    pub const DONT_RETRY: &str = "x-spillway-dont-retry";
    /// `grpc-retry-pushback-ms`
    pub const GRPC_RETRY_PUSHBACK_MS: &str = "grpc-retry-pushback-ms";
    /// `endpoint-load-metrics`
    pub const ENDPOINT_LOAD_METRICS: &str = "endpoint-load-metrics";
    /// `endpoint-load-metrics-bin`
    pub const ENDPOINT_LOAD_METRICS_BIN: &str = "endpoint-load-metrics-bin";
    /// `x-spillway-cost`
    pub const COST: &str = "x-spillway-cost";
    /// `x-spillway-queue-ms`
    pub const QUEUE_MS: &str = "x-spillway-queue-ms";
    /// `x-spillway-service-ms`
    pub const SERVICE_MS: &str = "x-spillway-service-ms";
    /// `grpc-status`
    pub const GRPC_STATUS: &str = "grpc-status";
    /// `grpc-message`
    pub const GRPC_MESSAGE: &str = "grpc-message";
    /// `retry-after`
    pub const RETRY_AFTER: &str = "retry-after";
}

/// Request criticality: one of `CRITICAL_PLUS`, `CRITICAL`, `SHEDDABLE_PLUS`, `SHEDDABLE`
/// (lower/kebab-case accepted). Honoured only from trusted peers.
pub const CRITICALITY: HeaderName = HeaderName::from_static(name::CRITICALITY);
/// HTTP deadline: the milliseconds remaining for this request when it was sent (non-negative
/// integer). The receiver computes `deadline = arrival + value`.
pub const DEADLINE_MS: HeaderName = HeaderName::from_static(name::DEADLINE_MS);
/// gRPC deadline (gRPC over HTTP/2 spec: `TimeoutValue TimeoutUnit`, at most 8 digits, unit one
/// of `H M S m u n`).
pub const GRPC_TIMEOUT: HeaderName = HeaderName::from_static(name::GRPC_TIMEOUT);
/// HTTP attempt number, 1-based (`1` = the original request, `2` = first retry).
pub const ATTEMPT: HeaderName = HeaderName::from_static(name::ATTEMPT);
/// gRPC's count of attempts made *before* this one (gRFC A6); `attempt = value + 1`.
pub const GRPC_PREVIOUS_RPC_ATTEMPTS: HeaderName =
    HeaderName::from_static(name::GRPC_PREVIOUS_RPC_ATTEMPTS);
/// The customer (tenant) a request is charged to. Honoured only from trusted peers.
pub const CUSTOMER: HeaderName = HeaderName::from_static(name::CUSTOMER);
/// Response marker: `1` means "retrying this request elsewhere cannot help; do not retry".
pub const DONT_RETRY: HeaderName = HeaderName::from_static(name::DONT_RETRY);
/// gRPC retry pushback in ms (gRFC A6): `>= 0` retry after that long, negative = don't retry.
pub const GRPC_RETRY_PUSHBACK_MS: HeaderName =
    HeaderName::from_static(name::GRPC_RETRY_PUSHBACK_MS);
/// `Retry-After` (RFC 9110 §10.2.3); Spillway writes delay-seconds only.
pub const RETRY_AFTER: HeaderName = http::header::RETRY_AFTER;
/// ORCA per-response load report (native HTTP `TEXT` form).
pub const ENDPOINT_LOAD_METRICS: HeaderName = HeaderName::from_static(name::ENDPOINT_LOAD_METRICS);
/// ORCA per-response load report as gRPC's ORCA libraries send it: base64 of the serialised
/// `xds.data.orca.v3.OrcaLoadReport` (usually a trailer).
pub const ENDPOINT_LOAD_METRICS_BIN: HeaderName =
    HeaderName::from_static(name::ENDPOINT_LOAD_METRICS_BIN);
/// Response: cost charged for this request, in cost units (CPU-seconds when measured).
pub const COST: HeaderName = HeaderName::from_static(name::COST);
/// Response: milliseconds this request waited in the admission queue.
pub const QUEUE_MS: HeaderName = HeaderName::from_static(name::QUEUE_MS);
/// Response: milliseconds from admission until the response headers were ready.
pub const SERVICE_MS: HeaderName = HeaderName::from_static(name::SERVICE_MS);
/// gRPC status code (trailers or trailers-only headers).
pub const GRPC_STATUS: HeaderName = HeaderName::from_static(name::GRPC_STATUS);
/// gRPC status message (percent-encoded per the gRPC over HTTP/2 spec).
pub const GRPC_MESSAGE: HeaderName = HeaderName::from_static(name::GRPC_MESSAGE);

/// gRPC `RESOURCE_EXHAUSTED`: the customer is over its quota.
pub const GRPC_RESOURCE_EXHAUSTED: u16 = 8;
/// gRPC `UNAVAILABLE`: the server is overloaded (or down).
pub const GRPC_UNAVAILABLE: u16 = 14;

/// Metric names and label keys (emitted through the `metrics` facade; see `crate::metrics`).
pub mod metric {
    /// Counter: requests admitted by the server layer.
    pub const ADMITTED: &str = "spillway_requests_admitted_total";
    /// Counter: requests refused by the server layer (label `reason`).
    pub const SHED: &str = "spillway_requests_shed_total";
    /// Counter: client calls refused locally by the adaptive throttle.
    pub const THROTTLED: &str = "spillway_requests_throttled_total";
    /// Counter: client retries sent.
    pub const RETRIED: &str = "spillway_requests_retried_total";
    /// Gauge: requests holding a permit.
    pub const IN_FLIGHT: &str = "spillway_in_flight_requests";
    /// Gauge: current concurrency limit.
    pub const LIMIT: &str = "spillway_concurrency_limit_requests";
    /// Gauge: utilisation reported by the load signal (1.0 = at capacity).
    pub const UTILISATION: &str = "spillway_utilisation_ratio";
    /// Gauge: client throttle's current local-refusal probability.
    pub const THROTTLE_PROBABILITY: &str = "spillway_throttle_probability_ratio";
    /// Histogram (seconds): admission to end of response body, admitted requests only.
    pub const LATENCY: &str = "spillway_request_duration_seconds";
    /// Histogram (seconds): time spent queued before admission, admitted requests only.
    pub const QUEUE_TIME: &str = "spillway_queue_time_seconds";
    /// Label: customer.
    pub const L_CUSTOMER: &str = "customer";
    /// Label: operation (route or gRPC method).
    pub const L_OPERATION: &str = "operation";
    /// Label: criticality (canonical spelling).
    pub const L_CRITICALITY: &str = "criticality";
    /// Label: refusal / give-up reason (`RefusalReason::as_str`, `RetryGate`).
    pub const L_REASON: &str = "reason";
    /// Label: client destination.
    pub const L_DESTINATION: &str = "destination";
    /// Counter: requests recorded under a coarser label set because their family held its
    /// most series (`crate::metrics::series`; label `family`: the family's name).
    pub const LABEL_OVERFLOW: &str = "spillway_label_overflow_total";
    /// Label: metric family ([`LABEL_OVERFLOW`]).
    pub const L_FAMILY: &str = "family";
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// A header value outside what Spillway accepts; the message names the header and the accepted
/// form, so it can be returned verbatim in a 400 body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {header} header {value:?}: expected {accepts}")]
pub struct HeaderError {
    /// The header's name.
    pub header: &'static str,
    /// The rejected value, lossily decoded and truncated to 64 bytes (hostile input stays small).
    pub value: String,
    /// What the header accepts.
    pub accepts: &'static str,
}

impl HeaderError {
    fn new(header: &'static str, raw: &[u8], accepts: &'static str) -> Self {
        let raw = &raw[..raw.len().min(64)];
        HeaderError {
            header,
            value: String::from_utf8_lossy(raw).into_owned(),
            accepts,
        }
    }
}

/// Accepted-forms texts, shared by parsers and documentation.
pub mod accepts {
    /// For [`super::CRITICALITY`].
    pub const CRITICALITY: &str = "one of CRITICAL_PLUS, CRITICAL, SHEDDABLE_PLUS, SHEDDABLE \
                                   (lower-case and kebab-case accepted)";
    /// For [`super::GRPC_TIMEOUT`].
    pub const GRPC_TIMEOUT: &str =
        "1 to 8 ASCII digits followed by one unit of H, M, S, m, u, n (e.g. 250m)";
    /// For [`super::DEADLINE_MS`].
    pub const DEADLINE_MS: &str = "a non-negative integer number of milliseconds";
    /// For [`super::ATTEMPT`].
    pub const ATTEMPT: &str = "an integer attempt number >= 1 (1 = first attempt)";
    /// For [`super::GRPC_PREVIOUS_RPC_ATTEMPTS`].
    pub const PREVIOUS_ATTEMPTS: &str = "a non-negative integer count of previous attempts";
    /// For [`super::CUSTOMER`].
    pub const CUSTOMER: &str = "1 to 128 visible ASCII characters without spaces or commas";
    /// For [`super::RETRY_AFTER`].
    pub const RETRY_AFTER: &str = "a non-negative integer number of seconds (HTTP-date is not \
                                   supported)";
    /// For [`super::ENDPOINT_LOAD_METRICS`].
    pub const ORCA: &str = "TEXT followed by comma-separated name=number pairs";
    /// For [`super::ENDPOINT_LOAD_METRICS_BIN`].
    pub const ORCA_BIN: &str = "base64 (padded or not) of a serialised \
                                xds.data.orca.v3.OrcaLoadReport, at most 8192 characters";
}

// ---------------------------------------------------------------------------------------------
// Parsers and formatters
// ---------------------------------------------------------------------------------------------

/// Parses a criticality header value. Allocation-free on success.
pub fn parse_criticality(v: &HeaderValue) -> Result<Criticality, HeaderError> {
    let bad = || HeaderError::new(name::CRITICALITY, v.as_bytes(), accepts::CRITICALITY);
    v.to_str().map_err(|_| bad())?.parse().map_err(|_| bad())
}

/// The header value for a criticality (static, no allocation).
pub fn format_criticality(c: Criticality) -> HeaderValue {
    HeaderValue::from_static(c.as_str())
}

/// Parses ASCII decimal digits (at most `max_digits`) into a u64 without allocating.
fn parse_digits(b: &[u8], max_digits: usize) -> Option<u64> {
    if b.is_empty() || b.len() > max_digits {
        return None;
    }
    let mut n: u64 = 0;
    for &d in b {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(n)
}

/// Parses `grpc-timeout` (gRPC over HTTP/2: `TimeoutValue` = 1–8 ASCII digits, `TimeoutUnit` =
/// `H` hours, `M` minutes, `S` seconds, `m` ms, `u` µs, `n` ns).
pub fn parse_grpc_timeout(v: &HeaderValue) -> Result<Duration, HeaderError> {
    let b = v.as_bytes();
    let bad = || HeaderError::new(name::GRPC_TIMEOUT, b, accepts::GRPC_TIMEOUT);
    let (&unit, digits) = b.split_last().ok_or_else(bad)?;
    let n = parse_digits(digits, 8).ok_or_else(bad)?;
    // 8 digits of hours is ~11,400 years: every product below fits in u64 seconds.
    Ok(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return Err(bad()),
    })
}

/// Formats a timeout as `grpc-timeout`: the finest unit whose value fits in 8 digits, rounded
/// up (as grpc-go does) so a small positive remainder never reads as zero. Error ≤ one unit,
/// which is < 1e-5 relative (a coarser unit is only used once the value passes 10^5 of it).
/// Durations beyond 99,999,999 hours are clamped to that.
pub fn format_grpc_timeout(d: Duration) -> HeaderValue {
    const MAX: u128 = 99_999_999;
    let nanos = d.as_nanos();
    let units: [(u128, u8); 6] = [
        (1, b'n'),
        (1_000, b'u'),
        (1_000_000, b'm'),
        (1_000_000_000, b'S'),
        (60_000_000_000, b'M'),
        (3_600_000_000_000, b'H'),
    ];
    for (per, unit) in units {
        let v = nanos.div_ceil(per);
        if v <= MAX {
            // v <= MAX fits in u64.
            return decimal_value(v as u64, Some(unit));
        }
    }
    decimal_value(MAX as u64, Some(b'H'))
}

/// `n` in ASCII decimal (then `suffix`) as a header value, formatted on the stack: one
/// allocation (the value's bytes) instead of the two of `HeaderValue::from(n)` or a `String`
/// (measured per forwarded request with heaptrack, BENCHMARKS.md).
fn decimal_value(n: u64, suffix: Option<u8>) -> HeaderValue {
    // u64::MAX has 20 digits, plus the suffix.
    let mut buf = [0u8; 21];
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(n).as_bytes();
    buf[..digits.len()].copy_from_slice(digits);
    let mut len = digits.len();
    if let Some(s) = suffix {
        buf[len] = s;
        len += 1;
    }
    // Digits and an ASCII letter are always a valid header value.
    HeaderValue::from_bytes(&buf[..len]).unwrap_or_else(|_| HeaderValue::from_static("0"))
}

/// Parses `x-spillway-deadline-ms` (remaining milliseconds, up to 19 digits).
pub fn parse_deadline_ms(v: &HeaderValue) -> Result<Duration, HeaderError> {
    parse_digits(v.as_bytes(), 19)
        .map(Duration::from_millis)
        .ok_or_else(|| HeaderError::new(name::DEADLINE_MS, v.as_bytes(), accepts::DEADLINE_MS))
}

/// Formats remaining time as `x-spillway-deadline-ms`, rounded up to whole milliseconds so a
/// sub-millisecond remainder is not mistaken for an expired deadline.
pub fn format_deadline_ms(d: Duration) -> HeaderValue {
    let ms = u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
    decimal_value(ms, None)
}

/// Parses `x-spillway-attempt` (1-based attempt number).
pub fn parse_attempt(v: &HeaderValue) -> Result<u32, HeaderError> {
    parse_digits(v.as_bytes(), 10)
        .and_then(|n| u32::try_from(n).ok())
        .filter(|&n| n >= 1)
        .ok_or_else(|| HeaderError::new(name::ATTEMPT, v.as_bytes(), accepts::ATTEMPT))
}

/// Parses `grpc-previous-rpc-attempts` and converts it to the 1-based attempt number
/// (`previous + 1`, saturating).
pub fn parse_previous_attempts(v: &HeaderValue) -> Result<u32, HeaderError> {
    parse_digits(v.as_bytes(), 10)
        .and_then(|n| u32::try_from(n).ok())
        .map(|n| n.saturating_add(1))
        .ok_or_else(|| {
            HeaderError::new(
                name::GRPC_PREVIOUS_RPC_ATTEMPTS,
                v.as_bytes(),
                accepts::PREVIOUS_ATTEMPTS,
            )
        })
}

/// Writes the attempt number in the protocol's form: `x-spillway-attempt: n` for HTTP,
/// `grpc-previous-rpc-attempts: n-1` for gRPC (omitted on the first attempt, as gRFC A6 says).
pub fn set_attempt(headers: &mut HeaderMap, attempt: u32, protocol: Protocol) {
    match protocol {
        Protocol::Http => {
            headers.insert(ATTEMPT, decimal_value(u64::from(attempt.max(1)), None));
        }
        Protocol::Grpc => {
            if attempt <= 1 {
                headers.remove(GRPC_PREVIOUS_RPC_ATTEMPTS);
            } else {
                headers.insert(
                    GRPC_PREVIOUS_RPC_ATTEMPTS,
                    decimal_value(u64::from(attempt - 1), None),
                );
            }
        }
    }
}

/// Most headers maps a proxy reads have at most this many values (wrk's request: one; the
/// backend's responses: six); up to here [`find`] compares names instead of hashing.
const SCAN_MAX: usize = 12;

/// `headers.get(name)`, by a scan of the names when the map is small.
///
/// Why: `HeaderMap::get` hashes the name (`hash_elem_using`) and probes, even to learn that a
/// one-header request has no `x-spillway-attempt`, and the proxy asks about a dozen such
/// questions per request, while comparing a name with each of a few is a length check and at
/// most a short `memcmp`. The first value found is `get`'s (a map iterates each name's values in
/// order, first value first).
#[inline]
pub fn find<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a HeaderValue> {
    if headers.len() <= SCAN_MAX {
        headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v)
    } else {
        headers.get(name)
    }
}

/// The value of `name` when `headers` has exactly one such field (`None` for none or
/// several), by a scan of the names when the map is small (as [`find`]).
pub fn find_only<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a HeaderValue> {
    if headers.len() <= SCAN_MAX {
        let mut found = None;
        for (k, v) in headers.iter() {
            if k == name {
                if found.is_some() {
                    return None;
                }
                found = Some(v);
            }
        }
        found
    } else {
        let mut all = headers.get_all(name).iter();
        let first = all.next()?;
        all.next().is_none().then_some(first)
    }
}

/// `headers.get_all(name)`, by a scan of the names when the map is small (as [`find`]).
pub fn find_each<'a>(
    headers: &'a HeaderMap,
    name: &'a HeaderName,
) -> impl Iterator<Item = &'a HeaderValue> + 'a {
    let small = headers.len() <= SCAN_MAX;
    let scan = small.then(|| {
        headers
            .iter()
            .filter(move |(k, _)| *k == name)
            .map(|(_, v)| v)
    });
    let hashed = (!small).then(|| headers.get_all(name).iter());
    scan.into_iter()
        .flatten()
        .chain(hashed.into_iter().flatten())
}

/// The first value of each of the request fields a classifier reads, found in one pass over
/// the map.
///
/// Why one pass: a classifier asks for six names, and six scans (or six hashed lookups) of a
/// request's fields cost six times the walk; one walk that sorts each field by its name's
/// length first costs one (bench/results/proxy-forwarding.md "Fourteenth round").
#[derive(Debug, Default, Clone, Copy)]
pub struct RequestFields<'a> {
    /// [`CRITICALITY`].
    pub criticality: Option<&'a HeaderValue>,
    /// [`CUSTOMER`].
    pub customer: Option<&'a HeaderValue>,
    /// [`DEADLINE_MS`].
    pub deadline_ms: Option<&'a HeaderValue>,
    /// [`GRPC_TIMEOUT`].
    pub grpc_timeout: Option<&'a HeaderValue>,
    /// [`ATTEMPT`].
    pub attempt: Option<&'a HeaderValue>,
    /// [`GRPC_PREVIOUS_RPC_ATTEMPTS`].
    pub grpc_previous_attempts: Option<&'a HeaderValue>,
}

impl<'a> RequestFields<'a> {
    /// Reads `headers` once.
    pub fn read(headers: &'a HeaderMap) -> Self {
        let mut f = RequestFields::default();
        for (k, v) in headers {
            let slot = match k.as_str() {
                name::CRITICALITY => &mut f.criticality,
                name::CUSTOMER => &mut f.customer,
                name::DEADLINE_MS => &mut f.deadline_ms,
                name::GRPC_TIMEOUT => &mut f.grpc_timeout,
                name::ATTEMPT => &mut f.attempt,
                name::GRPC_PREVIOUS_RPC_ATTEMPTS => &mut f.grpc_previous_attempts,
                _ => continue,
            };
            // The first value wins, as `HeaderMap::get` has it.
            slot.get_or_insert(v);
        }
        f
    }

    /// The attempt number from either field — the larger when both are present (a hop that
    /// rewrote one dialect cannot reset the count; a gRPC client's own retries show only in
    /// `grpc-previous-rpc-attempts`); `Ok(1)` when absent. A malformed HTTP field is an error;
    /// a malformed gRPC one beside a valid HTTP one is ignored.
    pub fn attempt(&self) -> Result<u32, HeaderError> {
        match (self.attempt, self.grpc_previous_attempts) {
            (Some(v), None) => parse_attempt(v),
            (Some(v), Some(g)) => {
                let a = parse_attempt(v)?;
                Ok(parse_previous_attempts(g).map_or(a, |g| a.max(g)))
            }
            (None, Some(v)) => parse_previous_attempts(v),
            (None, None) => Ok(1),
        }
    }

    /// The remaining time from `grpc-timeout` (preferred: gRPC peers set it) or
    /// `x-spillway-deadline-ms`; `Ok(None)` when neither is present.
    pub fn timeout(&self) -> Result<Option<Duration>, HeaderError> {
        match (self.grpc_timeout, self.deadline_ms) {
            (Some(v), _) => parse_grpc_timeout(v).map(Some),
            (None, Some(v)) => parse_deadline_ms(v).map(Some),
            (None, None) => Ok(None),
        }
    }
}

/// Reads the attempt number from either header (the larger when both are present); `Ok(1)`
/// when absent.
pub fn read_attempt(headers: &HeaderMap) -> Result<u32, HeaderError> {
    RequestFields::read(headers).attempt()
}

/// Reads the remaining time from `grpc-timeout` (preferred: gRPC peers set it) or
/// `x-spillway-deadline-ms`; `Ok(None)` when neither is present.
pub fn read_timeout(headers: &HeaderMap) -> Result<Option<Duration>, HeaderError> {
    RequestFields::read(headers).timeout()
}

/// Validates a customer header value and returns it as `&str` (no allocation).
pub fn parse_customer(v: &HeaderValue) -> Result<&str, HeaderError> {
    let b = v.as_bytes();
    let ok =
        !b.is_empty() && b.len() <= 128 && b.iter().all(|&c| c.is_ascii_graphic() && c != b',');
    match (ok, v.to_str()) {
        (true, Ok(s)) => Ok(s),
        _ => Err(HeaderError::new(name::CUSTOMER, b, accepts::CUSTOMER)),
    }
}

/// Formats `Retry-After` as delay-seconds, rounded up and at least 1 (a `0` invites an
/// immediate retry storm, the opposite of what an overloaded server wants).
pub fn format_retry_after(d: Duration) -> HeaderValue {
    // The delays refusals actually carry are a few seconds: those are static values, so a
    // refusal's `Retry-After` costs no allocation (refusals are the bulk of the work under
    // overload; the reference's "make rejection cheap"). Longer ones are formatted.
    const SMALL: [&str; 10] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
    let secs = d.as_nanos().div_ceil(1_000_000_000).max(1);
    match usize::try_from(secs) {
        Ok(s) if s < SMALL.len() => HeaderValue::from_static(SMALL[s]),
        _ => decimal_value(u64::try_from(secs).unwrap_or(u64::MAX), None),
    }
}

/// Parses `Retry-After` delay-seconds (HTTP-date form is refused with a clear error).
pub fn parse_retry_after(v: &HeaderValue) -> Result<Duration, HeaderError> {
    parse_digits(v.as_bytes(), 19)
        .map(Duration::from_secs)
        .ok_or_else(|| HeaderError::new(name::RETRY_AFTER, v.as_bytes(), accepts::RETRY_AFTER))
}

/// What a `grpc-retry-pushback-ms` value asks of the client (gRFC A6 "Pushback").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushback {
    /// Retry no sooner than this.
    RetryAfter(Duration),
    /// Do not retry (negative or unparseable value).
    DontRetry,
}

/// Interprets a `grpc-retry-pushback-ms` value. Never fails: per gRFC A6 anything that is not a
/// non-negative signed 32-bit integer means "don't retry".
pub fn parse_pushback(v: &HeaderValue) -> Pushback {
    match v.to_str().ok().and_then(|s| s.parse::<i32>().ok()) {
        Some(ms) if ms >= 0 => Pushback::RetryAfter(Duration::from_millis(ms as u64)),
        _ => Pushback::DontRetry,
    }
}

/// Formats `grpc-retry-pushback-ms`: `-1` for "don't retry", else the delay in ms (rounded up,
/// clamped to `i32::MAX` as the field is a signed 32-bit integer).
pub fn format_pushback(p: Pushback) -> HeaderValue {
    match p {
        Pushback::DontRetry => HeaderValue::from_static("-1"),
        Pushback::RetryAfter(d) => {
            let ms = d.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128);
            HeaderValue::from(ms as u32)
        }
    }
}

/// True when a response carries either don't-retry marker (`x-spillway-dont-retry: 1`, or a
/// negative/unparseable `grpc-retry-pushback-ms`).
pub fn is_dont_retry(headers: &HeaderMap) -> bool {
    find(headers, &DONT_RETRY).is_some_and(|v| v.as_bytes() == b"1")
        || find(headers, &GRPC_RETRY_PUSHBACK_MS)
            .is_some_and(|v| parse_pushback(v) == Pushback::DontRetry)
}

/// The wire dialect of a request or response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Plain HTTP: status codes, `Retry-After`, `x-spillway-*` headers.
    Http,
    /// gRPC: `grpc-status` in (trailers-only) headers, `grpc-timeout`, pushback metadata.
    Grpc,
}

impl Protocol {
    /// gRPC when `content-type` starts with `application/grpc` (covers `+proto`, `+json`, …).
    pub fn of(headers: &HeaderMap) -> Protocol {
        match find(headers, &http::header::CONTENT_TYPE) {
            Some(ct) if ct.as_bytes().starts_with(b"application/grpc") => Protocol::Grpc,
            _ => Protocol::Http,
        }
    }
}

/// The gRPC status in a header map (trailers-only responses carry it in the headers), if any
/// and well-formed.
pub fn grpc_status(headers: &HeaderMap) -> Option<u16> {
    find(headers, &GRPC_STATUS)
        .and_then(|v| parse_digits(v.as_bytes(), 2))
        .and_then(|n| u16::try_from(n).ok())
}

/// Formats a duration as fractional milliseconds (3 decimals) for [`QUEUE_MS`]/[`SERVICE_MS`].
pub fn format_millis(d: Duration) -> HeaderValue {
    let s = format!("{:.3}", d.as_secs_f64() * 1e3);
    HeaderValue::from_str(&s).unwrap_or_else(|_| HeaderValue::from_static("0"))
}

/// Formats a cost for [`COST`] (6 significant decimals; non-finite becomes 0).
pub fn format_cost(cost: f64) -> HeaderValue {
    let c = if cost.is_finite() { cost } else { 0.0 };
    HeaderValue::from_str(&format!("{c:.6}")).unwrap_or_else(|_| HeaderValue::from_static("0"))
}

/// Reads a [`COST`] value: a finite, non-negative number (spaces and tabs around it allowed);
/// `None` for anything else.
///
/// Why not `str::parse`: a proxy reads this from every upstream response, and core's general
/// float parser handles every notation where the plain-decimal fast path the ORCA reader uses
/// takes a few steps per digit, with the same answer.
pub fn parse_cost(v: &HeaderValue) -> Option<f64> {
    orca::parse_f64(v.as_bytes().trim_ascii()).filter(|c| c.is_finite() && *c >= 0.0)
}

// ---------------------------------------------------------------------------------------------
// "Gave up on overload" — from the client layers to this service's own server edge
// ---------------------------------------------------------------------------------------------

/// A downstream call was abandoned because the downstream is overloaded and retrying could not
/// help (attempt limit, retry budget, don't-retry marker, widespread overload, or the local
/// throttle). The client retry layer returns it as its error; a handler that propagates it
/// (as an error of its service, or as a response built by [`OverloadGiveUp::to_response`]) is
/// answered by the server layer with 503 / `UNAVAILABLE` *and* the don't-retry marker, so the
/// caller above does not retry again — what keeps 3 layers × 3 attempts from becoming 27×
/// (SRE book ch. 21, "Deciding to Retry").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("gave up on an overloaded downstream after {attempts} attempt(s): {reason}")]
pub struct OverloadGiveUp {
    /// Attempts made (including ones the request carried in).
    pub attempts: u32,
    /// Why no further attempt was made, e.g. `budget`, `attempt_limit`, `dont_retry`, `throttled`.
    pub reason: &'static str,
}

impl OverloadGiveUp {
    /// A response that the server layer recognises (via the extension) and completes with
    /// status, `Retry-After`/pushback and the don't-retry marker for the request's protocol.
    /// Usable from any handler whose body type has a `Default` (empty) value.
    pub fn to_response<B: Default>(&self) -> http::Response<B> {
        let mut res = http::Response::new(B::default());
        *res.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
        res.headers_mut()
            .insert(DONT_RETRY, HeaderValue::from_static("1"));
        res.extensions_mut().insert(self.clone());
        res
    }

    /// The metadata that says "don't retry" in both dialects, for handlers (e.g. tonic) that
    /// build their own error status: `x-spillway-dont-retry: 1`, `grpc-retry-pushback-ms: -1`.
    pub fn marker_headers() -> [(HeaderName, HeaderValue); 2] {
        [
            (DONT_RETRY, HeaderValue::from_static("1")),
            (GRPC_RETRY_PUSHBACK_MS, HeaderValue::from_static("-1")),
        ]
    }
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
