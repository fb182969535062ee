//! One upstream task: where it is, its request slots, its client throttles (one per
//! criticality), its recent outcomes, its ejection and its ORCA report.
//!
//! Why its counters live on the task and not in the pool: a pick reads two tasks' scores
//! (in-flight requests plus recent errors, `pick.rs`) and a response settles one task's
//! throttle and slot, all without a lock; the pool only walks the tasks for `/status` and the
//! ejection cap.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use spillway_core::signal::ManualSignal;
use spillway_core::throttle::AdaptiveThrottle;
use spillway_core::window::Windowed;
use spillway_core::{Criticality, PerCriticality};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{Ejection, ERROR_PENALTY, FAILED, STARTED, WINDOW};
use crate::config::UpstreamConfig;

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
    pub(super) in_flight: AtomicUsize,
    /// Request slots (bounded connections/streams).
    pub slots: Arc<Semaphore>,
    /// Client-side adaptive throttles for this task, one per criticality.
    pub throttles: PerCriticality<AdaptiveThrottle>,
    /// Requests started ([`STARTED`]) and failures ([`FAILED`]) over the last [`WINDOW`].
    pub(super) outcomes: Windowed<2>,
    pub(super) ejection: Mutex<Ejection>,
    /// Mirror of the ejection's end (ns since `origin`, 0 = not ejected) for the lock-free
    /// check on every pick.
    pub(super) ejected_until_ns: AtomicU64,
    pub(super) origin: Instant,
    pub(super) orca: ManualSignal,
    pub(super) orca_at_ns: AtomicU64,
    pub(super) total: AtomicU64,
    pub(super) failures: AtomicU64,
}

pub(super) fn throttles(
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

    pub(super) fn lock_ejection(&self) -> std::sync::MutexGuard<'_, Ejection> {
        self.ejection.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the task is ejected at `now` (one atomic load).
    pub fn is_ejected(&self, now: Instant) -> bool {
        let until = self.ejected_until_ns.load(Ordering::Relaxed);
        until != 0 && spillway_core::clock::nanos_since(self.origin, now) < until
    }

    pub(super) fn mirror(&self, e: &Ejection, now: Instant) {
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

    pub(super) fn score(&self, now: Instant) -> usize {
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

    pub(super) fn count_start(&self, now: Instant) {
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
