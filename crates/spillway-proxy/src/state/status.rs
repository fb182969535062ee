//! `/status` ([`StatusReport`]) and the per-route degradation switches an operator sets.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use spillway_core::controller::ControllerSnapshot;

use super::ProxyState;
use crate::controls::fleet::{now_ms, FleetStatus};
use crate::degrade::{DegradeCounters, RouteStatus};
use crate::upstream::TaskStatus;

/// Asked to switch degradation for a route that does not exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no route named {name:?}; routes: {known}")]
pub struct UnknownRoute {
    /// The name asked for.
    pub name: String,
    /// The configured route names, comma-separated.
    pub known: String,
}

/// `/status`: what the proxy is doing now.
#[derive(Debug, Clone, Serialize)]
pub struct StatusReport {
    /// Where the effective configuration came from.
    pub config_origin: String,
    /// Successful reloads since start.
    pub reloads: u64,
    /// Refused reloads since start.
    pub reload_failures: u64,
    /// The admission controller: limit, in flight, queue, utilisation, signals, refusals.
    pub admission: ControllerSnapshot,
    /// Each upstream task: in flight, throttle probability, ejection.
    pub upstreams: Vec<TaskStatus>,
    /// Whether the retry budget's widespread-overload gate is closed (most tasks refusing).
    pub upstream_overload_widespread: bool,
    /// Each route and its degradation state.
    pub routes: Vec<RouteStatus>,
    /// Degradation switched off for all routes.
    pub degradation_all_off: bool,
    /// Fault counters.
    pub faults: crate::metrics::FaultCounts,
    /// Shutting down after SIGTERM (`/ready` answers 503).
    pub draining: bool,
    /// Fleet-wide quotas: where the quota rates come from (`None`: no store configured).
    pub quota_lease: Option<crate::lease::LeaseStatus>,
}

impl ProxyState {
    /// What the proxy is doing now.
    pub fn status(&self) -> StatusReport {
        let rt = self.runtime();
        let routes = rt
            .router
            .routes()
            .map(|r| RouteStatus {
                name: r.name.to_string(),
                degrade_configured: r.degrade.is_some(),
                threshold: r.degrade.as_ref().map(|d| d.threshold),
                degradation_enabled: self.degradation_enabled(&r.name),
                counters: self.degrade_counters(&r.name).snapshot(),
            })
            .collect();
        StatusReport {
            config_origin: self
                .origin
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            reloads: self.reloads.load(Ordering::Relaxed),
            reload_failures: self.reload_failures.load(Ordering::Relaxed),
            admission: rt.controller.snapshot(),
            upstreams: rt.pool.status(),
            upstream_overload_widespread: rt.pool.retry_policy().is_widespread(),
            routes,
            degradation_all_off: self.degrade_all_off.load(Ordering::Relaxed),
            faults: self.faults.snapshot(),
            draining: self.is_draining(),
            quota_lease: self.leases.status(),
        }
    }

    /// The off switch: `enabled = false` stops route `route` (or every route, `None`) from
    /// degrading, whatever the utilisation; `true` lets it degrade again.
    pub fn set_degradation(&self, route: Option<&str>, enabled: bool) -> Result<(), UnknownRoute> {
        match route {
            None => {
                self.degrade_all_off.store(!enabled, Ordering::Relaxed);
                if enabled {
                    self.degrade_off
                        .write()
                        .unwrap_or_else(|p| p.into_inner())
                        .clear();
                }
                Ok(())
            }
            Some(name) => {
                let rt = self.runtime();
                if rt.router.routes().all(|r| &*r.name != name) {
                    let known: Vec<&str> = rt.router.routes().map(|r| &*r.name).collect();
                    return Err(UnknownRoute {
                        name: name.to_string(),
                        known: known.join(", "),
                    });
                }
                self.degrade_off
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(name.to_string(), !enabled);
                Ok(())
            }
        }
    }

    /// Whether route `name` may degrade (neither it nor all routes switched off).
    pub fn degradation_enabled(&self, name: &str) -> bool {
        !self.degrade_all_off.load(Ordering::Relaxed)
            && !self
                .degrade_off
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .get(name)
                .copied()
                .unwrap_or(false)
    }

    /// Route `name`'s degradation counters (created on first use; kept across reloads).
    pub fn degrade_counters(&self, name: &str) -> Arc<DegradeCounters> {
        if let Some(c) = self
            .degrade_counters
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
        {
            return Arc::clone(c);
        }
        let mut w = self
            .degrade_counters
            .write()
            .unwrap_or_else(|p| p.into_inner());
        Arc::clone(w.entry(name.to_string()).or_default())
    }

    /// `/status`'s `fleet_controls`: the fleet layer of the incident controls at `now`.
    pub fn fleet_status(&self, now: Instant) -> FleetStatus {
        let store = self.config().admission.quota.store.is_some();
        self.fleet_controls()
            .status(self.controls(), store, now, now_ms())
    }
}
