//! The controller's shared state at work: shedding, utilisation, refusals, the release path
//! and the queue's dispatch. Split from `mod.rs` so that the admission decision (`admit_at`)
//! and its slow path (`enqueue.rs`) read apart from the bookkeeping they call.

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use crate::clock::saturating_nanos;
use crate::criticality::Criticality;
use crate::limit::Sample;
use crate::limiter::Limiter;
use crate::queue::{AdmissionQueue, DropReason, QueueEntry, SlotSource, Ticket};

use super::permit::{Waiter, WaiterState};
use super::{Admission, Inner, Refusal, RefusalReason};

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
    pub(super) fn should_shed(&self, c: Criticality, utilisation: f64) -> bool {
        match self.random.get() {
            Some(r) => self.shed.should_shed(c, utilisation, r.uniform()),
            None => self.shed.should_shed_with(c, utilisation, fastrand::f64),
        }
    }

    /// Max over the configured signals and in-flight / limit.
    pub(super) fn utilisation(&self, now: Instant) -> f64 {
        let (of_limit, of_signals) = self.utilisations(now);
        of_limit.max(of_signals)
    }

    /// In-flight / limit, and the max over the configured signals (0 without any; NaN
    /// readings are ignored).
    #[inline]
    pub(super) fn utilisations(&self, now: Instant) -> (f64, f64) {
        let limit = self.limiter.limit();
        let in_flight = self.limiter.in_flight();
        let of_limit = if limit == 0 {
            1.0
        } else {
            in_flight as f64 / limit as f64
        };
        let mut of_signals = 0.0;
        if self.has_signals.load(Ordering::Acquire) {
            for slot in &self.signals {
                let Some(s) = slot.get() else { break };
                let v = s.utilisation(now);
                if v > of_signals {
                    of_signals = v;
                }
            }
        }
        (of_limit, of_signals)
    }

    /// The utilisation level `c` is shed on. In flight above the limit (a reading past 1)
    /// is what a cut of the limit leaves behind, not by itself overload: it counts as 1
    /// while `c`'s overload is a burst (`Episode::is_burst`), and the queue, in criticality
    /// order, holds the excess meanwhile. Shed on it, a 4-worker service at 0.9 × its
    /// capacity, whose limit the latency gradient cuts now and then, refused SHEDDABLE work
    /// its callers would have had served in time (issue 28's sweep, R1: 22 of 67 refusals in
    /// `c=4 50ms exp 20x 0.9x`).
    #[inline]
    pub(super) fn shed_utilisation(
        &self,
        c: Criticality,
        of_limit: f64,
        of_signals: f64,
        now: Instant,
    ) -> f64 {
        if of_limit > 1.0 && of_limit > of_signals && self.episode.is_burst(c, now, &self.counters)
        {
            of_signals.max(1.0)
        } else {
            of_limit.max(of_signals)
        }
    }

    /// The sheddable levels whose overload, if any, is a burst: refused for overload no more
    /// often than admitted, and past a second on end at most a third of their first attempts
    /// (`Episode::is_burst`; bit per level, see `AdmissionQueue::set_burst_levels`).
    pub(super) fn burst_levels(&self, now: Instant) -> u8 {
        if self.limiter.probing() {
            // The limit is still growing from a start that knew nothing of the upstream
            // (`Limit::probing`): a queue now is the limit's, not an overload's. Before the
            // first answer no service time is known, and the max wait still bounds such work
            // (`AdmissionQueue::give_up_at`).
            return 1 << Criticality::Sheddable.index() | 1 << Criticality::SheddablePlus.index();
        }
        [Criticality::Sheddable, Criticality::SheddablePlus]
            .into_iter()
            .filter(|&c| self.episode.is_burst(c, now, &self.counters))
            .fold(0, |m, c| m | 1 << c.index())
    }

    pub(super) fn overloaded(&self, utilisation: f64, queued: usize) -> bool {
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
            sustained: overload && self.episode.refused(c, now, &self.counters),
        }
    }

    /// Refuses a request at the door; `retry`: attempt 2 and on.
    pub(super) fn refuse(
        &self,
        reason: RefusalReason,
        c: Criticality,
        retry: bool,
        now: Instant,
    ) -> Admission {
        // The refusal first: a new episode notes the counts before it (`Episode::refused`).
        let refusal = self.refusal(reason, c, now);
        self.counters.refused(reason, c, retry);
        Admission::Refused(refusal)
    }

    pub(super) fn lock_queue(&self) -> MutexGuard<'_, AdmissionQueue<Arc<Waiter>>> {
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
        // The limit may hold to the upstream's knee while overload is sustained
        // (`limit/envoy/knee.rs`); judged at the sample's time.
        let overloaded = sample.is_some_and(|s| {
            Criticality::ALL
                .iter()
                .any(|&c| self.episode.is_sustained(c, s.now))
        });
        self.limiter
            .release_from_controller(c, sample, abandoned, budget, overloaded);
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
    pub(super) fn drop_waiter(&self, e: QueueEntry<Arc<Waiter>>, why: DropReason, now: Instant) {
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
            self.counters.refused(reason, w.criticality, w.retry);
        }
    }

    /// Grants slots to waiters in queue order while slots are free, dropping the queue's
    /// victims on the way. Called with the queue locked.
    pub(super) fn dispatch(&self, q: &mut AdmissionQueue<Arc<Waiter>>, now: Instant) {
        let slots = Slots {
            limiter: &self.limiter,
            in_flight: Cell::new(0),
        };
        // Whether a waiter can still finish in time is judged on the cautious figure
        // (`ServiceBudget`): the EWMA is below a skewed mean most of the time.
        let expected = self.service_budget.get(self.service.get());
        self.revise_give_ups(q, expected);
        // CoDel spares the levels above the one being shed (`queue/dequeue.rs`).
        q.set_shed_level(self.shedding.lowest_within(now, self.queue_cfg.max_wait));
        q.set_burst_levels(self.burst_levels(now));
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

    /// Brings forward the give-up time of every waiter whose deadline no longer leaves room for
    /// `budget`, the cautious service time, now that it has grown: a waiter's timer was armed
    /// with the budget of its arrival, and at a cold start (no answer yet, budget zero) or
    /// after a skewed service's slow answers that let it wait until its deadline less too
    /// little — then it left the queue later than its deadline allows, or was served too late
    /// to count (`bench/results/giveup-issue28.md`).
    ///
    /// Waiters are armed with at least `revised_budget_ns` (it only rises with a sweep, and
    /// falls with the budget), so a sweep is needed only when the budget rose past it — by a
    /// sixteenth, so that the noise of an average does not walk the whole queue on every
    /// release. Called with the queue locked, as dispatch is.
    fn revise_give_ups(&self, q: &AdmissionQueue<Arc<Waiter>>, budget: Duration) {
        let b = saturating_nanos(budget);
        let armed = self.revised_budget_ns.load(Ordering::Relaxed);
        if b <= armed || q.is_empty() {
            if b != armed {
                self.revised_budget_ns.store(b, Ordering::Relaxed);
            }
            return;
        }
        if b - armed <= armed / 16 {
            return;
        }
        self.revised_budget_ns.store(b, Ordering::Relaxed);
        for e in q.iter() {
            let Some(d) = e.deadline else { continue };
            let at = d.checked_sub(budget).unwrap_or(e.enqueued_at);
            e.item.bring_forward(saturating_nanos(
                at.saturating_duration_since(e.enqueued_at),
            ));
        }
    }

    /// Folds a caller's remaining time into the latency budget the limit algorithm sees
    /// ([`crate::limit::Limit::set_latency_budget`]): an EWMA with gain 1/16, stored only
    /// when it moves by more than 1/8 (callers with one timeout give nearly the same budget
    /// each time, so the shared line is rarely written). Each reading is capped at the queue's
    /// max wait: a deadline says when the caller gives up on the whole call, not how long one
    /// attempt may take (`spillway demo`'s clients allow a third of it per attempt), and the
    /// controller itself lets no request without one wait longer.
    pub(super) fn note_budget(&self, remaining: Duration) {
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
    pub(super) fn publish(&self, q: &AdmissionQueue<Arc<Waiter>>) {
        self.queued.store(q.len(), Ordering::SeqCst);
        self.episode.note_waiting(q.len_by_criticality());
        for (hint, addr) in self.queue_next.iter().zip(q.next_addrs()) {
            hint.store(addr, Ordering::Relaxed);
        }
    }
}
