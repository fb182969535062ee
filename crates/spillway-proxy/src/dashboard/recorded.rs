//! The handful of metric families the dashboard charts that only the process's recorder holds:
//! refusals by customer, operation and reason, and the queue-time / processing-time histograms
//! of admitted requests.
//!
//! Why read here: the admission controller's own counters (`/status`) have no customer or
//! operation, and no latency distribution. These live in the `metrics` recorder the admin
//! listener installed; this module reads them from its stores — the refusal counters kept
//! beside the exporter ([`Counted`](crate::metrics::counted::Counted)) and the `*_seconds`
//! bucket histograms ([`Histograms`](crate::metrics::histograms::Histograms)) — once a second,
//! summed over the labels the dashboard ignores. Nothing is parsed back from `/metrics`, so the
//! dashboard's figures are exactly the numbers `/metrics` renders.

use std::collections::BTreeMap;

use metrics::Key;
use spillway_core::Criticality;
use spillway_tower::wire::metric as m;

use crate::metrics::histograms::Snapshot;
use crate::metrics::recorder::MetricsHandle;

/// Cumulative counts read at one moment, aggregated over the labels the dashboard ignores.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recorded {
    /// `spillway_requests_shed_total` by `reason`.
    pub shed_by_reason: BTreeMap<String, f64>,
    /// ... by `customer`.
    pub shed_by_customer: BTreeMap<String, f64>,
    /// ... by `operation`.
    pub shed_by_operation: BTreeMap<String, f64>,
    /// ... by criticality, lowest first ([`Criticality::index`]).
    pub shed_by_criticality: [f64; Criticality::COUNT],
    /// `spillway_requests_throttled_total` (client side, refused locally), by `customer`.
    pub throttled_by_customer: BTreeMap<String, f64>,
    /// ... by `operation`.
    pub throttled_by_operation: BTreeMap<String, f64>,
    /// ... by criticality.
    pub throttled_by_criticality: [f64; Criticality::COUNT],
    /// Time queued before admission, admitted requests only.
    pub queue_time: Histogram,
    /// Admission to the end of the response body, admitted requests only.
    pub latency: Histogram,
}

/// A cumulative histogram summed over every label set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// `(upper bound in seconds, cumulative count)`, ascending; `+Inf` is the last bound.
    pub buckets: Vec<(f64, f64)>,
    /// Sum of observations, seconds.
    pub sum: f64,
    /// Number of observations.
    pub count: f64,
}

impl Histogram {
    /// The histogram of `snapshot` (none recorded yet: empty).
    pub(super) fn of(snapshot: Option<Snapshot>) -> Self {
        let Some(s) = snapshot else {
            return Histogram::default();
        };
        let mut buckets: Vec<(f64, f64)> =
            s.cumulative.iter().map(|&(b, n)| (b, n as f64)).collect();
        buckets.push((f64::INFINITY, s.count as f64));
        Histogram {
            buckets,
            sum: s.sum,
            count: s.count as f64,
        }
    }

    /// The observations between `earlier` and `self`: `(mean seconds, p99 seconds, count)`, or
    /// `None` when nothing was observed in between. The p99 is the upper bound of the bucket
    /// holding the 99th percentile (histograms keep no more; the last finite bound stands in
    /// for `+Inf`), capped by nothing else: it is an upper estimate, as Prometheus'
    /// `histogram_quantile` is when the buckets are coarse.
    pub fn delta_summary(&self, earlier: &Histogram) -> Option<(f64, f64, f64)> {
        let count = self.count - earlier.count;
        if count < 1.0 || !count.is_finite() {
            return None;
        }
        let sum = (self.sum - earlier.sum).max(0.0);
        let target = count * 0.99;
        let mut p99 = 0.0;
        let mut last_finite = 0.0;
        for &(le, c) in &self.buckets {
            let before = earlier
                .buckets
                .iter()
                .find(|(b, _)| *b == le)
                .map_or(0.0, |(_, c)| *c);
            if le.is_finite() {
                last_finite = le;
            }
            if c - before >= target {
                p99 = if le.is_finite() { le } else { last_finite };
                break;
            }
        }
        Some((sum / count, p99, count))
    }
}

/// Reads the charted families from the recorder behind `handle`, now.
pub fn read(handle: &MetricsHandle) -> Recorded {
    let mut r = Recorded::default();
    for (key, value) in handle.counted().values() {
        r.add_counter(&key, value);
    }
    r.queue_time = Histogram::of(handle.histograms().summed(m::QUEUE_TIME));
    r.latency = Histogram::of(handle.histograms().summed(m::LATENCY));
    r
}

impl Recorded {
    /// Adds one refusal counter's value to the aggregates it belongs to (other names are
    /// ignored).
    pub(super) fn add_counter(&mut self, key: &Key, value: u64) {
        let value = value as f64;
        let label = |k: &str| key.labels().find(|l| l.key() == k).map(|l| l.value());
        let crit_index = label(m::L_CRITICALITY)
            .and_then(|c| c.parse::<Criticality>().ok())
            .map(Criticality::index);
        let (by_customer, by_operation, by_criticality) = match key.name() {
            n if n == m::SHED => {
                let reason = label(m::L_REASON).unwrap_or("unknown");
                *self.shed_by_reason.entry(reason.to_string()).or_default() += value;
                (
                    &mut self.shed_by_customer,
                    &mut self.shed_by_operation,
                    &mut self.shed_by_criticality,
                )
            }
            n if n == m::THROTTLED => (
                &mut self.throttled_by_customer,
                &mut self.throttled_by_operation,
                &mut self.throttled_by_criticality,
            ),
            _ => return,
        };
        if let Some(c) = label(m::L_CUSTOMER) {
            *by_customer.entry(c.to_string()).or_default() += value;
        }
        if let Some(o) = label(m::L_OPERATION) {
            *by_operation.entry(o.to_string()).or_default() += value;
        }
        if let Some(slot) = crit_index.and_then(|i| by_criticality.get_mut(i)) {
            *slot += value;
        }
    }
}

#[cfg(test)]
mod tests;
