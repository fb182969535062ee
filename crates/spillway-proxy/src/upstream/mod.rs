//! The upstream tasks: connection pools, balancing, per-task throttles, retries, ejection.
//!
//! Why the proxy balances by itself instead of round-robin: the SRE book (ch. 21) and the AWS
//! article both note that a task refusing work quickly looks idle to naive balancers. So each
//! pick is power-of-two-choices (Mitzenmacher, "The Power of Two Choices in Randomized Load
//! Balancing", 2001) on in-flight requests *plus a penalty for recent errors and refusals*,
//! skipping ejected tasks; each task has its own adaptive client throttles
//! (`spillway_core::throttle`, SRE ch. 21 "Client-side throttling"), one per criticality, and
//! all share one retry policy (`spillway_core::retry`: attempt limit, 10 % budget,
//! widespread-overload gate).
//!
//! Why a throttle per task *and criticality*: a task that sheds SHEDDABLE work while it still
//! serves CRITICAL (as it should, SRE ch. 21 "Criticality") would, with one throttle per task,
//! see its SHEDDABLE refusals push the shared probability up and get CRITICAL requests refused
//! locally too. The chapter's "Criticality" section has adaptive throttling keep separate
//! statistics for each criticality level for this reason (paraphrased).
//!
//! Connections are load too: each task has a bounded number of request slots (HTTP/1.1: one
//! connection each; HTTP/2: streams on one connection) shared by every client connection, and
//! idle upstream connections are closed after `idle_timeout_ms` (the `conn` module: hyper's connection
//! API with an idle list per data-plane thread, so a connection is opened, used and reused by
//! one thread, with no shared lock; an HTTP/1.1 connection is driven by the request using it).

mod conn;
mod eject;
mod health;
pub mod orca;
mod pick;
mod task;
mod tls;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use spillway_core::retry::RetryPolicy;
use spillway_core::signal::{LoadSignal, ManualSignal};
use spillway_core::window::Windowed;
use spillway_core::Criticality;
use spillway_tower::wire::OrcaUtilisation;
use tokio::sync::Semaphore;

pub use crate::config::parse_authority;
pub use crate::request_body::RequestBody;
pub use conn::{Connections, UpstreamBody, UpstreamError};
pub use eject::{max_ejected, Ejection};
pub use pick::Tried;
use task::throttles;
pub use task::{InFlight, InSlot, Task};

use crate::config::{SignalsConfig, UpstreamConfig};

/// Error type of bodies the proxy moves.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Weight of one recent error in the balancing score, in in-flight requests. A task with a
/// handful of recent failures loses to an equally busy healthy one, and a task that refuses
/// everything (many errors in the window) is avoided even when idle.
const ERROR_PENALTY: usize = 4;
/// Window over which errors count against a task (and requests are counted for health-check
/// pacing).
const WINDOW: Duration = Duration::from_secs(10);
/// Index of requests started in a task's `outcomes`.
const STARTED: usize = 0;
/// Index of failures and refusals in a task's `outcomes`.
const FAILED: usize = 1;

/// `/status` view of a task.
#[derive(Debug, Clone, Serialize)]
pub struct TaskStatus {
    /// `host:port`.
    pub address: String,
    /// Requests in flight to it now.
    pub in_flight: usize,
    /// Free request slots.
    pub free_slots: usize,
    /// The client throttles' highest current rejection probability (over criticalities).
    pub throttle_probability: f64,
    /// Each criticality's throttle probability (SHEDDABLE, SHEDDABLE_PLUS, CRITICAL,
    /// CRITICAL_PLUS).
    pub throttle_probability_by_criticality: [f64; Criticality::COUNT],
    /// Requests in the throttles' windows (all criticalities).
    pub throttle_requests: u64,
    /// Accepts in the throttles' windows (all criticalities).
    pub throttle_accepts: u64,
    /// Errors (failures and refusals) in the last 10 s.
    pub recent_errors: u64,
    /// Requests in the last 10 s.
    pub recent_requests: u64,
    /// Ejected now.
    pub ejected: bool,
    /// Milliseconds of ejection left.
    pub ejected_for_ms: u64,
    /// Times ejected since start.
    pub times_ejected: u32,
    /// Consecutive failures.
    pub consecutive_failures: u32,
    /// Latest ORCA utilisation reported (0 if none).
    pub orca_utilisation: f64,
    /// Requests sent since start.
    pub requests_total: u64,
    /// Failures and refusals since start.
    pub failures_total: u64,
}

/// The upstream tasks and how to reach them.
#[derive(Debug)]
pub struct Pool {
    tasks: Vec<Arc<Task>>,
    retry: RetryPolicy,
    /// The connections to the tasks (idle lists per thread).
    pub conns: Arc<Connections>,
    /// The configuration this pool was built from.
    pub cfg: UpstreamConfig,
    /// Read `x-spillway-cost` from responses as the actual cost.
    pub cost_header: bool,
    origin: Instant,
    orca_max_age: Duration,
    /// Which metrics of a report are a task's utilisation (`signals.orca_metrics`).
    orca_rule: OrcaUtilisation,
    /// The least time between two ORCA reports of a task that are read ([`Pool::wants_orca`]).
    orca_every_ns: u64,
    health: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Pool {
    fn drop(&mut self) {
        if let Some(h) = self.health.lock().unwrap_or_else(|p| p.into_inner()).take() {
            h.abort();
        }
    }
}

impl Pool {
    /// Builds the pool (no connection is opened until the first request).
    pub fn new(cfg: &UpstreamConfig, signals: &SignalsConfig) -> Result<Self, String> {
        let origin = Instant::now();
        let https = cfg.tls.as_ref().is_some_and(|t| t.enabled);
        let (scheme, default_port) = if https {
            (http::uri::Scheme::HTTPS, 443)
        } else {
            (http::uri::Scheme::HTTP, 80)
        };
        let mut tasks = Vec::with_capacity(cfg.addresses.len());
        for (i, a) in cfg.addresses.iter().enumerate() {
            let authority = parse_authority(a)
                .ok_or_else(|| format!("addresses[{i}] = {a:?}: expected host:port"))?;
            let host = if authority.port_u16() == Some(default_port) {
                authority.host()
            } else {
                authority.as_str()
            };
            let host = http::HeaderValue::from_str(host)
                .map_err(|e| format!("addresses[{i}] = {a:?}: not a Host header value: {e}"))?;
            tasks.push(Arc::new(Task {
                id: i as u64,
                addr: Arc::from(a.as_str()),
                authority,
                host,
                scheme: scheme.clone(),
                in_flight: AtomicUsize::new(0),
                slots: Arc::new(Semaphore::new(cfg.max_requests_per_task)),
                throttles: throttles(cfg, origin)?,
                outcomes: Windowed::new(WINDOW, 10, origin),
                ejection: Mutex::new(Ejection::default()),
                ejected_until_ns: AtomicU64::new(0),
                origin,
                orca: ManualSignal::new(format!("orca:{a}")),
                orca_at_ns: AtomicU64::new(u64::MAX),
                total: AtomicU64::new(0),
                failures: AtomicU64::new(0),
            }));
        }
        let addrs: Vec<Arc<str>> = tasks.iter().map(|t| Arc::clone(&t.addr)).collect();
        let conns = Connections::new(
            &addrs,
            Duration::from_millis(cfg.connect_timeout_ms),
            Duration::from_millis(cfg.idle_timeout_ms),
            cfg.max_idle_per_task,
        );
        let conns = Arc::new(crate::tls::with_tls(
            conns,
            cfg.tls.as_ref(),
            &cfg.addresses,
        )?);
        Ok(Pool {
            tasks,
            retry: RetryPolicy::new(cfg.retry.clone(), origin)
                .map_err(|e| format!("retry: {e}"))?,
            conns,
            cfg: cfg.clone(),
            cost_header: signals.cost_header,
            origin,
            orca_max_age: Duration::from_millis(signals.orca_max_age_ms),
            orca_rule: OrcaUtilisation::from_names(&signals.orca_metrics)
                .map_err(|e| format!("signals.orca_metrics: {e}"))?,
            orca_every_ns: spillway_core::clock::saturating_nanos(orca::read_every(
                Duration::from_millis(signals.orca_max_age_ms),
            )),
            health: Mutex::new(None),
        })
    }

    /// Starts active health checks if enabled (needs a tokio runtime; idempotent).
    pub fn start_health_checks(self: &Arc<Self>) {
        if !self.cfg.health_check.enabled {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut h = self.health.lock().unwrap_or_else(|p| p.into_inner());
        if h.is_none() {
            *h = Some(rt.spawn(health::run(Arc::downgrade(self))));
        }
    }

    /// The tasks.
    pub fn tasks(&self) -> &[Arc<Task>] {
        &self.tasks
    }

    /// The shared retry policy.
    pub fn retry_policy(&self) -> &RetryPolicy {
        &self.retry
    }

    /// Records a failure or refusal from `task`, ejecting it if it has failed enough times in a
    /// row and the fleet cap allows.
    pub fn record_failure(&self, task: &Task, now: Instant) {
        task.outcomes.add(now, FAILED, 1);
        task.failures.fetch_add(1, Ordering::Relaxed);
        // A pass over the fleet, taken only for a failure that would eject.
        let may = || {
            let ejected_now = self.tasks.iter().filter(|t| t.is_ejected(now)).count();
            ejected_now < max_ejected(self.tasks.len(), self.cfg.ejection.max_fraction)
        };
        let ejected = {
            let mut e = task.lock_ejection();
            let ejected = e.failure(now, &self.cfg.ejection, may);
            if ejected {
                task.mirror(&e, now);
            }
            ejected
        };
        if ejected {
            metrics::counter!(crate::metrics::EJECTIONS, crate::metrics::L_UPSTREAM => task.addr.to_string()).increment(1);
            tracing::warn!(
                upstream = %task.addr,
                "upstream ejected after repeated failures"
            );
        }
    }

    /// Records a success from `task`.
    pub fn record_success(&self, task: &Task) {
        task.lock_ejection().success();
    }

    /// Publishes each task's throttle probability (gauge `spillway_throttle_probability_ratio`, the
    /// highest over criticalities).
    pub fn publish_throttle_gauges(&self) {
        let now = Instant::now();
        for t in &self.tasks {
            spillway_tower::metrics::throttle_probability(
                metrics::SharedString::from(Arc::clone(&t.addr)),
                t.throttle_probability(now),
            );
        }
    }

    /// `/status` view.
    pub fn status(&self) -> Vec<TaskStatus> {
        let now = Instant::now();
        self.tasks
            .iter()
            .map(|t| {
                let (req, acc) = t.throttles.0.iter().fold((0, 0), |(r, a), th| {
                    let (r2, a2) = th.counts(now);
                    (r + r2, a + a2)
                });
                let ej = t.lock_ejection().clone();
                TaskStatus {
                    address: t.addr.to_string(),
                    in_flight: t.in_flight(),
                    free_slots: t.slots.available_permits(),
                    throttle_probability: t.throttle_probability(now),
                    throttle_probability_by_criticality: t
                        .throttles
                        .0
                        .each_ref()
                        .map(|th| th.probability(now)),
                    throttle_requests: req,
                    throttle_accepts: acc,
                    recent_errors: t.outcomes.sums(now)[FAILED],
                    recent_requests: t.outcomes.sums(now)[STARTED],
                    ejected: ej.is_ejected(now),
                    ejected_for_ms: ej.remaining(now).map_or(0, |d| d.as_millis() as u64),
                    times_ejected: ej.times(),
                    consecutive_failures: ej.consecutive(),
                    orca_utilisation: t.orca.get(),
                    requests_total: t.total.load(Ordering::Relaxed),
                    failures_total: t.failures.load(Ordering::Relaxed),
                }
            })
            .collect()
    }

    /// A load signal: the mean ORCA utilisation the tasks reported recently (tasks without a
    /// fresh report are left out; 0 when none has one), read at most [`orca::REFRESH`] late.
    pub fn orca_signal(self: &Arc<Self>) -> Arc<dyn LoadSignal> {
        Arc::new(orca::OrcaSignal::new(
            Arc::downgrade(self),
            self.origin,
            self.orca_max_age,
        ))
    }

    fn orca_mean(&self, now: Instant) -> f64 {
        let now_ns = spillway_core::clock::nanos_since(self.origin, now);
        let max_age = spillway_core::clock::saturating_nanos(self.orca_max_age);
        let (mut sum, mut n) = (0.0, 0u32);
        for t in &self.tasks {
            let at = t.orca_at_ns.load(Ordering::Relaxed);
            if at != u64::MAX && now_ns.saturating_sub(at) <= max_age {
                sum += t.orca.get();
                n += 1;
            }
        }
        if n == 0 {
            0.0
        } else {
            sum / f64::from(n)
        }
    }

    /// Whether a report from `task` at `now` is to be read: not when the last one read is
    /// younger than [`orca::read_every`].
    pub fn wants_orca(&self, task: &Task, now: Instant) -> bool {
        let at = task.orca_at_ns.load(Ordering::Relaxed);
        at == u64::MAX
            || spillway_core::clock::nanos_since(self.origin, now).saturating_sub(at)
                >= self.orca_every_ns
    }

    /// Reads the utilisation of `task` from its ORCA report in either form — `text`
    /// (`endpoint-load-metrics`) first, else `bin` (`endpoint-load-metrics-bin`) — by
    /// `signals.orca_metrics`, when [`Pool::wants_orca`]. A report that does not parse, or
    /// carries none of the chosen metrics, is passed on unread.
    pub fn read_orca(
        &self,
        task: &Task,
        text: Option<&http::HeaderValue>,
        bin: Option<&http::HeaderValue>,
        now: Instant,
    ) {
        if (text.is_none() && bin.is_none()) || !self.wants_orca(task, now) {
            return;
        }
        let u = match (text, bin) {
            (Some(t), _) => self.orca_rule.from_text(t).ok().flatten(),
            (None, Some(b)) => self.orca_rule.from_bin(b).ok().flatten(),
            (None, None) => None,
        };
        if let Some(u) = u {
            self.record_orca(task, u, now);
        }
    }

    /// Records an ORCA report from `task`.
    pub fn record_orca(&self, task: &Task, utilisation: f64, now: Instant) {
        task.orca.set(utilisation);
        task.orca_at_ns.store(
            spillway_core::clock::nanos_since(self.origin, now),
            Ordering::Relaxed,
        );
    }
}

#[cfg(test)]
mod tests;
