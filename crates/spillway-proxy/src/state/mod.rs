//! The proxy's runtime state, shared by the listener, the forwarding path and the admin API.
//!
//! Why one object: reload, status, the degradation switch and the incident controls all act on
//! the same live pieces — the effective configuration, the admission controller, the upstream
//! pool — and a request must see one consistent set of them. So the pieces built from one
//! configuration live together in a [`Runtime`], swapped whole on reload (requests already
//! running keep the `Arc` of the runtime they started with, so nothing is dropped), while the
//! things an operator sets by hand (degradation switches, incident controls) live outside it
//! and survive reloads.
//!
//! The pieces, by responsibility: [`Runtime`] and how a configuration builds it (`runtime.rs`);
//! the per-thread snapshot a request works with (`snapshot.rs`); `/status` and the degradation
//! switches (`status.rs`); the process-wide counters the data plane shares — the retry body
//! budget (`budget.rs`), the requests in progress (`in_progress/`), the overload flag
//! (`overload.rs`); and what the fleet tasks read of the state (`sources.rs`).

mod budget;
mod in_progress;
mod overload;
mod runtime;
mod snapshot;
mod sources;
mod status;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

pub(crate) use budget::{BodyBudget, BodyGrant};
pub(crate) use in_progress::InProgress;
pub use overload::{Overloaded, OVERLOAD_RECENT};
pub use runtime::Runtime;
use runtime::{apply_label_caps, build_runtime};
pub use snapshot::ThreadSnapshot;
pub use status::{StatusReport, UnknownRoute};

use crate::config::{self, ConfigError, Overrides, ProxyConfig};
use crate::controls::IncidentControls;
use crate::degrade::DegradeCounters;
use crate::metrics::labels::MetricLabels;

/// The proxy's shared state (hold it in an `Arc`).
#[derive(Debug)]
pub struct ProxyState {
    runtime: RwLock<Arc<Runtime>>,
    /// Bumped after each runtime swap (see [`ThreadSnapshot`]).
    epoch: AtomicU64,
    config_path: Option<PathBuf>,
    controls: Arc<IncidentControls>,
    /// The fleet-wide layer of the incident controls (read from the quota store).
    fleet_controls: crate::controls::fleet::FleetControls,
    /// Degradation switched off for every route.
    degrade_all_off: AtomicBool,
    /// Routes whose degradation is switched off (by name).
    degrade_off: RwLock<BTreeMap<String, bool>>,
    /// Per-route degradation counters (by name; survive reloads).
    degrade_counters: RwLock<BTreeMap<String, Arc<DegradeCounters>>>,
    reload_lock: Mutex<()>,
    reloads: AtomicU64,
    reload_failures: AtomicU64,
    origin: RwLock<String>,
    /// Fault counters (bad input, upstream failures).
    pub faults: crate::metrics::Faults,
    /// Requests held now, all connections together (`listen.max_requests_in_progress`, read
    /// at start like the rest of `[listen]`).
    pub in_progress: InProgress,
    /// Request bodies buffered for retries, all requests together
    /// (`upstream.retry_buffer_total_bytes`; outlives reloads, which set its limit).
    body_budget: Arc<BodyBudget>,
    /// Which customers and operations have metric series of their own (survives reloads, so
    /// every series stays monotonic).
    labels: MetricLabels,
    /// Set on SIGTERM: `/ready` answers 503 from then on.
    draining: AtomicBool,
    /// When a request was last refused for the proxy's own overload (client connections' idle
    /// timeouts shrink meanwhile: `progress::pressure`).
    overload: Overloaded,
    /// Command-line values that replace the file's on every (re)load.
    overrides: Overrides,
    /// The fleet quota lease client's state (`[admission.quota] store`; survives reloads).
    leases: crate::lease::Leases,
    /// The listener's certificate as handshakes get it, swapped on reload (`crate::tls`).
    tls: crate::tls::Reloader,
}

impl ProxyState {
    /// Builds the state from a validated configuration. `config_path` is what
    /// [`reload_from_file`](Self::reload_from_file) re-reads.
    pub fn new(
        cfg: ProxyConfig,
        origin: &str,
        config_path: Option<PathBuf>,
    ) -> Result<Arc<Self>, ConfigError> {
        Self::build(cfg, origin, config_path, Overrides::default())
    }

    fn build(
        cfg: ProxyConfig,
        origin: &str,
        config_path: Option<PathBuf>,
        overrides: Overrides,
    ) -> Result<Arc<Self>, ConfigError> {
        let body_budget = BodyBudget::new(cfg.upstream.retry_buffer_total_bytes);
        let runtime = build_runtime(Arc::new(cfg), None, origin)?;
        let labels = MetricLabels::new(0, 0);
        apply_label_caps(&labels, &runtime.config);
        let in_progress = InProgress::new(runtime.config.listen.max_requests_in_progress);
        let state = Arc::new(ProxyState {
            in_progress,
            overrides,
            leases: crate::lease::Leases::default(),
            tls: crate::tls::Reloader::default(),
            body_budget,
            labels,
            draining: AtomicBool::new(false),
            overload: Overloaded::default(),
            runtime: RwLock::new(Arc::new(runtime)),
            epoch: AtomicU64::new(0),
            config_path,
            controls: Arc::new(IncidentControls::default()),
            fleet_controls: crate::controls::fleet::FleetControls::default(),
            degrade_all_off: AtomicBool::new(false),
            degrade_off: RwLock::new(BTreeMap::new()),
            degrade_counters: RwLock::new(BTreeMap::new()),
            reload_lock: Mutex::new(()),
            reloads: AtomicU64::new(0),
            reload_failures: AtomicU64::new(0),
            origin: RwLock::new(origin.to_string()),
            faults: crate::metrics::Faults::default(),
        });
        // One identity per proxy: the id it leases under is the one it signs fleet controls with.
        let instance = state.fleet_controls.instance().to_string();
        crate::lease::spawn(&state, instance);
        crate::controls::fleet_sync::spawn(&state);
        Ok(state)
    }

    /// Reads, parses and validates `path`, then builds the state.
    pub fn from_file(path: PathBuf) -> Result<Arc<Self>, ConfigError> {
        Self::from_file_with(path, Overrides::default())
    }

    /// [`from_file`](Self::from_file) with `overrides` applied now and on every reload.
    pub fn from_file_with(path: PathBuf, overrides: Overrides) -> Result<Arc<Self>, ConfigError> {
        let origin = path.display().to_string();
        let text = read(&path, &origin)?;
        let mut cfg = config::parse(&text, &origin)?;
        overrides.apply(&mut cfg);
        config::check(&cfg, &origin)?;
        Self::build(cfg, &origin, Some(path), overrides)
    }

    /// The current runtime (hold it for the duration of one request).
    pub fn runtime(&self) -> Arc<Runtime> {
        Arc::clone(&self.runtime.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// The budget for request bodies buffered for retries, shared by all requests.
    pub fn body_budget(&self) -> &Arc<BodyBudget> {
        &self.body_budget
    }

    /// The fleet quota lease client's state, for `/status`.
    pub fn leases(&self) -> &crate::lease::Leases {
        &self.leases
    }

    /// Marks the proxy as leaving: `/ready` answers 503 from now on (see `crate::drain`).
    pub fn begin_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    /// A request was refused at `now` for the proxy's own overload (not a customer's quota).
    pub fn overload_refused(&self, now: std::time::Instant) {
        self.overload.note(now);
    }

    /// Whether a request was refused for the proxy's own overload since `idle_from`, or in
    /// the second before (`progress::pressure`).
    pub fn overloaded_during(&self, idle_from: std::time::Instant) -> bool {
        self.overload.during(idle_from)
    }

    /// Whether the proxy is leaving (SIGTERM received).
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// The caps on customer and operation label values (`admin.max_*_labels`).
    pub fn labels(&self) -> &MetricLabels {
        &self.labels
    }

    /// The listener's certificates as reloads swap them (`crate::tls::serving`).
    pub fn tls_reloader(&self) -> &crate::tls::Reloader {
        &self.tls
    }

    /// The effective configuration.
    pub fn config(&self) -> Arc<ProxyConfig> {
        Arc::clone(&self.runtime().config)
    }

    /// Validates `toml` and swaps it in; on any error the old configuration stays and the
    /// error is returned (and counted). `origin` names the source in messages.
    pub fn reload_from_str(&self, toml: &str, origin: &str) -> Result<(), ConfigError> {
        let _one_at_a_time = self.reload_lock.lock().unwrap_or_else(|p| p.into_inner());
        let result = config::parse(toml, origin).and_then(|mut cfg| {
            self.overrides.apply(&mut cfg);
            config::check(&cfg, origin)?;
            let old = self.runtime();
            let rt = build_runtime(Arc::new(cfg), Some(&old), origin)?;
            // Certificates are re-read on every reload, changed or not (a renewal rewrites
            // the files the configuration names); a bad one refuses the reload.
            let fresh = !Arc::ptr_eq(&old.pool, &rt.pool);
            let certs = self
                .tls
                .prepare(
                    rt.config.listen.tls.as_ref(),
                    rt.config.upstream.tls.as_ref(),
                    &*rt.pool.conns,
                    fresh,
                )
                .map_err(|(key, message)| ConfigError {
                    origin: origin.to_string(),
                    line: None,
                    key,
                    message,
                })?;
            Ok((rt, certs))
        });
        match result {
            Ok((rt, certs)) => {
                certs.apply();
                self.body_budget
                    .set_limit(rt.config.upstream.retry_buffer_total_bytes);
                apply_label_caps(&self.labels, &rt.config);
                *self.runtime.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(rt);
                // After the swap: a thread that sees the new epoch reads the new runtime.
                self.epoch.fetch_add(1, Ordering::Release);
                *self.origin.write().unwrap_or_else(|p| p.into_inner()) = origin.to_string();
                self.reloads.fetch_add(1, Ordering::Relaxed);
                tracing::info!(origin, "configuration reloaded");
                Ok(())
            }
            Err(e) => {
                self.reload_failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    error = %e,
                    "configuration reload refused, keeping the previous one"
                );
                Err(e)
            }
        }
    }

    /// Re-reads the `--config` file and reloads it (SIGHUP does this).
    pub fn reload_from_file(&self) -> Result<(), ConfigError> {
        let Some(path) = &self.config_path else {
            let e = ConfigError {
                origin: "reload".into(),
                line: None,
                key: String::new(),
                message: "the proxy was started without --config: there is no file to re-read"
                    .into(),
            };
            self.reload_failures.fetch_add(1, Ordering::Relaxed);
            tracing::error!(error = %e, "configuration reload refused");
            return Err(e);
        };
        let origin = path.display().to_string();
        match read(path, &origin) {
            Ok(text) => self.reload_from_str(&text, &origin),
            Err(e) => {
                self.reload_failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, "configuration reload refused");
                Err(e)
            }
        }
    }

    /// The incident controls (shed below a criticality, admit a percentage, retries off,
    /// exercise the degraded path).
    pub fn controls(&self) -> &Arc<IncidentControls> {
        &self.controls
    }

    /// The fleet-wide incident controls (set with `scope=fleet`, shared through the store).
    pub fn fleet_controls(&self) -> &crate::controls::fleet::FleetControls {
        &self.fleet_controls
    }

    /// Whether the proxy may retry: neither the local nor the fleet layer turned retries off.
    pub fn retries_enabled(&self) -> bool {
        self.controls.retries_enabled() && self.fleet_controls.layer().retries_enabled()
    }
}

fn read(path: &std::path::Path, origin: &str) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| ConfigError {
        origin: origin.to_string(),
        line: None,
        key: String::new(),
        message: format!("cannot read the file: {e}"),
    })
}
