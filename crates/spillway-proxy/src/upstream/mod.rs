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
mod tls;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use smallvec::SmallVec;
use spillway_core::retry::RetryPolicy;
use spillway_core::signal::{LoadSignal, ManualSignal};
use spillway_core::throttle::AdaptiveThrottle;
use spillway_core::window::Windowed;
use spillway_core::{Criticality, PerCriticality};
use spillway_tower::wire::OrcaUtilisation;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub use crate::body::{empty_body, full_body, ProxyBody};
pub use crate::config::parse_authority;
pub use conn::{Connections, UpstreamBody, UpstreamError};
pub use eject::{max_ejected, Ejection};

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

/// One upstream task.
#[derive(Debug)]
pub struct Task {
    /// Index in the pool (also its id for the retry policy's widespread ring).
    pub id: u64,
    /// `host:port`.
    pub addr: Arc<str>,
    /// The authority for request URIs.
    pub authority: http::uri::Authority,
    /// `Host` for HTTP/1.1 requests whose client sent none (the port left out when it is 80,
    /// as hyper-util's client did; 443 over TLS).
    pub host: http::HeaderValue,
    /// The scheme of HTTP/2 requests' `:scheme`: `https` over TLS (`[upstream.tls]`).
    pub scheme: http::uri::Scheme,
    in_flight: AtomicUsize,
    /// Request slots (bounded connections/streams).
    pub slots: Arc<Semaphore>,
    /// Client-side adaptive throttles for this task, one per criticality.
    pub throttles: PerCriticality<AdaptiveThrottle>,
    /// Requests started ([`STARTED`]) and failures ([`FAILED`]) over the last [`WINDOW`].
    outcomes: Windowed<2>,
    ejection: Mutex<Ejection>,
    /// Mirror of the ejection's end (ns since `origin`, 0 = not ejected) for the lock-free
    /// check on every pick.
    ejected_until_ns: AtomicU64,
    origin: Instant,
    orca: ManualSignal,
    orca_at_ns: AtomicU64,
    total: AtomicU64,
    failures: AtomicU64,
}

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

    /// Power of two choices among tasks not ejected and not in `tried`; falls back to ejected
    /// tasks if every other is excluded (better an ejected task than a certain failure).
    ///
    /// Why two draws from all tasks first: a gateway's tasks are seldom tried or ejected, so
    /// the pair usually qualifies, and the pick costs two draws and two scores whatever the
    /// pool's size (listing the eligible tasks first cost two passes over all of them per
    /// request). A pair kept only when both qualify is uniform over the qualifying pairs, as
    /// the draw among the eligible ones it falls back to is.
    pub fn pick(&self, tried: &Tried, now: Instant) -> Option<Arc<Task>> {
        let eligible = |t: &Task, allow_ejected: bool| {
            !tried.has(t.id) && (allow_ejected || !t.is_ejected(now))
        };
        if let Some((x, y)) = two_of(&self.tasks) {
            if eligible(x, false) && eligible(y, false) {
                return Some(Arc::clone(better(x, y, now)));
            }
        }
        for allow_ejected in [false, true] {
            let qualifying: SmallVec<[&Arc<Task>; 8]> = self
                .tasks
                .iter()
                .filter(|t| eligible(t, allow_ejected))
                .collect();
            if let Some((x, y)) = two_of(&qualifying) {
                return Some(Arc::clone(better(x, y, now)));
            }
        }
        None
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

fn throttles(
    cfg: &UpstreamConfig,
    origin: Instant,
) -> Result<PerCriticality<AdaptiveThrottle>, String> {
    let e = |e: spillway_core::ConfigError| format!("throttle: {e}");
    let [a, b, c, d] =
        Criticality::ALL.map(|_| AdaptiveThrottle::new(cfg.throttle.clone(), origin));
    Ok(PerCriticality([
        a.map_err(e)?,
        b.map_err(e)?,
        c.map_err(e)?,
        d.map_err(e)?,
    ]))
}

impl Task {
    /// The client throttle for requests of `criticality` to this task.
    pub fn throttle(&self, criticality: Criticality) -> &AdaptiveThrottle {
        &self.throttles[criticality]
    }

    /// The highest local refusal probability over the criticalities.
    pub fn throttle_probability(&self, now: Instant) -> f64 {
        self.throttles
            .0
            .iter()
            .map(|t| t.probability(now))
            .fold(0.0, f64::max)
    }

    fn lock_ejection(&self) -> std::sync::MutexGuard<'_, Ejection> {
        self.ejection.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the task is ejected at `now` (one atomic load).
    pub fn is_ejected(&self, now: Instant) -> bool {
        let until = self.ejected_until_ns.load(Ordering::Relaxed);
        until != 0 && spillway_core::clock::nanos_since(self.origin, now) < until
    }

    fn mirror(&self, e: &Ejection, now: Instant) {
        let until = e.remaining(now).map_or(0, |left| {
            spillway_core::clock::nanos_since(self.origin, now)
                .saturating_add(spillway_core::clock::saturating_nanos(left))
                .max(1)
        });
        self.ejected_until_ns.store(until, Ordering::Relaxed);
    }

    /// Requests in flight to it.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    fn score(&self, now: Instant) -> usize {
        self.in_flight().saturating_add(
            (self.outcomes.sums(now)[FAILED] as usize).saturating_mul(ERROR_PENALTY),
        )
    }

    /// Marks one request started (dropping the guard ends it).
    pub fn start(self: &Arc<Self>, now: Instant) -> InFlight {
        self.count_start(now);
        InFlight(Arc::clone(self))
    }

    /// [`Task::start`] for a request holding `slot`, one of this task's [`Task::slots`]: the
    /// guard also gives the slot back when dropped. One pointer instead of the guard and the
    /// semaphore's permit (16 bytes more in every response body; the body type moves several
    /// times per request, and 8 bytes more took it past 256, where memcpy takes a slower path:
    /// bench/results/proxy-forwarding.md, sixth round).
    pub fn start_in_slot(self: &Arc<Self>, now: Instant, slot: OwnedSemaphorePermit) -> InSlot {
        debug_assert_eq!(slot.num_permits(), 1);
        slot.forget();
        self.count_start(now);
        InSlot(Arc::clone(self))
    }

    fn count_start(&self, now: Instant) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.outcomes.add(now, STARTED, 1);
        self.total.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests per second sent to it over the last window.
    pub fn request_rate(&self, now: Instant) -> f64 {
        self.outcomes.sums(now)[STARTED] as f64 / WINDOW.as_secs_f64()
    }

    /// Ends an ejection (health check passed).
    pub fn readmit(&self) {
        let mut e = self.lock_ejection();
        e.readmit();
        self.ejected_until_ns.store(0, Ordering::Relaxed);
    }
}

/// One request in flight to a task (counted until dropped: until the response body ends).
#[derive(Debug)]
pub struct InFlight(Arc<Task>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One request in flight to a task in one of its request slots ([`Task::start_in_slot`]):
/// counted, and the slot taken, until dropped.
#[derive(Debug)]
pub struct InSlot(Arc<Task>);

impl InSlot {
    /// The task the slot is on.
    pub(crate) fn task(&self) -> &Task {
        &self.0
    }

    /// Charges the task with a failure for balancing (its score counts errors of the last
    /// 10 s) and in its status, without the pool's ejection bookkeeping, which this side of a
    /// response does not reach: for a task cut for going silent mid-answer.
    pub(crate) fn charge_failure(&self, now: Instant) {
        self.0.outcomes.add(now, FAILED, 1);
        self.0.failures.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for InSlot {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.0.slots.add_permits(1);
    }
}

/// Two distinct entries of `items` drawn at random, in their order in `items` (the same one
/// twice when there is only one); `None` when it is empty.
fn two_of<T>(items: &[T]) -> Option<(&T, &T)> {
    let n = items.len();
    if n <= 1 {
        return items.first().map(|x| (x, x));
    }
    let a = fastrand::usize(..n);
    let b = fastrand::usize(..n - 1);
    let b = if b >= a { b + 1 } else { b };
    Some((items.get(a.min(b))?, items.get(a.max(b))?))
}

/// The less loaded of two candidates, the first on a tie. One candidate (a sidecar's single
/// task, or one left eligible) is the pick without scoring: its score, a sum over the error
/// window's buckets, is not needed twice (~430 instructions a request, callgrind,
/// proxy-forwarding.md "Fourteenth round").
fn better<'a>(x: &'a Arc<Task>, y: &'a Arc<Task>, now: Instant) -> &'a Arc<Task> {
    if Arc::ptr_eq(x, y) || x.score(now) <= y.score(now) {
        x
    } else {
        y
    }
}

/// The tasks a request has been sent to (each attempt goes to another).
///
/// Why two parts: indexes below 64 (every sidecar's and most gateways' tasks) are bits of one
/// word, and tasks past them go to a list allocated only when one of them is tried: this
/// travels inside every request's future, whose every byte is copied when it moves.
#[derive(Debug, Default, Clone)]
pub struct Tried {
    low: u64,
    /// Boxed for a thin pointer: 8 bytes in every request's future (a `Vec` is 24, a boxed
    /// slice 16).
    #[allow(clippy::box_collection)]
    high: Option<Box<Vec<u64>>>,
}

impl Tried {
    /// Notes that an attempt went to task `id`.
    pub fn add(&mut self, id: u64) {
        if id < 64 {
            self.low |= 1 << id;
        } else if !self.has(id) {
            self.high.get_or_insert_with(Box::default).push(id);
        }
    }

    /// Whether an attempt went to task `id`.
    pub fn has(&self, id: u64) -> bool {
        if id < 64 {
            self.low & (1 << id) != 0
        } else {
            self.high.as_ref().is_some_and(|h| h.contains(&id))
        }
    }
}

#[cfg(test)]
mod tests;
