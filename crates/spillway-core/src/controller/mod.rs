//! The admission controller: quota → shed on utilisation → concurrency limit → queue, behind
//! one call.
//!
//! Why it is shaped like this: the SRE book (ch. 21) and the AWS Builders' Library article on
//! load shedding describe one pipeline — refuse customers over their share when the task is
//! overloaded, shed the least critical work on a utilisation signal, cap work in progress, keep
//! a short bounded queue for bursts — and every refusal must be cheap and typed. So
//! [`AdmissionController::admit`] runs those steps in that order on borrowed request data and
//! answers with a [`Permit`] (RAII: held until the response is complete), a
//! [`QueuedAdmission`] (a std-only future) or a typed [`Refusal`].
//!
//! The fast path (admitted at once, and the permit's release) takes no lock but the limit
//! algorithm's (on release, uncontended) and allocates nothing beyond an `Arc` clone. The queue
//! lives behind a mutex that only the slow path takes: releases take it only while something is
//! queued (checked with an atomic after the in-flight decrement; enqueue re-runs dispatch
//! under the same mutex after publishing the queue length, so neither side can miss the other).
//!
//! "Overloaded" — when quotas are enforced and retries beyond `max_attempts` refused — means
//! utilisation at or above the shed policy's lowest threshold, or the limiter full, or anyone
//! queued. Utilisation is the maximum of the configured signals and the built-in
//! in-flight / limit ratio.

mod hints;
#[cfg(test)]
#[path = "tests/layout.rs"]
mod layout_tests;
mod no_answer;
mod permit;
mod preset;
mod refusal;
mod request;
#[cfg(test)]
#[path = "tests/seeded_limit.rs"]
mod seeded_limit_tests;
#[cfg(test)]
mod tests;

/// Test-only: a point in `enqueue` where another thread's work can be injected
/// deterministically (see `tests/interleave.rs`).
#[cfg(test)]
mod interleave {
    use std::cell::RefCell;

    type Hook = Box<dyn FnMut()>;

    thread_local! {
        static HOOK: RefCell<Option<Hook>> = const { RefCell::new(None) };
    }

    /// Runs `f` on this thread the next time `enqueue` has dispatched and released the queue
    /// lock but not yet looked at its waiter.
    pub(super) fn set(f: impl FnMut() + 'static) {
        HOOK.with(|h| *h.borrow_mut() = Some(Box::new(f)));
    }

    pub(super) fn between_dispatch_and_answer() {
        // Taken out before running: the hook may release permits, which re-enters the
        // controller (never `enqueue` itself, but nothing here relies on that).
        if let Some(mut f) = HOOK.with(|h| h.borrow_mut().take()) {
            f();
        }
    }
}

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::clock::Clock;
use crate::criticality::{Criticality, PerCriticality};
use crate::error::ConfigError;
use crate::limit::{LimitConfig, Sample};
use crate::limiter::{validate_headroom, Limiter};
use crate::queue::{
    AdmissionQueue, DropReason, QueueConfig, QueueEntry, ServiceBudget, ServiceTimeEstimate,
    SlotSource, Ticket,
};
use crate::quota::{QuotaBook, QuotaCharge, QuotaConfig};
use crate::random::{RandomSource, ThreadRandom};
use crate::shed::{ShedConfig, ShedPolicy};
use crate::signal::LoadSignal;

pub use no_answer::NoAnswer;
pub use permit::{Outcome, Permit, QueuedAdmission};
pub use refusal::{Refusal, RefusalCounts, RefusalReason, EPISODE_GAP, SUSTAINED_AFTER};
pub use request::{Admission, AdmissionRequest};

use permit::{Waiter, WaiterState};
use refusal::Counters;

/// Default maximum attempts per request: 3 (SRE book ch. 21, "Deciding to retry": a per-request
/// retry budget of up to three attempts).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// Default `Retry-After` hint on overload refusals: 1 s, the smallest an HTTP `Retry-After`
/// header can express.
pub const DEFAULT_OVERLOAD_RETRY_AFTER: Duration = Duration::from_secs(1);
/// Load signals a controller can hold (more can be combined into one with `MaxSignal`).
pub const MAX_SIGNALS: usize = 16;

/// Everything the controller needs. `Default` is [`AdmissionConfig::zero_config`], the policy
/// `spillway proxy` runs with no configuration.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
pub struct AdmissionConfig {
    /// The concurrency-limit algorithm (default: the Envoy gradient of
    /// [`zero_config`](Self::zero_config)).
    pub limit: LimitConfig,
    /// Share of the limit each criticality may fill (default 0.8 / 0.9 / 0.95 / 1.0, see
    /// [`crate::limiter`]).
    pub headroom: PerCriticality<f64>,
    /// The admission queue (default: 1024 entries, 100 ms max wait for requests without a
    /// deadline, CoDel 5 ms / 100 ms).
    pub queue: QueueConfig,
    /// Shedding on utilisation (default: SHEDDABLE at 1.0, ramp 0.03, the rest never).
    pub shed: ShedConfig,
    /// Per-customer quotas (default: none, i.e. unlimited).
    pub quota: QuotaConfig,
    /// Attempts beyond this are refused `TooManyAttempts` while overloaded (default 3).
    pub max_attempts: u32,
    /// `Retry-After` hint on refusals for this task's overload (default 1 s; `None` = no hint).
    #[cfg_attr(
        feature = "serde",
        serde(
            rename = "overload_retry_after_ms",
            with = "crate::queue::millis::option"
        )
    )]
    pub overload_retry_after: Option<Duration>,
}

impl AdmissionConfig {
    /// Checks every part; the error names the field and what it accepts.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.limit.validate()?;
        validate_headroom(&self.headroom)?;
        self.queue.validate()?;
        self.shed.validate()?;
        self.quota.validate()?;
        if !(1..=100).contains(&self.max_attempts) {
            return Err(ConfigError::new(
                "max_attempts",
                self.max_attempts,
                "an integer in 1 ..= 100 (attempts per request, the first included)",
            ));
        }
        if let Some(d) = self.overload_retry_after {
            if d > Duration::from_secs(3600) {
                return Err(ConfigError::new(
                    "overload_retry_after",
                    format_args!("{d:?}"),
                    "a duration of at most 1 h, or none",
                ));
            }
        }
        Ok(())
    }
}

/// State shared by the controller, its permits and queued admissions.
///
/// Laid out in declaration order (`repr(C)`), what every admission and release reads first, so
/// that it spans the fewest cache lines (the first [`HOT_BYTES`], with the `Arc`'s counts just
/// before it): a process that holds thousands of controllers and visits each one rarely — the
/// simulator's fleets of 10⁴ tasks — finds none of them in cache, and paid one miss per line
/// touched, about 13 lines per admission when the fields were where the compiler put them.
/// The queue, the configuration and most counters follow; the fast path does not read them.
#[repr(C)]
pub(crate) struct Inner {
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) limiter: Limiter,
    /// Mirror of the queue length, for the lock-free "anyone waiting?" checks.
    queued: AtomicUsize,
    /// Where a release's dispatch reads first in the queue — the highest non-empty class's
    /// deque and its front entry — published with `queued`, for
    /// [`AdmissionController::queue_hints`] only (addresses, never dereferenced).
    queue_next: [AtomicUsize; 2],
    pub(crate) service: ServiceTimeEstimate,
    overloaded_at: f64,
    random: OnceLock<Arc<dyn RandomSource>>,
    max_attempts: u32,
    /// Set once a signal has been added: `utilisation` skips the scan of `signals` until then.
    has_signals: AtomicBool,
    /// Offset of the queue inside its `Mutex` (not stable API: measured at construction), for
    /// the hints; here it fills what was padding.
    queue_data: u16,
    shed: ShedPolicy,
    pub(crate) quota: QuotaBook,
    pub(crate) counters: Counters,
    signals: [OnceLock<Arc<dyn LoadSignal>>; MAX_SIGNALS],
    signals_ignored: AtomicU64,
    queue: Mutex<AdmissionQueue<Arc<Waiter>>>,
    queue_cfg: QueueConfig,
    overload_retry_after: Option<Duration>,
    /// Whether the latency budget has come from a deadline yet (until then it is the queue's
    /// max wait).
    budget_from_deadlines: AtomicBool,
    /// The callers' latency budget in nanoseconds ([`Inner::note_budget`]), handed to the
    /// limit algorithm with each sample. Read only on release with a sample; out of the hot
    /// lines.
    budget_ns: AtomicU64,
    /// How long overload refusals of each level have gone on (momentary or sustained).
    episode: refusal::Episode,
    /// Which levels are being refused for overload (the estimate's exemption, see `enqueue`).
    shedding: refusal::Shedding,
    /// The cautious service time deadlines are budgeted with (`queue::service`).
    pub(crate) service_budget: ServiceBudget,
}

/// How many bytes at the start of [`Inner`] (counted from its `Arc` allocation, counts
/// included) an admission and a release read: the clock, the limiter's atomics, the queue
/// mirror, the service estimate, the random source, the shed thresholds, the quota book's
/// free path and the admitted counters. Checked against the layout by a test.
const HOT_BYTES: usize = 512;

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdmissionController")
            .field("limiter", &self.limiter)
            .field("queued", &self.queued.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// The limiter as the queue's slot source, remembering the in-flight count of the last take.
struct Slots<'a> {
    limiter: &'a Limiter,
    in_flight: Cell<usize>,
}

impl SlotSource for Slots<'_> {
    fn has_slot(&self, c: Criticality) -> bool {
        self.limiter.has_slot(c)
    }
    fn take_slot(&self, c: Criticality) -> bool {
        match self.limiter.try_acquire(c) {
            Some(n) => {
                self.in_flight.set(n);
                true
            }
            None => false,
        }
    }
}

impl Inner {
    /// The shed decision. An injected source is drawn on every decision, as it always was, so a
    /// seeded run (the simulator) replays the same decisions; the default thread-local
    /// generator only when the ramp needs a draw (`0 < p < 1`), since its sequence is nobody's
    /// contract and the draw was a good part of an admission's cost.
    fn should_shed(&self, c: Criticality, utilisation: f64) -> bool {
        match self.random.get() {
            Some(r) => self.shed.should_shed(c, utilisation, r.uniform()),
            None => self.shed.should_shed_with(c, utilisation, fastrand::f64),
        }
    }

    /// Max over the configured signals and in-flight / limit; NaN readings are ignored.
    fn utilisation(&self, now: Instant) -> f64 {
        let limit = self.limiter.limit();
        let in_flight = self.limiter.in_flight();
        let mut u = if limit == 0 {
            1.0
        } else {
            in_flight as f64 / limit as f64
        };
        if !self.has_signals.load(Ordering::Acquire) {
            return u;
        }
        for slot in &self.signals {
            let Some(s) = slot.get() else { break };
            let v = s.utilisation(now);
            if v > u {
                u = v;
            }
        }
        u
    }

    fn overloaded(&self, utilisation: f64, queued: usize) -> bool {
        utilisation >= self.overloaded_at || self.limiter.is_full() || queued > 0
    }

    pub(crate) fn refusal(&self, reason: RefusalReason, c: Criticality, now: Instant) -> Refusal {
        let overload = reason.retry_elsewhere_can_help();
        if overload {
            self.shedding.refused(c, now);
        }
        let retry_after = if overload {
            self.overload_retry_after
        } else {
            None
        };
        Refusal {
            reason,
            criticality: c,
            retry_after,
            sustained: overload && self.episode.refused(c, now),
        }
    }

    fn refuse(&self, reason: RefusalReason, c: Criticality, now: Instant) -> Admission {
        self.counters.refused(reason, c);
        Admission::Refused(self.refusal(reason, c, now))
    }

    fn lock_queue(&self) -> MutexGuard<'_, AdmissionQueue<Arc<Waiter>>> {
        // Queue operations leave it consistent at every step; a panic elsewhere while holding
        // the lock must not stop admission for good.
        match self.queue.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Returns a slot, then dispatches to waiters if any (see the module docs for the order).
    pub(crate) fn release_slot(&self, c: Criticality, sample: Option<&Sample>, abandoned: bool) {
        let budget = sample.map(|_| Duration::from_nanos(self.budget_ns.load(Ordering::Relaxed)));
        match sample {
            Some(s) if abandoned => self.limiter.release_abandoned(c, s, budget),
            _ => self.limiter.release_with_budget(c, sample, budget),
        }
        if self.queued.load(Ordering::SeqCst) > 0 {
            let mut q = self.lock_queue();
            self.dispatch(&mut q, self.clock.now());
        }
    }

    /// Removes a waiter by ticket; `true` if it was still queued. `gave_up` is the waiter's
    /// criticality when it leaves because it waited too long (not its own deadline, not a
    /// cancellation): everything less critical is then refused too, as it would be served in
    /// its place (see [`AdmissionQueue::drop_below`]).
    pub(crate) fn remove_waiter(&self, ticket: Ticket, gave_up: Option<Criticality>) -> bool {
        let now = self.clock.now();
        let mut q = self.lock_queue();
        let removed = q.remove(now, ticket).is_some();
        if let (true, Some(c)) = (removed, gave_up) {
            q.drop_below(now, c, |e, why| self.drop_waiter(e, why, now));
        }
        self.publish(&q);
        removed
    }

    /// Refuses a waiter the queue dropped.
    fn drop_waiter(&self, e: QueueEntry<Arc<Waiter>>, why: DropReason, now: Instant) {
        let reason = match why {
            DropReason::QueueTimeout | DropReason::Codel => RefusalReason::QueueTimeout,
            DropReason::DeadlineExceeded => RefusalReason::DeadlineExceeded,
            DropReason::Evicted => RefusalReason::QueueFull,
        };
        let w = e.item;
        if w.resolve(WaiterState::Refused(self.refusal(
            reason,
            w.criticality,
            now,
        ))) {
            self.quota.settle(now, w.charge, 0.0);
            self.counters.refused(reason, w.criticality);
        }
    }

    /// Grants slots to waiters in queue order while slots are free, dropping the queue's
    /// victims on the way. Called with the queue locked.
    fn dispatch(&self, q: &mut AdmissionQueue<Arc<Waiter>>, now: Instant) {
        let slots = Slots {
            limiter: &self.limiter,
            in_flight: Cell::new(0),
        };
        // Whether a waiter can still finish in time is judged on the cautious figure
        // (`ServiceBudget`): the EWMA is below a skewed mean most of the time.
        let expected = self.service_budget.get(self.service.get());
        while let Some(e) = q.dequeue(now, expected, &slots, |e, why| {
            self.drop_waiter(e, why, now)
        }) {
            let granted = WaiterState::Granted {
                started: now,
                in_flight: slots.in_flight.get(),
            };
            if !e.item.resolve(granted) {
                // Not waiting any more (cannot happen: waiters leave the queue only under
                // this lock); never lose the slot.
                self.limiter.release(e.criticality, None);
            }
        }
        self.publish(q);
    }

    /// Folds a caller's remaining time into the latency budget the limit algorithm sees
    /// ([`crate::limit::Limit::set_latency_budget`]): an EWMA with gain 1/16, stored only
    /// when it moves by more than 1/8 (callers with one timeout give nearly the same budget
    /// each time, so the shared line is rarely written). Each reading is capped at the queue's
    /// max wait: a deadline says when the caller gives up on the whole call, not how long one
    /// attempt may take (`spillway demo`'s clients allow a third of it per attempt), and the
    /// controller itself lets no request without one wait longer.
    fn note_budget(&self, remaining: Duration) {
        let old = Duration::from_nanos(self.budget_ns.load(Ordering::Relaxed));
        let x = remaining.min(self.queue_cfg.max_wait).as_secs_f64();
        let o = old.as_secs_f64();
        let next = if self.budget_from_deadlines.load(Ordering::Relaxed) {
            o + (x - o) / 16.0
        } else {
            // The first deadline replaces the max-wait stand-in outright.
            self.budget_from_deadlines.store(true, Ordering::Relaxed);
            x
        };
        // `o` is never NaN (it comes from a Duration); `<= 0.0` is the unset budget.
        if (next - o).abs() > o / 8.0 || o <= 0.0 {
            let next = Duration::try_from_secs_f64(next).unwrap_or(old);
            self.budget_ns
                .store(crate::clock::saturating_nanos(next), Ordering::Relaxed);
        }
    }

    /// Publishes the queue's length (and where its next dequeue will read, for hints).
    fn publish(&self, q: &AdmissionQueue<Arc<Waiter>>) {
        self.queued.store(q.len(), Ordering::SeqCst);
        for (hint, addr) in self.queue_next.iter().zip(q.next_addrs()) {
            hint.store(addr, Ordering::Relaxed);
        }
    }
}

/// Composes quota, shedding, the concurrency limit and the queue behind [`admit`](Self::admit).
///
/// Cheap to clone (an `Arc`); `Send + Sync`.
#[derive(Debug, Clone)]
pub struct AdmissionController {
    inner: Arc<Inner>,
}

/// The controller's state, for status pages.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ControllerSnapshot {
    /// The limit algorithm's name.
    pub algorithm: &'static str,
    /// Current concurrency limit.
    pub limit: usize,
    /// Requests holding a slot.
    pub in_flight: usize,
    /// Requests waiting in the queue.
    pub queued: usize,
    /// Current queue bound.
    pub queue_capacity: usize,
    /// Current utilisation (max of signals and in-flight / limit).
    pub utilisation: f64,
    /// Whether the task counts as overloaded.
    pub overloaded: bool,
    /// Expected service time (EWMA).
    pub expected_service_time: Duration,
    /// Requests holding a slot, per criticality.
    pub in_flight_by_criticality: PerCriticality<usize>,
    /// Requests waiting, per criticality.
    pub queued_by_criticality: PerCriticality<usize>,
    /// Health checks being served (they hold no slot).
    pub health_checks_in_flight: usize,
    /// Requests admitted so far (at once or from the queue), per criticality.
    pub admitted: PerCriticality<u64>,
    /// Requests that entered the queue so far, per criticality.
    pub enqueued: PerCriticality<u64>,
    /// Queued requests abandoned by their caller, per criticality.
    pub cancelled: PerCriticality<u64>,
    /// Refusals so far, by reason × criticality.
    pub refused: RefusalCounts,
    /// Health checks served so far.
    pub health_checks: u64,
    /// Each configured signal's name and current reading.
    pub signals: Vec<(String, f64)>,
    /// Signals ignored because [`MAX_SIGNALS`] were already configured.
    pub signals_ignored: u64,
}

impl AdmissionController {
    /// A controller with `cfg` (validated) reading time from `clock`. The limit algorithm draws
    /// from the thread-local generator (only the Envoy gradient draws: its minRTT window jitter).
    pub fn new(cfg: AdmissionConfig, clock: Arc<dyn Clock>) -> Result<Self, ConfigError> {
        Self::with_limit_random(cfg, clock, Box::new(ThreadRandom))
    }

    /// [`new`](Self::new), with `random` as the limit algorithm's random source (built with
    /// [`LimitConfig::build_with_random`]). A simulator passes a seeded source (e.g.
    /// `SeededRandom`) so that the Envoy gradient's jittered minRTT windows, and so the whole
    /// limit trajectory, repeat for the same seed, clock and samples. The shed ramp's draws are
    /// separate: set them with [`with_random`](Self::with_random).
    pub fn with_limit_random(
        cfg: AdmissionConfig,
        clock: Arc<dyn Clock>,
        random: Box<dyn RandomSource>,
    ) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let origin = clock.now();
        let limiter = Limiter::new(cfg.limit.build_with_random(origin, random), cfg.headroom)?;
        let max_wait_ns = crate::clock::saturating_nanos(cfg.queue.max_wait);
        let quota = QuotaBook::new(cfg.quota, origin)?;
        let shed = ShedPolicy::new(cfg.shed)?;
        let queue = Mutex::new(AdmissionQueue::new(cfg.queue.clone())?);
        let queue_data = {
            let g = queue.lock().unwrap_or_else(|p| p.into_inner());
            let off = (&*g as *const AdmissionQueue<Arc<Waiter>> as usize)
                .wrapping_sub(&queue as *const Mutex<AdmissionQueue<Arc<Waiter>>> as usize);
            // A few bytes in practice; a value that did not fit would only misdirect hints.
            u16::try_from(off).unwrap_or(0)
        };
        Ok(AdmissionController {
            inner: Arc::new(Inner {
                clock,
                limiter,
                quota,
                overloaded_at: shed.lowest_threshold(),
                shed,
                has_signals: AtomicBool::new(false),
                signals: std::array::from_fn(|_| OnceLock::new()),
                signals_ignored: AtomicU64::new(0),
                random: OnceLock::new(),
                queue,
                queue_next: [AtomicUsize::new(0), AtomicUsize::new(0)],
                queue_data,
                queue_cfg: cfg.queue,
                queued: AtomicUsize::new(0),
                service: ServiceTimeEstimate::new(),
                max_attempts: cfg.max_attempts,
                overload_retry_after: cfg.overload_retry_after,
                budget_from_deadlines: AtomicBool::new(false),
                // Callers that send no deadline are given the queue's max wait: what the
                // controller itself lets them wait.
                budget_ns: AtomicU64::new(max_wait_ns),
                episode: refusal::Episode::new(origin),
                shedding: refusal::Shedding::new(origin),
                service_budget: ServiceBudget::new(),
                counters: Counters::default(),
            }),
        })
    }

    /// Adds a utilisation signal (call before first use). At most [`MAX_SIGNALS`]; further
    /// ones are ignored and counted in [`ControllerSnapshot::signals_ignored`] — combine them
    /// with `MaxSignal` instead.
    pub fn with_signal(self, s: Arc<dyn LoadSignal>) -> Self {
        let mut s = Some(s);
        for slot in &self.inner.signals {
            if let Some(v) = s.take() {
                if let Err(v) = slot.set(v) {
                    s = Some(v);
                }
            }
        }
        // After the slot is set: a reader that sees the flag sees the signal.
        self.inner.has_signals.store(true, Ordering::Release);
        if s.is_some() {
            self.inner.signals_ignored.fetch_add(1, Ordering::Relaxed);
        }
        self
    }

    /// Uses `r` for the shed ramp's draws (default: thread-local `fastrand`). First call wins.
    pub fn with_random(self, r: Arc<dyn RandomSource>) -> Self {
        let _ = self.inner.random.set(r);
        self
    }

    /// The controller's clock reading (for callers arming a timer at `give_up_at`).
    pub fn now(&self) -> Instant {
        self.inner.clock.now()
    }

    /// Decides one request: admitted (hold the permit), queued (await it) or refused.
    pub fn admit(&self, req: &AdmissionRequest<'_>) -> Admission {
        self.admit_at(req, self.inner.clock.now())
    }

    /// [`admit`](Self::admit) at `now`, a reading of this controller's clock the caller has
    /// just taken (a proxy reads the clock as a request arrives; a second reading microseconds
    /// later would cost a clock read per request for nothing). A `now` a little behind the
    /// clock is what concurrent callers already deliver (two threads' readings reach the
    /// controller out of order); it starts the permit's time that much earlier.
    pub fn admit_at(&self, req: &AdmissionRequest<'_>, now: Instant) -> Admission {
        let inner = &self.inner;
        let c = req.criticality;
        if req.health_check {
            return Admission::Admitted(Permit::health(Arc::clone(inner), c, now));
        }
        if let Some(d) = req.deadline {
            if d <= now {
                return inner.refuse(RefusalReason::DeadlineExceeded, c, now);
            }
            inner.note_budget(d - now);
        }
        let utilisation = inner.utilisation(now);
        let queued = inner.queued.load(Ordering::SeqCst);
        let overloaded = inner.overloaded(utilisation, queued);
        if overloaded && req.attempt > inner.max_attempts {
            return inner.refuse(RefusalReason::TooManyAttempts, c, now);
        }
        let charge =
            match inner
                .quota
                .try_charge(now, req.customer, c, req.estimated_cost, overloaded)
            {
                Ok(charge) => charge,
                Err(over) => {
                    inner.counters.refused(RefusalReason::OverQuota, c);
                    return Admission::Refused(Refusal {
                        reason: RefusalReason::OverQuota,
                        criticality: c,
                        retry_after: Some(over.retry_after),
                        sustained: false,
                    });
                }
            };
        if inner.should_shed(c, utilisation) {
            inner.quota.settle(now, charge, 0.0);
            return inner.refuse(RefusalReason::Shed, c, now);
        }
        // Nobody waiting: take a slot directly. Otherwise join the queue, so an arrival never
        // overtakes a more critical waiter.
        if queued == 0 {
            if let Some(n) = inner.limiter.try_acquire(c) {
                return Admission::Admitted(Permit::slot(
                    Arc::clone(inner),
                    c,
                    now,
                    Duration::ZERO,
                    n,
                    charge,
                ));
            }
        }
        self.enqueue(req, now, charge)
    }

    /// The slow path: queue the request (or refuse it), then dispatch.
    fn enqueue(&self, req: &AdmissionRequest<'_>, now: Instant, charge: QuotaCharge) -> Admission {
        let inner = &self.inner;
        let c = req.criticality;
        let refuse = |reason| {
            inner.quota.settle(now, charge, 0.0);
            inner.refuse(reason, c, now)
        };
        let limit = inner.limiter.limit();
        let capacity = inner.queue_cfg.capacity(limit);
        if capacity == 0 {
            // The limit shrank below what leaves room to queue; work queued under the larger
            // bound may still wait. Nothing less critical than this refused arrival may be
            // served in its place, so it goes too (the lock only when someone waits).
            if inner.queued.load(Ordering::SeqCst) > 0 {
                let mut q = inner.lock_queue();
                q.drop_below(now, c, |e, why| inner.drop_waiter(e, why, now));
                inner.publish(&q);
            }
            return refuse(RefusalReason::ConcurrencyLimit);
        }
        let expected = inner.service.get();
        // Deadlines are budgeted on the cautious figure; the wait estimate below on the mean.
        let budget = inner.service_budget.get(expected);
        if let Some(d) = req.deadline {
            if now.checked_add(budget).map_or(true, |f| f > d) {
                return refuse(RefusalReason::DeadlineExceeded);
            }
        }
        // A slot frees about every `expected / in flight` while the limiter is full (Little's
        // law; the limit when fewer run): the wait ahead of this request is that times the
        // slots to free before one is its own. Zero until the first service time is known.
        let running = limit.max(inner.limiter.in_flight()).max(1);
        let per_slot = expected / u32::try_from(running).unwrap_or(u32::MAX);
        let waiter = Arc::new(Waiter::new(c, charge));
        let mut q = inner.lock_queue();
        if q.standing().is_some_and(|lowest| c <= lowest) {
            // A standing queue CoDel is dropping from, holding work at least as critical:
            // refuse at the door (nothing less critical waits, so none takes its place).
            drop(q);
            return refuse(RefusalReason::QueueFull);
        }
        let mut give_up_at = q.give_up_at(now, req.deadline, budget, c);
        // Slots to free before one is this level's: those beyond its allowance (a cut of the
        // limit leaves more in flight than the new limit) and one more.
        let blocked = (inner.limiter.in_flight() + 1).saturating_sub(inner.limiter.allowed(c));
        let ahead = q.ahead_of(c, req.continuation) + blocked;
        let wait = per_slot.saturating_mul(u32::try_from(ahead).unwrap_or(u32::MAX));
        let by_wait = now + inner.queue_cfg.max_wait;
        if give_up_at > by_wait && now.checked_add(wait).map_or(true, |t| t > give_up_at) {
            // CRITICAL work may wait past the max wait for its deadline (`give_up_at`) only
            // when it is expected to start in time: a CRITICAL queue that outgrew its callers'
            // deadlines, held until they ran out, served each request too late to count and
            // goodput collapsed (issue 28's full sweep: on/off bursts with CRITICAL at 0.8 of
            // capacity, 0.96 -> 0.23 of capacity). It waits out the max wait as before.
            give_up_at = by_wait;
        }
        let late = now.checked_add(wait).map_or(true, |t| t > give_up_at);
        // Its deadline, not the max wait, set the budget: retrying cannot help.
        let deadline_bound = give_up_at < now + inner.queue_cfg.max_wait;
        // The lowest level refused for overload within one max wait: the level being shed.
        let shed_level = inner.shedding.lowest_within(now, inner.queue_cfg.max_wait);
        let above_shed = shed_level.is_some_and(|s| s < c);
        if late && (deadline_bound || (c < Criticality::Critical && !above_shed)) {
            // It could not start in time: refuse now instead of after waiting in vain. Past
            // its own deadline's budget that is `DeadlineExceeded`; past the queue's max wait
            // it is a queueing refusal (another task may serve it: retryable while the
            // overload is momentary), and then nothing less critical may keep waiting in its
            // place either. Critical work bound only by the max wait is not refused on the
            // estimate: it is a guess (a cut limit's slots free faster than the mean says),
            // and such work is served ahead of all that queues after it, so it waits out its
            // max wait instead. So does any work above a level being shed (refused for
            // overload within one max wait): the slots that level gives up come to it first,
            // and refusing it on the guess let the shed level run in its place (`spillway
            // demo`: the `good` customer's SHEDDABLE_PLUS, 10/s of a capacity of 100/s,
            // refused `queue_full` on the estimate three attempts in a row while `noisy`'s
            // SHEDDABLE was being served).
            if deadline_bound {
                drop(q);
                return refuse(RefusalReason::DeadlineExceeded);
            }
            q.drop_below(now, c, |e, why| inner.drop_waiter(e, why, now));
            inner.publish(&q);
            drop(q);
            return refuse(RefusalReason::QueueFull);
        }
        let pushed = match q.push(
            now,
            Arc::clone(&waiter),
            c,
            req.continuation,
            req.deadline,
            capacity,
        ) {
            Ok(p) => p,
            Err(_) => {
                drop(q);
                return refuse(RefusalReason::QueueFull);
            }
        };
        Counters::bump(&inner.counters.enqueued[c.index()]);
        for e in pushed.evicted {
            inner.drop_waiter(e, DropReason::Evicted, now);
        }
        q.drop_pushed_back(now, c, shed_level, per_slot, budget, |e, why| {
            inner.drop_waiter(e, why, now)
        });
        // Publish the length, then dispatch: a release that decremented in-flight before this
        // store is caught by this dispatch; one after it sees `queued > 0` and dispatches.
        inner.publish(&q);
        inner.dispatch(&mut q, now);
        drop(q);
        #[cfg(test)]
        interleave::between_dispatch_and_answer();
        // Granted (or dropped) by the dispatch we just ran: answer now instead of via a future.
        // Looked at under the waiter's lock and taken only if final: taking a still-waiting state
        // out and putting it back left a window in which another thread's dispatch dequeued the
        // waiter, found it not `Waiting` and moved on — a queued admission no one would grant.
        let outcome = {
            let mut s = waiter.lock();
            if matches!(*s, WaiterState::Waiting(_)) {
                None
            } else {
                Some(std::mem::replace(&mut *s, WaiterState::Taken))
            }
        };
        match outcome {
            Some(WaiterState::Granted { started, in_flight }) => {
                return Admission::Admitted(Permit::slot(
                    Arc::clone(inner),
                    c,
                    started,
                    Duration::ZERO,
                    in_flight,
                    charge,
                ));
            }
            Some(WaiterState::Refused(r)) => return Admission::Refused(r),
            _ => {}
        }
        Admission::Queued(QueuedAdmission {
            inner: Arc::clone(inner),
            waiter,
            ticket: pushed.ticket,
            enqueued_at: now,
            give_up_at,
            deadline: req.deadline,
            done: false,
        })
    }

    /// The quota book: for status pages, and for a fleet's lease client, which reads its
    /// demand and re-rates its shared buckets ([`QuotaBook::set_rate`]).
    pub fn quota(&self) -> &QuotaBook {
        &self.inner.quota
    }

    /// Current state and counters.
    pub fn snapshot(&self) -> ControllerSnapshot {
        let inner = &self.inner;
        let now = inner.clock.now();
        let (queued, by_c) = {
            let q = inner.lock_queue();
            (q.len(), q.len_by_criticality())
        };
        let utilisation = inner.utilisation(now);
        let limit = inner.limiter.limit();
        let counters = &inner.counters;
        ControllerSnapshot {
            algorithm: inner.limiter.algorithm_name(),
            limit,
            in_flight: inner.limiter.in_flight(),
            queued,
            queue_capacity: inner.queue_cfg.capacity(limit),
            utilisation,
            overloaded: inner.overloaded(utilisation, queued),
            expected_service_time: inner.service.get(),
            in_flight_by_criticality: PerCriticality::from_fn(|c| inner.limiter.in_flight_of(c)),
            queued_by_criticality: PerCriticality(by_c),
            health_checks_in_flight: counters.health_in_flight.load(Ordering::Relaxed),
            admitted: Counters::read(&counters.admitted),
            enqueued: Counters::read(&counters.enqueued),
            cancelled: Counters::read(&counters.cancelled),
            refused: counters.refusal_counts(),
            health_checks: counters.health_checks.load(Ordering::Relaxed),
            signals: inner
                .signals
                .iter()
                .map_while(|s| s.get())
                .map(|s| (s.name().to_owned(), s.utilisation(now)))
                .collect(),
            signals_ignored: inner.signals_ignored.load(Ordering::Relaxed),
        }
    }
}
