//! The proxy's runtime state, shared by the listener, the forwarding path and the admin API.
//!
//! Why one object: reload, status, the degradation switch and the incident controls all act on
//! the same live pieces — the effective configuration, the admission controller, the upstream
//! pool — and a request must see one consistent set of them. So the pieces built from one
//! configuration live together in a [`Runtime`], swapped whole on reload (requests already
//! running keep the `Arc` of the runtime they started with, so nothing is dropped), while the
//! things an operator sets by hand (degradation switches, incident controls) live outside it
//! and survive reloads.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use serde::Serialize;
use spillway_core::controller::{AdmissionController, ControllerSnapshot};
use spillway_core::SystemClock;

use crate::config::{self, ConfigError, Overrides, ProxyConfig};
use crate::controls::IncidentControls;
use crate::degrade::{DegradeCounters, RouteStatus};
use crate::route::Router;
use crate::upstream::{Pool, TaskStatus};

/// Everything built from one configuration.
#[derive(Debug)]
pub struct Runtime {
    /// The configuration these were built from.
    pub config: Arc<ProxyConfig>,
    /// The admission controller.
    pub controller: AdmissionController,
    /// The compiled routes and classification rules.
    pub router: Router,
    /// The upstream tasks.
    pub pool: Arc<Pool>,
    /// The access log, when `[log.access] enabled` (`crate::access`).
    pub access: Option<crate::access::AccessLog>,
    util: UtilCache,
    started: std::time::Instant,
}

/// Sets the label caps from `cfg` and offers its names first, so configured customers and
/// routes get series of their own before callers' values do.
fn apply_label_caps(labels: &crate::admin::labels::MetricLabels, cfg: &ProxyConfig) {
    labels.customers.set_max(cfg.admin.max_customer_labels);
    labels.operations.set_max(cfg.admin.max_operation_labels);
    // The process's, as the recorder is (the last configuration loaded wins).
    spillway_tower::metrics::series::set_max_series_per_family(cfg.admin.max_series_per_family);
    let c = &cfg.classify;
    labels.customers.seed(
        std::iter::once(c.default_customer.as_str()).chain(c.api_keys.values().map(String::as_str)),
    );
    labels.operations.seed(
        std::iter::once(crate::route::UNMATCHED_OPERATION)
            .chain(cfg.routes.iter().map(|r| r.name.as_str())),
    );
}

/// The controller's utilisation, refreshed at most every 10 ms (and the in-flight, limit,
/// utilisation and throttle gauges with it): a snapshot locks the queue and allocates, too much
/// to take per request.
#[derive(Debug, Default)]
struct UtilCache {
    bits: AtomicU64,
    at_ms: AtomicU64,
}

impl Runtime {
    /// The admission controller's utilisation (max of its signals and in-flight/limit), at most
    /// 10 ms old at `now` (the caller's clock reading: one read per request fewer).
    pub fn utilisation(&self, now: std::time::Instant) -> f64 {
        let now_ms = now.saturating_duration_since(self.started).as_millis() as u64 + 1;
        let at = self.util.at_ms.load(Ordering::Relaxed);
        let stale = at == 0 || now_ms.saturating_sub(at) >= 10;
        if stale
            && self
                .util
                .at_ms
                .compare_exchange(at, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let snap = self.controller.snapshot();
            let u = snap.utilisation;
            self.util.bits.store(u.to_bits(), Ordering::Relaxed);
            spillway_tower::metrics::gauges(snap.in_flight, snap.limit, u);
            self.pool.publish_throttle_gauges();
            return u;
        }
        f64::from_bits(self.util.bits.load(Ordering::Relaxed))
    }
}

/// What one request works with: the shared state and the runtime current when it arrived.
///
/// Why a per-thread snapshot ([`ProxyState::current`]) instead of reading the runtime's lock
/// and cloning its `Arc` per request: both are atomic writes to cache lines every data-plane
/// thread writes (the lock's reader count, the `Arc`'s count, and the state's own count when
/// the listener clones it per request), so each request on one core took those lines from the
/// other core. The snapshot is made once per thread and configuration (an epoch the reload
/// bumps) and its own count is touched by its thread only. A reload still takes effect for the
/// next request: the epoch check is a read of a line that changes only on reload.
#[derive(Debug)]
pub struct ThreadSnapshot {
    /// The proxy's shared state.
    pub state: Arc<ProxyState>,
    /// The runtime (configuration, controller, router, pool) at the snapshot's epoch.
    pub rt: Arc<Runtime>,
    epoch: u64,
}

thread_local! {
    /// This thread's snapshot (of the last state it served: one per process outside tests).
    static CURRENT: RefCell<Option<Arc<ThreadSnapshot>>> = const { RefCell::new(None) };
}

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
    pub in_progress: crate::forward::InProgress,
    /// Request bodies buffered for retries, all requests together
    /// (`upstream.retry_buffer_total_bytes`; outlives reloads, which set its limit).
    body_budget: Arc<crate::forward::BodyBudget>,
    /// Which customers and operations have metric series of their own (survives reloads, so
    /// every series stays monotonic).
    labels: crate::admin::labels::MetricLabels,
    /// Set on SIGTERM: `/ready` answers 503 from then on.
    draining: AtomicBool,
    /// When a request was last refused for the proxy's own overload (client connections' idle
    /// timeouts shrink meanwhile: `listener::pressure`).
    overload: crate::listener::pressure::Overloaded,
    /// Command-line values that replace the file's on every (re)load.
    overrides: Overrides,
    /// The fleet quota lease client's state (`[admission.quota] store`; survives reloads).
    leases: crate::lease::Leases,
    /// The listener's certificate as handshakes get it, swapped on reload (`crate::tls`).
    tls: crate::tls::Reloader,
}

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
        let body_budget = crate::forward::BodyBudget::new(cfg.upstream.retry_buffer_total_bytes);
        let runtime = build_runtime(Arc::new(cfg), None, origin)?;
        let labels = crate::admin::labels::MetricLabels::new(0, 0);
        apply_label_caps(&labels, &runtime.config);
        let in_progress =
            crate::forward::InProgress::new(runtime.config.listen.max_requests_in_progress);
        let state = Arc::new(ProxyState {
            in_progress,
            overrides,
            leases: crate::lease::Leases::default(),
            tls: crate::tls::Reloader::default(),
            body_budget,
            labels,
            draining: AtomicBool::new(false),
            overload: crate::listener::pressure::Overloaded::default(),
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
        crate::lease::spawn(&state);
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

    /// This thread's snapshot of the state and its current runtime, for one request (see
    /// [`ThreadSnapshot`]): cloned from the thread's copy, or made afresh after a reload.
    pub fn current(self: &Arc<Self>) -> Arc<ThreadSnapshot> {
        let epoch = self.epoch.load(Ordering::Acquire);
        let fresh = || {
            Arc::new(ThreadSnapshot {
                state: Arc::clone(self),
                rt: self.runtime(),
                epoch,
            })
        };
        let cached = CURRENT.try_with(|c| {
            let mut c = c.try_borrow_mut().ok()?;
            match c.as_ref() {
                Some(cur) if cur.epoch == epoch && Arc::ptr_eq(&cur.state, self) => {
                    Some((Arc::clone(cur), None))
                }
                _ => {
                    let cur = fresh();
                    // The replaced snapshot is dropped outside the borrow.
                    Some((Arc::clone(&cur), c.replace(cur)))
                }
            }
        });
        match cached {
            Ok(Some((cur, _replaced))) => cur,
            // During thread exit, or re-entered from a drop: a snapshot of its own.
            _ => fresh(),
        }
    }

    /// The budget for request bodies buffered for retries, shared by all requests.
    pub fn body_budget(&self) -> &Arc<crate::forward::BodyBudget> {
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
    /// the second before (`listener::pressure`).
    pub fn overloaded_during(&self, idle_from: std::time::Instant) -> bool {
        self.overload.during(idle_from)
    }

    /// Whether the proxy is leaving (SIGTERM received).
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// The caps on customer and operation label values (`admin.max_*_labels`).
    pub fn labels(&self) -> &crate::admin::labels::MetricLabels {
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
            let certs =
                self.tls
                    .prepare(&rt.config, &rt.pool, fresh)
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

/// Builds a runtime, reusing the old controller and pool where their configuration is
/// unchanged (so limits learned so far, quotas charged, throttles and pooled connections
/// survive a reload that touched only routes).
fn build_runtime(
    cfg: Arc<ProxyConfig>,
    old: Option<&Runtime>,
    origin: &str,
) -> Result<Runtime, ConfigError> {
    let router = Router::new(&cfg).map_err(|(key, message)| ConfigError {
        origin: origin.to_string(),
        line: None,
        key,
        message,
    })?;
    let pool = match old {
        Some(o) if o.config.upstream == cfg.upstream && o.config.signals == cfg.signals => {
            Arc::clone(&o.pool)
        }
        _ => Arc::new(
            Pool::new(&cfg.upstream, &cfg.signals).map_err(|message| ConfigError {
                origin: origin.to_string(),
                line: None,
                key: "upstream".into(),
                message,
            })?,
        ),
    };
    let controller = match old {
        Some(o)
            if o.config.admission == cfg.admission
                && o.config.signals == cfg.signals
                && Arc::ptr_eq(&o.pool, &pool) =>
        {
            o.controller.clone()
        }
        _ => build_controller(&cfg, &pool, origin)?,
    };
    // Opened anew on every reload: logrotate's SIGHUP after moving the file (`crate::access`).
    let access = crate::access::AccessLog::open(&cfg.log.access).map_err(|e| ConfigError {
        origin: origin.to_string(),
        line: None,
        key: format!("log.{}", e.field),
        message: format!("{}: expected {}", e.value, e.expected),
    })?;
    pool.start_health_checks();
    Ok(Runtime {
        access,
        config: cfg,
        controller,
        router,
        pool,
        util: UtilCache::default(),
        started: std::time::Instant::now(),
    })
}

fn build_controller(
    cfg: &ProxyConfig,
    pool: &Arc<Pool>,
    origin: &str,
) -> Result<AdmissionController, ConfigError> {
    let err = |key: String, message: String| ConfigError {
        origin: origin.to_string(),
        line: None,
        key,
        message,
    };
    let mut c = AdmissionController::new(cfg.admission.clone(), Arc::new(SystemClock))
        .map_err(|e| err(format!("admission.{}", e.field), e.to_string()))?;
    if cfg.signals.process_cpu {
        let cpu = spillway_core::signal::ProcessCpu::new()
            .map_err(|e| err("signals.process_cpu".into(), e.to_string()))?;
        c = c.with_signal(Arc::new(cpu));
    }
    if cfg.signals.host_cpu {
        let reader = crate::hostcpu::Reader::choose(
            cfg.signals.host_cpu_source,
            spillway_core::signal::CpuSources::default(),
        )
        .map_err(|why| err("signals.host_cpu_source".into(), why))?;
        let what = reader.describe();
        match crate::hostcpu::start(reader) {
            Some(sig) => c = c.with_signal(sig),
            None => {
                return Err(err(
                    "signals.host_cpu".into(),
                    format!("true, but {what} could not be read"),
                ))
            }
        }
    }
    if cfg.signals.orca {
        c = c.with_signal(pool.orca_signal());
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(toml: &str) -> Arc<ProxyState> {
        let cfg = config::parse(toml, "t.toml").expect("valid config");
        ProxyState::new(cfg, "t.toml", None).expect("state")
    }

    const BASE: &str = "[admin]\nenabled = false\n[upstream]\naddresses = [\"127.0.0.1:9\"]\n";

    #[test]
    fn the_thread_snapshot_is_reused_until_a_reload_then_replaced() {
        let s = state(BASE);
        let a = s.current();
        let b = s.current();
        assert!(
            Arc::ptr_eq(&a, &b),
            "one snapshot per thread and configuration"
        );
        assert!(Arc::ptr_eq(&a.rt, &s.runtime()));

        s.reload_from_str(
            &format!("{BASE}[[routes]]\nname = \"r\"\npath = \"/r\"\n"),
            "new",
        )
        .expect("valid reload");
        let c = s.current();
        assert!(
            !Arc::ptr_eq(&a, &c),
            "a reload takes effect for the next request"
        );
        assert!(Arc::ptr_eq(&c.rt, &s.runtime()));
        assert_eq!(c.rt.router.routes().count(), 1);
        // The request that started before the reload keeps the runtime it started with.
        assert_eq!(a.rt.router.routes().count(), 0);

        // A refused reload leaves the snapshot as it is.
        assert!(s
            .reload_from_str("[upstream]\naddresses = []\n", "bad")
            .is_err());
        assert!(Arc::ptr_eq(&c, &s.current()));
    }

    #[test]
    fn each_state_gets_its_own_snapshot_on_one_thread() {
        let (s1, s2) = (state(BASE), state(BASE));
        let (a, b) = (s1.current(), s2.current());
        assert!(Arc::ptr_eq(&a.state, &s1) && Arc::ptr_eq(&b.state, &s2));
        assert!(Arc::ptr_eq(&s1.current().rt, &s1.runtime()));
        assert!(Arc::ptr_eq(&s2.current().rt, &s2.runtime()));
    }
}
