//! Where a [`Reading`] comes from: the proxy's `/status` (admission controller, upstream tasks,
//! routes), the offered-demand counters, and the process's metrics recorder.
//!
//! Why these and nothing new: the dashboard must show what the proxy already measures, so an
//! operator's picture and Prometheus' never disagree; it adds no counter to the data path.

use crate::metrics::recorder::MetricsHandle;
use spillway_core::controller::RefusalReason;
use spillway_core::Criticality;

use super::recorded;
use super::sample::{Reading, RouteReading};
use crate::metrics::recorder as admin_metrics;
use crate::state::ProxyState;

/// Reads everything the dashboard charts, now. `metrics` is the process's recorder handle,
/// if one is installed (the per-customer refusals and the latency histograms live there).
pub fn read(state: &ProxyState, metrics: Option<&MetricsHandle>) -> Reading {
    let status = state.status();
    let a = &status.admission;
    let offered_counters = admin_metrics::offered();
    let per = |f: &dyn Fn(Criticality) -> u64| -> [u64; Criticality::COUNT] {
        std::array::from_fn(|i| Criticality::from_index(i).map_or(0, f))
    };
    let offered = per(&|c| offered_counters.requests(c));
    let admitted = per(&|c| a.admitted[c]);
    let refused = RefusalReason::ALL
        .iter()
        .map(|&r| (r.as_str(), per(&|c| a.refused.get(r, c))))
        .collect();
    let (mut ok, mut failed, mut throttle) = (0u64, 0u64, 0.0f64);
    for t in &status.upstreams {
        ok += t.requests_total.saturating_sub(t.failures_total);
        failed += t.failures_total;
        throttle = throttle.max(t.throttle_probability);
    }
    let routes = status
        .routes
        .iter()
        .map(|r| RouteReading {
            name: r.name.clone(),
            configured: r.degrade_configured,
            enabled: r.degradation_enabled,
            degraded: r.counters.upstream_path + r.counters.static_response,
            suppressed: r.counters.suppressed,
        })
        .collect();
    Reading {
        offered,
        admitted,
        refused,
        upstream_ok: ok,
        upstream_failed: failed,
        throttle_probability: throttle,
        limit: a.limit,
        in_flight: a.in_flight,
        queued: a.queued,
        queue_capacity: a.queue_capacity,
        utilisation: a.utilisation,
        overloaded: a.overloaded,
        service_time_ewma_ms: a.expected_service_time.as_secs_f64() * 1e3,
        signals: a.signals.clone(),
        degradation_all_off: status.degradation_all_off,
        routes,
        recorded: metrics.map(recorded::read),
    }
}
