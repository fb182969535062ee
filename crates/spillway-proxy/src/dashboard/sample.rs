//! One second of the dashboard: rates and gauges computed from two cumulative readings.
//!
//! Why the split between [`Reading`] (cumulative counters and gauges, read from the proxy) and
//! [`Sample`] (per-second rates, charted): the proxy keeps counters, and a rate is only
//! meaningful as the difference of two of them over the time between. Keeping that arithmetic
//! here, on plain data, lets it be tested without a running proxy; [`super::source`] fills a
//! [`Reading`] from the live `ProxyState`.

use std::collections::BTreeMap;

use serde::Serialize;
use spillway_core::Criticality;

use super::recorded::Recorded;

/// At most this many customers (and operations) are listed per sample, the largest first; the
/// rest are summed under [`OTHER`]. Bounds the payload whatever the label cardinality.
pub const TOP_N: usize = 8;
/// The key under which the smaller customers/operations are summed: the same `other` the
/// metrics count customers and operations past `admin.max_*_labels` under, so the two merge
/// into one entry instead of showing two kinds of "other".
pub const OTHER: &str = crate::metrics::labels::OTHER;

/// Cumulative counters and current gauges, read once a second.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    /// Requests that arrived, admitted or not, per criticality (lowest first).
    pub offered: [u64; Criticality::COUNT],
    /// Requests admitted, per criticality.
    pub admitted: [u64; Criticality::COUNT],
    /// Refusals by the admission controller: `(reason, per criticality)`.
    pub refused: Vec<(&'static str, [u64; Criticality::COUNT])>,
    /// Upstream responses that were not failures or refusals (goodput), all tasks.
    pub upstream_ok: u64,
    /// Upstream failures and refusals, all tasks.
    pub upstream_failed: u64,
    /// The highest client-throttle refusal probability among the upstream tasks.
    pub throttle_probability: f64,
    /// Current concurrency limit.
    pub limit: usize,
    /// Requests holding a slot.
    pub in_flight: usize,
    /// Requests waiting in the queue.
    pub queued: usize,
    /// Current queue bound.
    pub queue_capacity: usize,
    /// The controller's utilisation (max of signals and in-flight / limit).
    pub utilisation: f64,
    /// Whether the controller counts the task as overloaded.
    pub overloaded: bool,
    /// The controller's expected service time (EWMA of admitted requests), milliseconds.
    pub service_time_ewma_ms: f64,
    /// Each load signal and its reading.
    pub signals: Vec<(String, f64)>,
    /// Degradation switched off for every route.
    pub degradation_all_off: bool,
    /// Each route's degradation state.
    pub routes: Vec<RouteReading>,
    /// The metric families only the process's metrics recorder holds (`None` when not
    /// installed).
    pub recorded: Option<Recorded>,
}

/// One route's degradation, as read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RouteReading {
    /// Route name.
    pub name: String,
    /// Whether the route has a degraded mode at all.
    pub configured: bool,
    /// Whether the switch lets it degrade.
    pub enabled: bool,
    /// Requests answered by the degraded mode so far.
    pub degraded: u64,
    /// Requests that would have been degraded but the switch was off.
    pub suppressed: u64,
}

/// Mean and 99th percentile of a latency over one second, milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Quantiles {
    /// Mean.
    pub mean: f64,
    /// 99th percentile (upper bound of its histogram bucket).
    pub p99: f64,
}

/// One route's degradation in a sample.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RouteSample {
    /// Route name.
    pub name: String,
    /// Whether the route has a degraded mode.
    pub configured: bool,
    /// Whether the switch lets it degrade.
    pub enabled: bool,
    /// Degraded answers per second.
    pub degraded: f64,
    /// Would-be degraded answers per second that the switch suppressed.
    pub suppressed: f64,
}

/// One second of the dashboard. Rates are per second; `None` latency means no admitted
/// request finished in that second (rejections never enter latency).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    /// Milliseconds since the Unix epoch.
    pub t: u64,
    /// Arrivals, admitted or not.
    pub offered: f64,
    /// Arrivals per criticality, lowest first (`SHEDDABLE` … `CRITICAL_PLUS`).
    pub offered_by_criticality: [f64; Criticality::COUNT],
    /// Admitted by the controller.
    pub admitted: f64,
    /// Upstream responses that were not failures or refusals.
    pub goodput: f64,
    /// Upstream failures and refusals.
    pub upstream_failed: f64,
    /// Every refusal (controller reasons plus any other reason the data path counts).
    pub refused: f64,
    /// Time queued before admission, admitted requests only.
    pub queue_ms: Option<Quantiles>,
    /// Admission to the end of the response, admitted requests only.
    pub processing_ms: Option<Quantiles>,
    /// The controller's expected service time (EWMA of admitted requests), milliseconds: the
    /// processing-time line when the latency histogram is not recorded.
    pub service_time_ewma_ms: f64,
    /// Refusals by reason.
    pub shed_by_reason: BTreeMap<String, f64>,
    /// Refusals by criticality, lowest first.
    pub shed_by_criticality: [f64; Criticality::COUNT],
    /// Refusals by customer, the [`TOP_N`] largest.
    pub shed_by_customer: BTreeMap<String, f64>,
    /// Refusals by operation, the [`TOP_N`] largest.
    pub shed_by_operation: BTreeMap<String, f64>,
    /// Calls the proxy's client throttle refused locally.
    pub throttled: f64,
    /// Locally throttled calls by criticality.
    pub throttled_by_criticality: [f64; Criticality::COUNT],
    /// Locally throttled calls by customer, the [`TOP_N`] largest.
    pub throttled_by_customer: BTreeMap<String, f64>,
    /// Locally throttled calls by operation, the [`TOP_N`] largest.
    pub throttled_by_operation: BTreeMap<String, f64>,
    /// The highest client-throttle refusal probability among upstream tasks.
    pub throttle_probability: f64,
    /// Concurrency limit.
    pub limit: usize,
    /// Requests holding a slot.
    pub in_flight: usize,
    /// Requests queued.
    pub queued: usize,
    /// Queue bound.
    pub queue_capacity: usize,
    /// The controller's utilisation.
    pub utilisation: f64,
    /// Whether the task counts as overloaded.
    pub overloaded: bool,
    /// Each load signal's reading.
    pub signals: BTreeMap<String, f64>,
    /// Degradation switched off for all routes.
    pub degradation_all_off: bool,
    /// Per-route degradation.
    pub routes: Vec<RouteSample>,
}

/// Turns successive readings into samples.
#[derive(Debug, Default)]
pub struct Differ {
    prev: Option<Reading>,
}

/// `now − before` for a counter, treating a decrease as a reset (a reload that rebuilt the
/// controller starts its counters at zero), so a reset never shows as a negative rate.
fn delta(now: u64, before: u64) -> f64 {
    if now >= before {
        (now - before) as f64
    } else {
        now as f64
    }
}

fn delta_f(now: f64, before: f64) -> f64 {
    if now >= before {
        now - before
    } else {
        now
    }
}

fn delta_map(
    now: &BTreeMap<String, f64>,
    before: Option<&BTreeMap<String, f64>>,
) -> BTreeMap<String, f64> {
    now.iter()
        .map(|(k, v)| {
            let b = before.and_then(|b| b.get(k)).copied().unwrap_or(0.0);
            (k.clone(), delta_f(*v, b))
        })
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

/// Keeps the [`TOP_N`] largest entries and sums the rest under [`OTHER`].
fn top_n(m: BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    if m.len() <= TOP_N {
        return m;
    }
    let mut v: Vec<(String, f64)> = m.into_iter().collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let rest: f64 = v[TOP_N..].iter().map(|(_, x)| x).sum();
    let mut out: BTreeMap<String, f64> = v.into_iter().take(TOP_N).collect();
    *out.entry(OTHER.to_string()).or_default() += rest;
    out
}

/// What the data path's own metrics add to a sample (absent on the first reading, or when
/// the recorder is not installed).
#[derive(Default)]
struct RecordedRates {
    /// Refusal reasons the controller does not count (e.g. incident controls), per second.
    extra_shed_by_reason: BTreeMap<String, f64>,
    shed_by_customer: BTreeMap<String, f64>,
    shed_by_operation: BTreeMap<String, f64>,
    queue_ms: Option<Quantiles>,
    processing_ms: Option<Quantiles>,
    throttled_by_criticality: [f64; 4],
    throttled_by_customer: BTreeMap<String, f64>,
    throttled_by_operation: BTreeMap<String, f64>,
}

impl RecordedRates {
    fn between(now: &Recorded, before: Option<&Recorded>, dt: f64) -> Self {
        let scale = |m: BTreeMap<String, f64>| m.into_iter().map(|(k, v)| (k, v / dt)).collect();
        let per_second = |f: fn(&Recorded) -> &BTreeMap<String, f64>| {
            top_n(scale(delta_map(f(now), before.map(f))))
        };
        let ms = |s: Option<(f64, f64, f64)>| {
            s.map(|(mean, p99, _)| Quantiles {
                mean: mean * 1e3,
                p99: p99 * 1e3,
            })
        };
        let empty = super::recorded::Histogram::default();
        let zero = [0.0; 4];
        let throttled_before = before.map_or(&zero, |x| &x.throttled_by_criticality);
        RecordedRates {
            extra_shed_by_reason: scale(delta_map(
                &now.shed_by_reason,
                before.map(|x| &x.shed_by_reason),
            )),
            shed_by_customer: per_second(|x| &x.shed_by_customer),
            shed_by_operation: per_second(|x| &x.shed_by_operation),
            queue_ms: ms(now
                .queue_time
                .delta_summary(before.map_or(&empty, |x| &x.queue_time))),
            processing_ms: ms(now
                .latency
                .delta_summary(before.map_or(&empty, |x| &x.latency))),
            throttled_by_criticality: std::array::from_fn(|i| {
                delta_f(now.throttled_by_criticality[i], throttled_before[i]) / dt
            }),
            throttled_by_customer: per_second(|x| &x.throttled_by_customer),
            throttled_by_operation: per_second(|x| &x.throttled_by_operation),
        }
    }
}

/// Refusals per second by reason and by criticality, from the controller's own counts.
fn refusals(
    now: &Reading,
    before: &Reading,
    rate: impl Fn(u64, u64) -> f64,
) -> (BTreeMap<String, f64>, [f64; 4]) {
    let mut by_reason = BTreeMap::new();
    let mut by_criticality = [0.0; 4];
    for (reason, counts) in &now.refused {
        let b = before
            .refused
            .iter()
            .find(|(r, _)| r == reason)
            .map_or([0; 4], |(_, c)| *c);
        let r: [f64; 4] = std::array::from_fn(|i| rate(counts[i], b[i]));
        let total: f64 = r.iter().sum();
        if total > 0.0 {
            by_reason.insert(reason.to_string(), total);
        }
        for i in 0..4 {
            by_criticality[i] += r[i];
        }
    }
    (by_reason, by_criticality)
}

fn route_samples(
    now: &Reading,
    before: &Reading,
    rate: impl Fn(u64, u64) -> f64,
) -> Vec<RouteSample> {
    now.routes
        .iter()
        .map(|r| {
            let b = before.routes.iter().find(|x| x.name == r.name);
            RouteSample {
                name: r.name.clone(),
                configured: r.configured,
                enabled: r.enabled && !now.degradation_all_off,
                degraded: rate(r.degraded, b.map_or(r.degraded, |b| b.degraded)),
                suppressed: rate(r.suppressed, b.map_or(r.suppressed, |b| b.suppressed)),
            }
        })
        .collect()
}

impl Differ {
    /// The sample for `now`, taken at `t_ms`, `dt_secs` after the previous reading. The first
    /// reading has no predecessor: its rates are 0 (it only sets the baseline).
    pub fn next(&mut self, now: Reading, t_ms: u64, dt_secs: f64) -> Sample {
        let dt = if dt_secs.is_finite() && dt_secs > 0.0 {
            dt_secs
        } else {
            1.0
        };
        let prev = self.prev.take();
        let first = prev.is_none();
        let p = prev.unwrap_or_else(|| now.clone());
        let rate = |n: u64, b: u64| if first { 0.0 } else { delta(n, b) / dt };
        let per_crit =
            |n: &[u64; 4], b: &[u64; 4]| -> [f64; 4] { std::array::from_fn(|i| rate(n[i], b[i])) };
        let offered_by_criticality = per_crit(&now.offered, &p.offered);
        let admitted = per_crit(&now.admitted, &p.admitted).iter().sum();

        // Refusals by reason: the controller's own counts, plus reasons only the data path's
        // metrics know (e.g. incident controls); the controller's reasons are not added twice.
        let (mut shed_by_reason, shed_by_criticality) = refusals(&now, &p, rate);
        let recorded = match (&now.recorded, first) {
            (Some(np), false) => RecordedRates::between(np, p.recorded.as_ref(), dt),
            _ => RecordedRates::default(),
        };
        for (reason, v) in recorded.extra_shed_by_reason {
            if !now.refused.iter().any(|(r, _)| *r == reason) {
                shed_by_reason.insert(reason, v);
            }
        }
        let refused = shed_by_reason.values().sum();
        let sample = Sample {
            t: t_ms,
            offered: offered_by_criticality.iter().sum(),
            offered_by_criticality,
            admitted,
            goodput: rate(now.upstream_ok, p.upstream_ok),
            upstream_failed: rate(now.upstream_failed, p.upstream_failed),
            refused,
            queue_ms: recorded.queue_ms,
            processing_ms: recorded.processing_ms,
            service_time_ewma_ms: now.service_time_ewma_ms,
            shed_by_reason,
            shed_by_criticality,
            shed_by_customer: recorded.shed_by_customer,
            shed_by_operation: recorded.shed_by_operation,
            throttled: recorded.throttled_by_criticality.iter().sum(),
            throttled_by_criticality: recorded.throttled_by_criticality,
            throttled_by_customer: recorded.throttled_by_customer,
            throttled_by_operation: recorded.throttled_by_operation,
            throttle_probability: now.throttle_probability,
            limit: now.limit,
            in_flight: now.in_flight,
            queued: now.queued,
            queue_capacity: now.queue_capacity,
            utilisation: now.utilisation,
            overloaded: now.overloaded,
            signals: now.signals.iter().cloned().collect(),
            degradation_all_off: now.degradation_all_off,
            routes: route_samples(&now, &p, rate),
        };
        self.prev = Some(now);
        sample
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(offered: u64, admitted: u64, shed: u64) -> Reading {
        Reading {
            offered: [offered, 0, 0, 0],
            admitted: [admitted, 0, 0, 0],
            refused: vec![("shed", [shed, 0, 0, 0])],
            upstream_ok: admitted,
            limit: 10,
            ..Reading::default()
        }
    }

    #[test]
    fn rates_are_differences_over_the_interval_and_resets_never_go_negative() {
        let mut d = Differ::default();
        let first = d.next(reading(100, 50, 50), 1_000, 1.0);
        assert_eq!(
            first.offered, 0.0,
            "the first reading only sets the baseline"
        );
        let s = d.next(reading(300, 150, 150), 3_000, 2.0);
        assert_eq!(s.offered, 100.0);
        assert_eq!(s.admitted, 50.0);
        assert_eq!(s.goodput, 50.0);
        assert_eq!(s.refused, 50.0);
        assert_eq!(s.shed_by_reason["shed"], 50.0);
        assert_eq!(s.shed_by_criticality[0], 50.0);
        // A reload rebuilt the controller: counters restart.
        let s = d.next(reading(320, 10, 5), 4_000, 1.0);
        assert_eq!(s.admitted, 10.0);
        assert_eq!(s.shed_by_reason["shed"], 5.0);
        assert!(s.offered >= 0.0);
    }

    #[test]
    fn metrics_add_customers_latency_and_only_the_reasons_the_controller_lacks() {
        use crate::dashboard::recorded::{Histogram, Recorded};
        use crate::metrics::histograms::Snapshot;
        use metrics::{Key, Label};
        use spillway_tower::wire::metric as m;
        let recorded = |shed: u64, incident: u64, q_count: u64, q_sum: f64| {
            let mut r = Recorded::default();
            let labels = [
                ("customer", "acme"),
                ("operation", "/a"),
                ("criticality", "SHEDDABLE"),
                ("reason", "shed"),
            ]
            .map(|(k, v)| Label::new(k, v));
            r.add_counter(&Key::from_parts(m::SHED, labels.to_vec()), shed);
            let incident_key =
                Key::from_parts(m::SHED, vec![Label::new("reason", "incident_shed")]);
            r.add_counter(&incident_key, incident);
            r.queue_time = Histogram::of(Some(Snapshot {
                cumulative: vec![(0.01, q_count)],
                count: q_count,
                sum: q_sum,
            }));
            r
        };
        let mut d = Differ::default();
        let mut r = reading(0, 0, 0);
        r.recorded = Some(recorded(0, 0, 0, 0.0));
        d.next(r, 0, 1.0);
        let mut r = reading(100, 40, 60);
        r.recorded = Some(recorded(60, 7, 40, 0.2));
        let s = d.next(r, 1_000, 1.0);
        // "shed" comes from the controller (60), not added again from the metric.
        assert_eq!(s.shed_by_reason["shed"], 60.0);
        assert_eq!(s.shed_by_reason["incident_shed"], 7.0);
        assert_eq!(s.refused, 67.0);
        assert_eq!(s.shed_by_customer["acme"], 60.0);
        assert_eq!(s.shed_by_operation["/a"], 60.0);
        let q = s.queue_ms.expect("admitted requests were queued");
        assert!((q.mean - 5.0).abs() < 1e-9, "{q:?}");
        assert_eq!(q.p99, 10.0);
        assert_eq!(
            s.processing_ms, None,
            "no latency recorded: no line, not a zero"
        );
    }

    #[test]
    fn customers_beyond_the_top_n_are_summed_as_other() {
        let m: BTreeMap<String, f64> = (0..20)
            .map(|i| (format!("c{i:02}"), f64::from(i)))
            .collect();
        let t = top_n(m);
        assert_eq!(t.len(), TOP_N + 1);
        assert_eq!(t["c19"], 19.0);
        assert_eq!(t[OTHER], (0..12).sum::<i32>() as f64);
    }

    #[test]
    fn the_metrics_other_and_the_dashboards_other_are_one_entry() {
        let mut m: BTreeMap<String, f64> = (0..20)
            .map(|i| (format!("c{i:02}"), f64::from(i)))
            .collect();
        m.insert(OTHER.to_string(), 1000.0); // customers past the label cap
        let t = top_n(m);
        // other is among the largest, so it and 7 customers are listed; the rest join it.
        assert_eq!(t.len(), TOP_N);
        assert_eq!(t["c13"], 13.0);
        assert_eq!(t[OTHER], 1000.0 + (0..13).sum::<i32>() as f64);
    }
}
