//! Metrics through the `metrics` facade: the library records, the application picks the
//! exporter (Prometheus, StatsD, …) — or none, in which case every call is a cheap no-op.
//!
//! Why these: the SRE book (ch. 21) asks for visibility of every refusal by reason and
//! criticality, and for per-customer accounting; the AWS article ("Using load shedding to avoid
//! overload") warns that fast rejections make latency look good, so latency and queue-time
//! histograms record *admitted* requests only.
//!
//! Allocation: the per-request metrics (admitted, queue time, latency, shed by reason) go
//! through handles registered once per label set *per thread* and kept in a thread-local table
//! (see the `handles` module): after a label set's first request, recording is a hash lookup of the
//! customer and operation strings and an atomic update — no label `Vec`, no `Key` built, no
//! registry lookup (the facade builds both on every `counter!(name, labels)` call, which cost
//! one allocation and a registry probe per call). The client side's throttled and retried
//! counters are cached per thread alike (`client`); gauges use the facade directly. Label values are `&'static str` (criticality, reason) or
//! `SharedString`s built from `Arc<str>` (customer, operation, destination) — a reference-count
//! bump, never a string copy. Names are in [`crate::wire::metric`].
//!
//! Cardinality: customer and operation labels come from configuration (API-key map, route
//! prefixes) by default; if customers come from a trusted header or peer IPs (operations from
//! the path), their number is whatever callers send, so the server layer caps both
//! ([`labels`]: the first 100 of each keep series of their own, the rest count as `other`).

use std::sync::Arc;
use std::time::Duration;

use metrics::{Label, SharedString};

mod client;
mod handles;
pub mod labels;
pub mod series;
use spillway_core::Criticality;

use crate::wire::metric as m;

/// The labels of one request (cheap to clone: two `Arc`s and a `Copy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestLabels {
    /// The customer charged.
    pub customer: Arc<str>,
    /// The operation (route or gRPC method).
    pub operation: SharedString,
    /// The request's criticality.
    pub criticality: Criticality,
}

impl RequestLabels {
    fn labels(&self) -> [Label; 3] {
        [
            Label::new(
                m::L_CUSTOMER,
                SharedString::from(Arc::clone(&self.customer)),
            ),
            Label::new(m::L_OPERATION, self.operation.clone()),
            Label::new(m::L_CRITICALITY, self.criticality.as_str()),
        ]
    }

    /// The histograms' labels: the operation and criticality, not the customer.
    fn histogram_labels(&self) -> [Label; 2] {
        let [_, b, c] = self.labels();
        [b, c]
    }

    fn labels_with_reason(&self, reason: &'static str) -> [Label; 4] {
        let [a, b, c] = self.labels();
        [a, b, c, Label::new(m::L_REASON, reason)]
    }
}

/// A request was admitted (immediately or after queueing for `queue_time`).
pub fn admitted(l: &RequestLabels, queue_time: Duration) {
    let h = handles::of(l);
    h.admitted.increment(1);
    h.queue_time.record(queue_time.as_secs_f64());
    if let Some(o) = &h.overflow {
        o.admitted();
    }
}

/// A request was refused by the server layer for `reason` (`RefusalReason::as_str`).
pub fn shed(l: &RequestLabels, reason: &'static str) {
    handles::of(l).count_shed(l, reason);
}

/// An admitted request finished (its body ended or failed) after `latency` since admission.
pub fn latency(l: &RequestLabels, latency: Duration) {
    let h = handles::of(l);
    h.latency.record(latency.as_secs_f64());
    if let Some(o) = &h.overflow {
        o.latency();
    }
}

/// The controller's current state.
pub fn gauges(in_flight: usize, limit: usize, utilisation: f64) {
    metrics::gauge!(m::IN_FLIGHT).set(in_flight as f64);
    metrics::gauge!(m::LIMIT).set(limit as f64);
    metrics::gauge!(m::UTILISATION).set(utilisation);
}

/// A client call to `destination` was refused locally by the adaptive throttle.
pub fn throttled(l: &RequestLabels, destination: SharedString) {
    client::count(m::THROTTLED, l, None, destination);
}

/// A client retry to `destination` was sent; `reason` is what failed (e.g. `overloaded`).
pub fn retried(l: &RequestLabels, destination: SharedString, reason: &'static str) {
    client::count(m::RETRIED, l, Some(reason), destination);
}

/// The adaptive throttle's current refusal probability for `destination`.
pub fn throttle_probability(destination: SharedString, p: f64) {
    metrics::gauge!(
        m::THROTTLE_PROBABILITY,
        vec![Label::new(m::L_DESTINATION, destination)]
    )
    .set(p);
}

/// Registers the HELP text (and the unit of the `*_seconds` histograms) of every metric this
/// crate records, with whatever recorder is installed: call it once after installing one.
/// Without it a Prometheus exporter writes the families with no HELP line, which
/// `promtool check metrics` reports. `spillway proxy` calls it for its own recorder.
pub fn describe() {
    metrics::describe_counter!(m::ADMITTED, "Requests admitted by the server layer.");
    metrics::describe_counter!(m::SHED, "Requests refused, by reason.");
    metrics::describe_counter!(
        m::THROTTLED,
        "Client calls refused locally by the adaptive throttle."
    );
    metrics::describe_counter!(m::RETRIED, "Client retries sent.");
    metrics::describe_counter!(
        m::LABEL_OVERFLOW,
        "Requests recorded under a coarser label set (customer, then operation, as other) \
         because their family held its most series, by family."
    );
    for family in handles::CAPPED_FAMILIES {
        metrics::counter!(m::LABEL_OVERFLOW, m::L_FAMILY => family).absolute(0);
    }
    metrics::describe_gauge!(m::IN_FLIGHT, "Requests holding an admission permit.");
    metrics::describe_gauge!(m::LIMIT, "Current concurrency limit.");
    metrics::describe_gauge!(
        m::UTILISATION,
        "Utilisation from the load signal (1.0 = at capacity)."
    );
    metrics::describe_gauge!(
        m::THROTTLE_PROBABILITY,
        "Client throttle's local refusal probability."
    );
    metrics::describe_histogram!(
        m::LATENCY,
        metrics::Unit::Seconds,
        "Admission to end of response body, admitted requests only."
    );
    metrics::describe_histogram!(
        m::QUEUE_TIME,
        metrics::Unit::Seconds,
        "Time queued before admission, admitted requests only."
    );
}
