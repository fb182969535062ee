//! Permits (RAII slots) and queued admissions (a std-only future).
//!
//! Lost-wakeup freedom: a waiter's outcome is written only under the queue mutex (dispatch,
//! eviction) and a waiter leaves the queue only under it, so whoever cancels a waiter first
//! removes it under that mutex; if it is gone, its outcome is already final and can be read
//! (and a granted slot handed back). The waker is kept in the waiter's own small mutex.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::criticality::Criticality;
use crate::limit::Sample;
use crate::queue::Ticket;
use crate::quota::QuotaCharge;

use super::refusal::{Counters, Refusal, RefusalReason};
use super::Inner;

/// How the admitted request ended, as the concurrency limit should learn it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Outcome {
    /// Completed (including application errors): its latency is a normal sample.
    #[default]
    Success,
    /// Timed out or was refused for overload downstream: a congestion signal.
    Dropped,
    /// Tells nothing about capacity (e.g. a tunnel's lifetime): no sample.
    Ignore,
    /// The caller gave up (its deadline ran out, or it went away) while the request ran: not
    /// the upstream's failure (issue 28 requirement 6), and its latency is only known to be at
    /// least this. The limit algorithm may use that lower bound as evidence of queueing when it
    /// is already past what it tolerates ([`crate::limit::Limit::on_abandoned`]); it is never a
    /// drop, a service time or a failure.
    Abandoned,
}

/// A held concurrency slot. Dropping it releases the slot, feeds the limit algorithm a latency
/// sample, settles the quota with the actual cost and may grant a queued waiter.
#[derive(Debug)]
#[must_use = "dropping the permit releases the slot at once"]
pub struct Permit {
    inner: Arc<Inner>,
    criticality: Criticality,
    started: Instant,
    queue_time: Duration,
    in_flight: usize,
    /// `None` for a health check (holds no slot, charges no quota).
    charge: Option<QuotaCharge>,
    actual_cost: Option<f64>,
    outcome: Outcome,
    /// Released already ([`release_at`](Self::release_at)): the drop does nothing more.
    released: bool,
}

impl Permit {
    pub(crate) fn slot(
        inner: Arc<Inner>,
        criticality: Criticality,
        started: Instant,
        queue_time: Duration,
        in_flight: usize,
        charge: QuotaCharge,
        retry: bool,
    ) -> Self {
        inner.counters.admitted(criticality, retry);
        Permit {
            inner,
            criticality,
            started,
            queue_time,
            in_flight,
            charge: Some(charge),
            actual_cost: None,
            outcome: Outcome::Success,
            released: false,
        }
    }

    pub(crate) fn health(inner: Arc<Inner>, criticality: Criticality, now: Instant) -> Self {
        Counters::bump(&inner.counters.health_checks);
        inner
            .counters
            .health_in_flight
            .fetch_add(1, Ordering::Relaxed);
        Permit {
            inner,
            criticality,
            started: now,
            queue_time: Duration::ZERO,
            in_flight: 0,
            charge: None,
            actual_cost: None,
            outcome: Outcome::Ignore,
            released: false,
        }
    }

    /// Time spent waiting in the queue before admission (zero if admitted at once).
    pub fn queue_time(&self) -> Duration {
        self.queue_time
    }

    /// When the slot was granted (service time is measured from here).
    pub fn started_at(&self) -> Instant {
        self.started
    }

    /// The request's criticality.
    pub fn criticality(&self) -> Criticality {
        self.criticality
    }

    /// Whether this is a health check's permit (no slot held).
    pub fn is_health_check(&self) -> bool {
        self.charge.is_none()
    }

    /// Requests in flight when this one was admitted, including it (0 for a health check).
    pub fn in_flight_at_start(&self) -> usize {
        self.in_flight
    }

    /// The request's real cost, in quota units; the quota is corrected on release.
    pub fn set_actual_cost(&mut self, cost: f64) {
        self.actual_cost = Some(cost);
    }

    /// How the request ended (default [`Outcome::Success`]).
    pub fn set_outcome(&mut self, o: Outcome) {
        if self.charge.is_some() {
            self.outcome = o;
        }
    }

    /// Moves the slot, with everything the release will use, into the returned permit, and
    /// leaves this one released (its drop does nothing). For a holder that can only lend the
    /// permit (`&mut`) to the code that learns the slot must outlive it: a proxy whose caller
    /// went away while the upstream still works on the request keeps the slot until the
    /// upstream answers, not until the caller's future is dropped.
    pub fn hand_over(&mut self) -> Permit {
        let released = std::mem::replace(&mut self.released, true);
        Permit {
            inner: Arc::clone(&self.inner),
            criticality: self.criticality,
            started: self.started,
            queue_time: self.queue_time,
            in_flight: self.in_flight,
            charge: self.charge,
            actual_cost: self.actual_cost,
            outcome: self.outcome,
            released,
        }
    }
}

impl Permit {
    /// Releases the slot now, as dropping the permit would, at `now` — a reading of the
    /// controller's clock the caller has just taken for its own use (a proxy's latency
    /// metric), so that the release costs no second one. Later calls and the drop do nothing.
    pub fn release_at(&mut self, now: Instant) {
        self.release(Some(now));
    }

    fn release(&mut self, now: Option<Instant>) {
        if std::mem::replace(&mut self.released, true) {
            return;
        }
        let inner = &self.inner;
        let Some(charge) = self.charge else {
            inner
                .counters
                .health_in_flight
                .fetch_sub(1, Ordering::Relaxed);
            return;
        };
        let now = now.unwrap_or_else(|| inner.clock.now());
        let rtt = now.saturating_duration_since(self.started);
        let sample = match self.outcome {
            Outcome::Ignore => None,
            o => Some(Sample {
                rtt,
                in_flight: self.in_flight,
                dropped: o == Outcome::Dropped,
                now,
            }),
        };
        match self.outcome {
            Outcome::Success => {
                inner.service.record(rtt);
                inner.service_budget.record(rtt);
            }
            // Its caller gave up while it ran: it held its slot at least this long, and no
            // longer than the caller's patience. Leaving it out made the budget the mean of
            // the requests fast enough to finish (a bimodal service whose slow mode outlasts
            // the callers' timeout was budgeted at its fast mode, and waiters left the queue
            // later than their deadline less the mean allows).
            Outcome::Abandoned => inner.service_budget.record(rtt),
            // The proxy's own upstream timeout (30 s by default) or a refusal downstream: the
            // first is no service time a caller's deadline is budgeted against (one such
            // sample moved the slow average by half a second), the second took no service.
            Outcome::Dropped | Outcome::Ignore => {}
        }
        if let Some(actual) = self.actual_cost {
            inner.quota.settle(now, charge, actual);
        }
        inner.release_slot(
            self.criticality,
            sample.as_ref(),
            self.outcome == Outcome::Abandoned,
        );
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.release(None);
    }
}

/// What happened to a queued request.
#[derive(Debug)]
pub(crate) enum WaiterState {
    /// Still queued; the waker of the last poll.
    Waiting(Option<Waker>),
    /// A slot was taken for it at `started` (in-flight count `in_flight` including it).
    Granted { started: Instant, in_flight: usize },
    /// Dropped from the queue.
    Refused(Refusal),
    /// The outcome has been taken by the future (or its cancellation).
    Taken,
}

/// The slot shared by a queued request's future and the queue.
#[derive(Debug)]
pub(crate) struct Waiter {
    pub(crate) criticality: Criticality,
    pub(crate) charge: QuotaCharge,
    /// A retry (attempt 2 and on), for the counters (`Counters::retries_admitted`).
    pub(crate) retry: bool,
    state: Mutex<WaiterState>,
    /// When it gives up waiting, in nanoseconds after it was enqueued: set on enqueue, brought
    /// forward when the cautious service time grows ([`Waiter::bring_forward`]).
    give_up_ns: AtomicU64,
}

impl Waiter {
    pub(crate) fn new(criticality: Criticality, charge: QuotaCharge, retry: bool) -> Self {
        Waiter {
            criticality,
            charge,
            retry,
            state: Mutex::new(WaiterState::Waiting(None)),
            give_up_ns: AtomicU64::new(u64::MAX),
        }
    }

    /// Sets when it gives up, `ns` after it was enqueued (before it is queued).
    pub(crate) fn set_give_up(&self, ns: u64) {
        self.give_up_ns.store(ns, Ordering::Relaxed);
    }

    /// When it gives up, in nanoseconds after it was enqueued.
    pub(crate) fn give_up_ns(&self) -> u64 {
        self.give_up_ns.load(Ordering::Relaxed)
    }

    /// Moves its give-up time to `ns` after it was enqueued if that is earlier, and wakes its
    /// future so that the caller re-arms its timer (`QueuedAdmission::give_up_at`).
    pub(crate) fn bring_forward(&self, ns: u64) {
        if self.give_up_ns.fetch_min(ns, Ordering::Relaxed) <= ns {
            return;
        }
        let waker = match &*self.lock() {
            WaiterState::Waiting(Some(w)) => Some(w.clone()),
            _ => None,
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, WaiterState> {
        // The state is a plain enum written whole; a poisoned lock still holds a valid one.
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Sets the final outcome (only from `Waiting`) and wakes the future. Returns `false` if
    /// the waiter was not waiting (the caller must then undo what it granted).
    pub(crate) fn resolve(&self, outcome: WaiterState) -> bool {
        let waker = {
            let mut s = self.lock();
            match std::mem::replace(&mut *s, outcome) {
                WaiterState::Waiting(w) => w,
                previous => {
                    *s = previous;
                    return false;
                }
            }
        };
        if let Some(w) = waker {
            w.wake();
        }
        true
    }

    /// Takes the outcome, leaving `Taken`.
    pub(crate) fn take(&self) -> WaiterState {
        std::mem::replace(&mut *self.lock(), WaiterState::Taken)
    }
}

/// A request waiting in the admission queue: a future of its permit.
///
/// Uses only `std::task` (no runtime). The caller should also arm a timer for
/// [`give_up_at`](Self::give_up_at), re-arm it when a `Pending` poll finds that instant moved
/// earlier, and call [`expire`](Self::expire) when it fires; a poll at or after that instant
/// expires it too. Dropping it cancels: it leaves the queue, and a slot
/// granted meanwhile is released so it is not lost. Polling again after it has completed
/// returns a `QueueTimeout` (or `DeadlineExceeded`) refusal rather than panicking.
#[derive(Debug)]
#[must_use = "dropping a queued admission cancels it"]
pub struct QueuedAdmission {
    pub(crate) inner: Arc<Inner>,
    pub(crate) waiter: Arc<Waiter>,
    pub(crate) ticket: Ticket,
    pub(crate) enqueued_at: Instant,
    pub(crate) deadline: Option<Instant>,
    pub(crate) done: bool,
}

impl QueuedAdmission {
    /// When the caller should give up waiting: `enqueued + max wait`, or earlier its deadline
    /// less the expected service time.
    ///
    /// It can move earlier while the request waits: the expected service time is a cautious
    /// estimate that grows as slow answers come in (at a cold start it is not known at all),
    /// and a request must leave as soon as its deadline no longer leaves room for it. The
    /// future is woken when that happens; a caller whose poll returns `Pending` should re-read
    /// this and re-arm its timer if it is earlier.
    pub fn give_up_at(&self) -> Instant {
        let ns = self.waiter.give_up_ns();
        self.enqueued_at
            .checked_add(Duration::from_nanos(ns))
            .unwrap_or(self.enqueued_at + self.inner.queue_cfg.max_wait)
    }

    /// When it joined the queue.
    pub fn enqueued_at(&self) -> Instant {
        self.enqueued_at
    }

    /// The request's criticality.
    pub fn criticality(&self) -> Criticality {
        self.waiter.criticality
    }

    /// The caller's timer fired: leave the queue, refused `QueueTimeout` (or
    /// `DeadlineExceeded` if the deadline was what ran out). If a slot was granted meanwhile it
    /// is released; if the queue had already dropped the request, that refusal is returned.
    pub fn expire(mut self) -> Refusal {
        self.expire_now()
    }

    /// The refusal for giving up now: `DeadlineExceeded` when the deadline (less the
    /// expected service time) is what ran out, else `QueueTimeout` (the max wait).
    fn timeout_refusal(&self) -> Refusal {
        let by_wait = self.enqueued_at + self.inner.queue_cfg.max_wait;
        let reason = match self.deadline {
            Some(_) if self.give_up_at() < by_wait => RefusalReason::DeadlineExceeded,
            _ => RefusalReason::QueueTimeout,
        };
        self.inner
            .refusal(reason, self.waiter.criticality, self.inner.clock.now())
    }

    fn expire_now(&mut self) -> Refusal {
        self.done = true;
        let inner = &self.inner;
        let c = self.waiter.criticality;
        let gave_up = (self.timeout_refusal().reason == RefusalReason::QueueTimeout).then_some(c);
        if inner.remove_waiter(self.ticket, gave_up) {
            self.waiter.take();
            inner
                .quota
                .settle(inner.clock.now(), self.waiter.charge, 0.0);
            let r = self.timeout_refusal();
            inner.counters.refused(r.reason, c, self.waiter.retry);
            return r;
        }
        match self.waiter.take() {
            WaiterState::Refused(r) => r,
            WaiterState::Granted { .. } => {
                // Granted just before the timer fired: the caller has given up, so hand the
                // slot straight back (no latency sample: it did no work).
                inner
                    .quota
                    .settle(inner.clock.now(), self.waiter.charge, 0.0);
                inner.release_slot(c, None, false);
                let r = self.timeout_refusal();
                inner.counters.refused(r.reason, c, self.waiter.retry);
                r
            }
            WaiterState::Waiting(_) | WaiterState::Taken => self.timeout_refusal(),
        }
    }
}

impl Future for QueuedAdmission {
    type Output = Result<Permit, Refusal>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.done {
            // Polled after completion: answer consistently rather than panic.
            return Poll::Ready(Err(this.timeout_refusal()));
        }
        {
            let mut s = this.waiter.lock();
            match &mut *s {
                WaiterState::Waiting(w) => {
                    if this.inner.clock.now() < this.give_up_at() {
                        match w {
                            Some(old) if old.will_wake(cx.waker()) => {}
                            _ => *w = Some(cx.waker().clone()),
                        }
                        return Poll::Pending;
                    }
                }
                WaiterState::Granted { started, in_flight } => {
                    let (started, in_flight) = (*started, *in_flight);
                    *s = WaiterState::Taken;
                    drop(s);
                    this.done = true;
                    let queue_time = started.saturating_duration_since(this.enqueued_at);
                    return Poll::Ready(Ok(Permit::slot(
                        Arc::clone(&this.inner),
                        this.waiter.criticality,
                        started,
                        queue_time,
                        in_flight,
                        this.waiter.charge,
                        this.waiter.retry,
                    )));
                }
                WaiterState::Refused(r) => {
                    let r = *r;
                    *s = WaiterState::Taken;
                    this.done = true;
                    return Poll::Ready(Err(r));
                }
                WaiterState::Taken => {
                    this.done = true;
                    return Poll::Ready(Err(this.timeout_refusal()));
                }
            }
        }
        // Past give_up_at with no timer having fired: expire here.
        Poll::Ready(Err(this.expire_now()))
    }
}

impl Drop for QueuedAdmission {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let inner = &self.inner;
        let c = self.waiter.criticality;
        let now = inner.clock.now();
        if inner.remove_waiter(self.ticket, None) {
            self.waiter.take();
            inner.quota.settle(now, self.waiter.charge, 0.0);
            Counters::bump(&inner.counters.cancelled[c.index()]);
            return;
        }
        if let WaiterState::Granted { .. } = self.waiter.take() {
            // The slot was taken for us after we stopped listening: give it back, or it would
            // be lost for good.
            inner.quota.settle(now, self.waiter.charge, 0.0);
            inner.release_slot(c, None, false);
            Counters::bump(&inner.counters.cancelled[c.index()]);
        }
    }
}
