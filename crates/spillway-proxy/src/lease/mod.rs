//! Fleet-wide quotas in the proxy: the lease client of `spillway_tower::lease`, following the
//! configuration (`[admission.quota] store`) through reloads.
//!
//! Why the protocol lives in the tower crate: a tower service and a proxy sharing one customer's
//! global quota must speak the same script over the same keys, and the tower crate must not
//! depend on the proxy. What stays here is what only the proxy has: reloads (a new store, a new
//! controller, no store at all), `/status`, and leaving the fleet when the data plane stops.
//! How the shares are computed, how the client falls back when the store is unreachable, and
//! the keys it uses are described in [`spillway_tower::lease`].

use std::sync::{Arc, Mutex, Weak};

use spillway_core::controller::AdmissionController;
pub use spillway_tower::lease::{
    check_store_url, LeaseMode, LeaseStatus, ShareStatus, LEASE_MEMBERS, LEASE_MODE, STORE_CALLS,
    STORE_ERRORS,
};
use spillway_tower::lease::{FleetStore, Leaser};

use crate::config::ProxyConfig;

/// What the lease client reads of the proxy on each pass (`ProxyState` implements it): a trait
/// so that the client sits below the state that holds it.
pub trait Source: Send + Sync + 'static {
    /// The lease client's state shared with `/status`.
    fn leases(&self) -> &Leases;
    /// The configuration current now and the controller built from it, whose quota book the
    /// leases fill.
    fn current(&self) -> (Arc<ProxyConfig>, AdmissionController);
}

/// The lease client's state shared with `/status` (kept across reloads).
#[derive(Debug, Default)]
pub struct Leases {
    status: Mutex<Option<LeaseStatus>>,
    stopped: std::sync::atomic::AtomicBool,
}

impl Leases {
    /// What `/status` shows (`None`: no store configured).
    pub fn status(&self) -> Option<LeaseStatus> {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Stops renewing: the instance drops out of the fleet within two lease intervals and its
    /// share returns to the others (called once the data plane has stopped serving).
    pub fn stop(&self) {
        self.stopped
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn stopped(&self) -> bool {
        self.stopped.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn set(&self, s: Option<LeaseStatus>) {
        *self.status.lock().unwrap_or_else(|p| p.into_inner()) = s;
    }
}

/// Starts the lease client, leasing as `instance`, on the current tokio runtime, if there is
/// one; it follows the configuration through reloads (no store: it idles) and ends when
/// `state` is dropped.
pub fn spawn<S: Source>(state: &Arc<S>, instance: String) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    spillway_tower::lease::describe();
    handle.spawn(run(Arc::downgrade(state), instance));
}

async fn run<S: Source>(weak: Weak<S>, instance: String) {
    let mut leaser = Leaser::new(instance);
    loop {
        let Some(state) = weak.upgrade() else { return };
        let (config, controller) = state.current();
        let qcfg = &config.admission.quota;
        let interval = qcfg.lease_interval;
        if state.leases().stopped() {
            // Leave at once rather than by TTL, so the share returns to the others now.
            leaser.leave(interval / 2).await;
            return;
        }
        let started = tokio::time::Instant::now();
        match FleetStore::from_quota(qcfg) {
            None => {
                if leaser.client().is_some() {
                    leaser.disconnect();
                }
                state.leases().set(None);
                // Every interval, not only on a change: the recorder may be installed after
                // the first pass, and dashboards and alerts on the mode need a sample without
                // a store.
                metrics::gauge!(LEASE_MODE).set(LeaseMode::Static.gauge());
            }
            Some(store) => {
                let status = leaser.step(controller.quota(), &store).await;
                state.leases().set(Some(status));
            }
        }
        drop((config, controller, state));
        tokio::time::sleep_until(started + interval).await;
    }
}
