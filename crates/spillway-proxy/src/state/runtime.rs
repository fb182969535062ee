//! [`Runtime`]: everything built from one configuration, and how a (re)load builds it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use spillway_core::controller::AdmissionController;
use spillway_core::SystemClock;

use crate::config::{ConfigError, ProxyConfig};
use crate::metrics::labels::MetricLabels;
use crate::route::Router;
use crate::upstream::Pool;

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
pub(super) fn apply_label_caps(labels: &MetricLabels, cfg: &ProxyConfig) {
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

/// Builds a runtime, reusing the old controller and pool where their configuration is
/// unchanged (so limits learned so far, quotas charged, throttles and pooled connections
/// survive a reload that touched only routes).
pub(super) fn build_runtime(
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
