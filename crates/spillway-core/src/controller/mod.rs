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

mod config;
mod enqueue;
mod episode;
#[cfg(feature = "hints")]
mod hints;
mod inner;
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
mod snapshot;
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

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::clock::Clock;
use crate::error::ConfigError;
use crate::limiter::Limiter;
use crate::queue::{AdmissionQueue, QueueConfig, ServiceBudget, ServiceTimeEstimate};
use crate::quota::QuotaBook;
use crate::random::{RandomSource, ThreadRandom};
use crate::shed::ShedPolicy;
use crate::signal::LoadSignal;

pub use config::AdmissionConfig;
pub use episode::{EPISODE_GAP, SUSTAINED_AFTER};
pub use no_answer::NoAnswer;
pub use permit::{Outcome, Permit, QueuedAdmission};
pub use refusal::{Refusal, RefusalCounts, RefusalReason};
pub use request::{Admission, AdmissionRequest};
pub use snapshot::ControllerSnapshot;

use permit::Waiter;
use refusal::Counters;

/// Default maximum attempts per request: 3 (SRE book ch. 21, "Deciding to retry": a per-request
/// retry budget of up to three attempts).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// Default `Retry-After` hint on overload refusals: 1 s, the smallest an HTTP `Retry-After`
/// header can express.
pub const DEFAULT_OVERLOAD_RETRY_AFTER: Duration = Duration::from_secs(1);
/// Load signals a controller can hold (more can be combined into one with `MaxSignal`).
pub const MAX_SIGNALS: usize = 16;

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
    /// `AdmissionController::queue_hints` only (with the `hints` feature; addresses, never
    /// dereferenced).
    queue_next: [AtomicUsize; 2],
    pub(crate) service: ServiceTimeEstimate,
    overloaded_at: f64,
    random: OnceLock<Arc<dyn RandomSource>>,
    max_attempts: u32,
    /// Set once a signal has been added: `utilisation` skips the scan of `signals` until then.
    has_signals: AtomicBool,
    /// Offset of the queue inside its `Mutex` (not stable API: measured at construction), for
    /// the hints; here it fills what was padding.
    #[cfg_attr(not(feature = "hints"), allow(dead_code))]
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
    episode: episode::Episode,
    /// Which levels are being refused for overload (the estimate's exemption, see `enqueue`).
    shedding: refusal::Shedding,
    /// The cautious service time deadlines are budgeted with (`queue::service`).
    pub(crate) service_budget: ServiceBudget,
    /// The budget (ns) every waiter's give-up time allows for at least
    /// ([`Inner::revise_give_ups`]).
    revised_budget_ns: AtomicU64,
}

/// How many bytes at the start of [`Inner`] (counted from its `Arc` allocation, counts
/// included) an admission and a release read: the clock, the limiter's atomics, the queue
/// mirror, the service estimate, the random source, the shed thresholds, the quota book's
/// free path and the admitted counters. Checked against the layout by a test.
#[cfg_attr(not(any(feature = "hints", test)), allow(dead_code))]
const HOT_BYTES: usize = 512;

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdmissionController")
            .field("limiter", &self.limiter)
            .field("queued", &self.queued.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Composes quota, shedding, the concurrency limit and the queue behind [`admit`](Self::admit).
///
/// Cheap to clone (an `Arc`); `Send + Sync`.
#[derive(Debug, Clone)]
pub struct AdmissionController {
    inner: Arc<Inner>,
}

impl AdmissionController {
    /// A controller with `cfg` (validated) reading time from `clock`. The limit algorithm draws
    /// from the thread-local generator (only the Envoy gradient draws: its minRTT window jitter).
    pub fn new(cfg: AdmissionConfig, clock: Arc<dyn Clock>) -> Result<Self, ConfigError> {
        Self::with_limit_random(cfg, clock, Box::new(ThreadRandom))
    }

    /// [`new`](Self::new), with `random` as the limit algorithm's random source (built with
    /// [`LimitConfig::build_with_random`](crate::limit::LimitConfig::build_with_random)). A simulator passes a seeded source (e.g.
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
                episode: episode::Episode::new(origin, cfg.max_attempts),
                shedding: refusal::Shedding::new(origin),
                service_budget: ServiceBudget::new(),
                revised_budget_ns: AtomicU64::new(0),
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
        let retry = req.attempt > 1;
        if req.health_check {
            return Admission::Admitted(Permit::health(Arc::clone(inner), c, now));
        }
        if let Some(d) = req.deadline {
            if d <= now {
                return inner.refuse(RefusalReason::DeadlineExceeded, c, retry, now);
            }
            inner.note_budget(d - now);
        }
        let (of_limit, of_signals) = inner.utilisations(now);
        let utilisation = of_limit.max(of_signals);
        let queued = inner.queued.load(Ordering::SeqCst);
        let overloaded = inner.overloaded(utilisation, queued);
        if overloaded && req.attempt > inner.max_attempts {
            return inner.refuse(RefusalReason::TooManyAttempts, c, retry, now);
        }
        let charge =
            match inner
                .quota
                .try_charge(now, req.customer, c, req.estimated_cost, overloaded)
            {
                Ok(charge) => charge,
                Err(over) => {
                    inner.counters.refused(RefusalReason::OverQuota, c, retry);
                    return Admission::Refused(Refusal {
                        reason: RefusalReason::OverQuota,
                        criticality: c,
                        retry_after: Some(over.retry_after),
                        sustained: false,
                    });
                }
            };
        if inner.should_shed(c, inner.shed_utilisation(c, of_limit, of_signals, now)) {
            inner.quota.settle(now, charge, 0.0);
            return inner.refuse(RefusalReason::Shed, c, retry, now);
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
                    retry,
                ));
            }
        }
        self.enqueue(req, now, charge)
    }

    /// The quota book: for status pages, and for a fleet's lease client, which reads its
    /// demand and re-rates its shared buckets ([`QuotaBook::set_rate`]).
    pub fn quota(&self) -> &QuotaBook {
        &self.inner.quota
    }
}
