//! `/metrics`: the Prometheus exposition of every Spillway metric, plus offered demand.
//!
//! Why offered demand is its own counter: the reference guide ("Shedding, autoscaling and load
//! balancing together") warns *scale before you shed* — once shedding holds utilisation down, an
//! autoscaler watching CPU never sees the demand it should add capacity for. So the data path
//! counts the estimated cost of **every arriving request, admitted or not**, in the same cost
//! units as quotas, and an autoscaler scales on `rate(spillway_offered_cost_total[1m])` against
//! the capacity of one task. Set next to `spillway_requests_admitted_total`, it is the "offered
//! load next to goodput" graph the guide asks for.
//!
//! Cost estimates are fractional (CPU-seconds when measured), while the `metrics` facade's
//! counters are integers, so offered demand is kept here in lock-free per-criticality atomics
//! (micro-units) and appended to the exporter's output as a float counter. Everything else goes
//! through the `metrics` facade into the process's [`Recorder`],
//! installed once with no HTTP listener of its own (the admin listener serves the text): the
//! `*_seconds` histograms as bucket counters of its own ([`super::histograms`] says why),
//! counters, gauges and other histograms in `metrics-exporter-prometheus`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use spillway_core::Criticality;
use spillway_tower::wire::metric as m;

use super::counted::Counted;
use super::histograms::{Histograms, Recorder};

/// Counter (float, cost units): estimated cost of every request that arrived, admitted or
/// shed; label `criticality`. Scale on this, not on utilisation.
pub const OFFERED_COST: &str = "spillway_offered_cost_total";
/// Counter: every request that arrived, admitted or shed; label `criticality`.
pub const OFFERED_REQUESTS: &str = "spillway_offered_requests_total";

/// Gauge: requests waiting in the admission queue (sampled when `/metrics` is scraped).
pub const QUEUED: &str = "spillway_queued_requests";
/// Gauge: the admission queue's current bound (sampled when `/metrics` is scraped).
pub const QUEUE_CAPACITY: &str = "spillway_queue_capacity_requests";

/// Histogram buckets (seconds) for the `*_seconds` histograms: 0.5 ms to 10 s, roughly ×2–2.5
/// apart, so queue time and processing time can be compared on one dashboard and aggregated
/// across tasks (summaries cannot be).
pub const SECONDS_BUCKETS: &[f64] = &[
    0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

const MICROS: f64 = 1_000_000.0;

/// Offered demand per criticality: lock-free counters the data path bumps on every arrival.
#[derive(Debug)]
pub struct OfferedDemand {
    cost_micros: [AtomicU64; Criticality::COUNT],
    requests: [AtomicU64; Criticality::COUNT],
}

impl OfferedDemand {
    /// All zero.
    pub const fn new() -> Self {
        OfferedDemand {
            cost_micros: [const { AtomicU64::new(0) }; Criticality::COUNT],
            requests: [const { AtomicU64::new(0) }; Criticality::COUNT],
        }
    }

    /// One request of `criticality` with estimated `cost` arrived. Negative, NaN or infinite
    /// costs count the request but add no cost. Two relaxed atomic adds; no allocation.
    #[inline]
    pub fn record(&self, criticality: Criticality, cost: f64) {
        let i = criticality.index();
        self.requests[i].fetch_add(1, Ordering::Relaxed);
        if cost.is_finite() && cost > 0.0 {
            // `as` saturates at u64::MAX for absurd estimates.
            let micros = (cost * MICROS).round() as u64;
            self.cost_micros[i].fetch_add(micros, Ordering::Relaxed);
        }
    }

    /// Cost offered so far at `criticality`, in cost units.
    pub fn cost(&self, criticality: Criticality) -> f64 {
        self.cost_micros[criticality.index()].load(Ordering::Relaxed) as f64 / MICROS
    }

    /// Requests offered so far at `criticality`.
    pub fn requests(&self, criticality: Criticality) -> u64 {
        self.requests[criticality.index()].load(Ordering::Relaxed)
    }

    /// Appends both counters in the Prometheus text format (version 0.0.4).
    pub fn render_into(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP {OFFERED_COST} Estimated cost of every arriving request, admitted or shed \
             (cost units). Scale on this, not on utilisation."
        );
        let _ = writeln!(out, "# TYPE {OFFERED_COST} counter");
        for c in Criticality::ALL {
            let _ = writeln!(
                out,
                "{OFFERED_COST}{{{}=\"{}\"}} {}",
                m::L_CRITICALITY,
                c.as_str(),
                self.cost(c)
            );
        }
        let _ = writeln!(
            out,
            "# HELP {OFFERED_REQUESTS} Every arriving request, admitted or shed."
        );
        let _ = writeln!(out, "# TYPE {OFFERED_REQUESTS} counter");
        for c in Criticality::ALL {
            let _ = writeln!(
                out,
                "{OFFERED_REQUESTS}{{{}=\"{}\"}} {}",
                m::L_CRITICALITY,
                c.as_str(),
                self.requests(c)
            );
        }
    }
}

impl Default for OfferedDemand {
    fn default() -> Self {
        Self::new()
    }
}

static OFFERED: OfferedDemand = OfferedDemand::new();

/// The process's offered-demand counters (one per process, like the metrics recorder).
pub fn offered() -> &'static OfferedDemand {
    &OFFERED
}

/// Counts one arriving request in [`OFFERED_COST`] and [`OFFERED_REQUESTS`]. The data path
/// calls this once per request **before** any admission decision, health checks excepted.
#[inline]
pub fn record_offered(criticality: Criticality, cost: f64) {
    OFFERED.record(criticality, cost);
}

/// Installing the Prometheus recorder failed (usually: another recorder is already installed).
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot install the Prometheus metrics recorder: {0}")]
pub struct MetricsError(String);

static HANDLE: OnceLock<Result<MetricsHandle, MetricsError>> = OnceLock::new();

/// What renders the process's metrics: the exporter's handle and the `*_seconds` histograms;
/// and what the dashboard reads them from.
#[derive(Debug, Clone)]
pub struct MetricsHandle {
    prometheus: PrometheusHandle,
    histograms: Arc<Histograms>,
    counted: Arc<Counted>,
}

impl MetricsHandle {
    /// Every recorded metric in the Prometheus text format: the exporter's, then the
    /// histograms (offered demand is [`render`]'s to add).
    pub fn render(&self) -> String {
        let mut out = self.prometheus.render();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        self.histograms.render_into(&mut out);
        out
    }

    /// The `*_seconds` histograms.
    pub fn histograms(&self) -> &Histograms {
        &self.histograms
    }

    /// The refusal counters kept beside the exporter's (the dashboard's).
    pub fn counted(&self) -> &Counted {
        &self.counted
    }

    /// The exporter's periodic housekeeping (the admin listener calls it).
    pub fn run_upkeep(&self) {
        self.prometheus.run_upkeep();
    }
}

/// Installs the process-wide recorder on first call and returns its handle; later calls
/// return the same handle (or the same error). `*_seconds` histograms get [`SECONDS_BUCKETS`].
pub fn install_recorder() -> Result<MetricsHandle, MetricsError> {
    HANDLE
        .get_or_init(|| {
            let prometheus = PrometheusBuilder::new().build_recorder();
            let handle = MetricsHandle {
                prometheus: prometheus.handle(),
                histograms: Arc::new(Histograms::new(SECONDS_BUCKETS)),
                counted: Arc::new(Counted::new()),
            };
            metrics::set_global_recorder(Recorder {
                prometheus,
                histograms: Arc::clone(&handle.histograms),
                counted: Arc::clone(&handle.counted),
            })
            .map_err(|e| MetricsError(e.to_string()))?;
            describe();
            crate::metrics::describe();
            Ok(handle)
        })
        .clone()
}

/// HELP lines for the tower layers' metrics and the gauges sampled here.
fn describe() {
    spillway_tower::metrics::describe();
    metrics::describe_gauge!(QUEUED, "Requests waiting in the admission queue.");
    metrics::describe_gauge!(QUEUE_CAPACITY, "Current bound of the admission queue.");
}

/// The full `/metrics` body: the recorder's text (if installed) followed by offered demand.
pub fn render(handle: Option<&MetricsHandle>) -> String {
    // `MetricsHandle::render` ends every line it writes with a newline.
    let mut out = handle.map(MetricsHandle::render).unwrap_or_default();
    OFFERED.render_into(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offered_demand_counts_fractions_and_ignores_bad_costs() {
        let d = OfferedDemand::new();
        d.record(Criticality::Sheddable, 0.25);
        d.record(Criticality::Sheddable, 1.5);
        d.record(Criticality::Sheddable, f64::NAN);
        d.record(Criticality::Sheddable, -3.0);
        d.record(Criticality::Critical, 2.0);
        assert_eq!(d.cost(Criticality::Sheddable), 1.75);
        assert_eq!(d.requests(Criticality::Sheddable), 4);
        assert_eq!(d.cost(Criticality::Critical), 2.0);
        assert_eq!(d.requests(Criticality::CriticalPlus), 0);
        let mut s = String::new();
        d.render_into(&mut s);
        assert!(
            s.contains("# TYPE spillway_offered_cost_total counter\n"),
            "{s}"
        );
        assert!(
            s.contains("spillway_offered_cost_total{criticality=\"SHEDDABLE\"} 1.75\n"),
            "{s}"
        );
        assert!(
            s.contains("spillway_offered_requests_total{criticality=\"SHEDDABLE\"} 4\n"),
            "{s}"
        );
        assert!(
            s.contains("spillway_offered_cost_total{criticality=\"CRITICAL_PLUS\"} 0\n"),
            "{s}"
        );
    }

    #[test]
    fn install_is_idempotent_and_renders_tower_metrics() {
        let h1 = install_recorder().expect("first install");
        let h2 = install_recorder().expect("second call returns the same handle");
        metrics::counter!(m::ADMITTED, "operation" => "unit-test").increment(3);
        metrics::histogram!(m::QUEUE_TIME, "operation" => "unit-test").record(0.003);
        let text = render(Some(&h2));
        assert!(
            text.contains("spillway_requests_admitted_total{operation=\"unit-test\"} 3"),
            "{text}"
        );
        // Buckets, not a summary.
        assert!(
            text.contains("spillway_queue_time_seconds_bucket{"),
            "{text}"
        );
        assert!(text.contains(OFFERED_COST));
        drop(h1);
    }

    /// What `promtool check metrics` asks of every family, for machines without promtool
    /// (`tests/prometheus_stack.rs` runs the real one): a HELP line; and what alerts need: the
    /// fixed label values present at 0 before the first event.
    #[test]
    fn every_family_has_help_and_fixed_labels_start_at_zero() {
        let h = install_recorder().expect("install");
        let text = render(Some(&h));
        for gate in spillway_core::retry::RetryGate::ALL {
            let line = format!(
                "{}{{reason=\"{}\"}} ",
                crate::metrics::RETRY_GIVE_UPS,
                gate.as_str()
            );
            assert!(text.contains(&line), "{line}\n{text}");
        }
        assert!(
            text.contains("spillway_proxy_faults_total{kind=\"upstream_connect\"} "),
            "{text}"
        );
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s).filter(|f| f.ends_with("_seconds")))
                .unwrap_or(name);
            assert!(
                text.contains(&format!("# HELP {family} ")),
                "no HELP for {family}\n{text}"
            );
        }
    }
}
