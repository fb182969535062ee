//! The admission's slow path: a request that found no free slot, or others waiting, is queued
//! in criticality order or refused at once when it could not start in time (issue 28: refuse
//! early instead of after waiting in vain).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use crate::criticality::Criticality;
use crate::queue::DropReason;
use crate::quota::QuotaCharge;

use super::permit::{Waiter, WaiterState};
use super::refusal::Counters;
use super::{
    Admission, AdmissionController, AdmissionRequest, Permit, QueuedAdmission, RefusalReason,
};

impl AdmissionController {
    /// The slow path: queue the request (or refuse it), then dispatch.
    pub(super) fn enqueue(
        &self,
        req: &AdmissionRequest<'_>,
        now: Instant,
        charge: QuotaCharge,
    ) -> Admission {
        let inner = &self.inner;
        let c = req.criticality;
        let retry = req.attempt > 1;
        let refuse = |reason| {
            inner.quota.settle(now, charge, 0.0);
            inner.refuse(reason, c, retry, now)
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
        // slots to free before one is its own. Zero — no estimate, so no one is refused or
        // dropped on one — until the first service time is known, and while the limit is still
        // growing from a start that knew nothing of the upstream (`Limit::probing`: slow
        // start, answers still at minRTT): it is then a floor of what the upstream runs, and
        // slots free faster than the estimate divided by it says. Refused on it, a 1000-worker
        // service's cold start at 0.9 × its capacity lost 0.5–1.9 % of what the unprotected
        // service served (issue 28's sweep, R1: 1,110 of 60,000 requests refused in the first
        // 27 ms while the limit grew from 20 to 1,178). Sheddable work waits as in a burst
        // meanwhile (`Inner::burst_levels`).
        let running = limit.max(inner.limiter.in_flight()).max(1);
        let per_slot = if inner.limiter.probing() {
            Duration::ZERO
        } else {
            expected / u32::try_from(running).unwrap_or(u32::MAX)
        };
        let waiter = Arc::new(Waiter::new(c, charge, retry));
        // The lowest level refused for overload within one max wait: the level being shed.
        // Work above it is first in line for the slots it gives up, so it is not refused on a
        // guess about its wait — neither the standing queue's nor the estimate's (below).
        let shed_level = inner.shedding.lowest_within(now, inner.queue_cfg.max_wait);
        let above_shed = shed_level.is_some_and(|s| s < c);
        let mut q = inner.lock_queue();
        // Sheddable work with a deadline waits as it allows while its level's overload is a
        // burst (`AdmissionQueue::set_burst_levels`), and no standing queue refuses it at the
        // door.
        q.set_burst_levels(inner.burst_levels(now));
        let patient = req.deadline.is_some() && q.in_burst(c);
        if !above_shed && !patient && q.standing().is_some_and(|lowest| c <= lowest) {
            // A standing queue CoDel is dropping from, holding work at least as critical:
            // refuse at the door (nothing less critical waits, so none takes its place). Not
            // above a level being shed: a SHEDDABLE_PLUS queue stands while CRITICAL takes the
            // slots, not behind a backlog of its own, and refused at the door it burnt its
            // callers' retries at once and then saw the shed SHEDDABLE admitted in its place as
            // soon as the CRITICAL burst passed (`spillway demo`, simulated: 5 of 11 of the
            // `good` customer's SHEDDABLE_PLUS refusals at seed 2).
            drop(q);
            return refuse(RefusalReason::QueueFull);
        }
        let mut give_up_at = q.give_up_at(now, req.deadline, budget, c);
        // Before the max wait bounds it (below): as late as its deadline's budget allows.
        let by_deadline = give_up_at;
        let by_wait = now + inner.queue_cfg.max_wait;
        // CRITICAL work may wait for its deadline to absorb a burst, but not once its own
        // overload is sustained (refused for overload for a second on end, until its queue
        // drains; `queue/sustained.rs`): then a queue that stands at the deadline adds latency and no
        // goodput. It waits at most the max wait, judged on the slower of the Little's-law
        // estimate and the drain measured between dispatches, and is refused at once when it
        // is not expected to start within it (the estimate is no longer a guess about a
        // burst: CRITICAL has been refused for a second on end).
        let mut sustained = q.sustained();
        if !sustained
            && c >= Criticality::Critical
            && inner.episode.is_sustained(c, now)
            && inner.episode.refuses_steadily(c, &inner.counters)
        {
            // Refused for overload for a second on end, steadily (not a trickle among work
            // served in full: `queue/sustained.rs`): the same overload seen at the door.
            q.mark_sustained();
            sustained = true;
        }
        let sustained = sustained && c >= Criticality::Critical;
        let wait_slot = if sustained {
            give_up_at = give_up_at.min(by_wait);
            per_slot.max(q.drain_per_slot())
        } else {
            per_slot
        };
        // Slots to free before one is this level's: those beyond its allowance (a cut of the
        // limit leaves more in flight than the new limit) and one more.
        let blocked = (inner.limiter.in_flight() + 1).saturating_sub(inner.limiter.allowed(c));
        let ahead = q.ahead_of(c, req.continuation) + blocked;
        // While a level is being shed, drained at the share of the slots the levels above it
        // leave — as far as that share is known (`queue/served.rs`): a level with nothing
        // waiting and no slot seen lately has one arrival judged on the plain estimate.
        let shared = shed_level.is_some() && q.share_is_current(c, now);
        let wait = q.expected_wait(c, ahead, wait_slot, shared);
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
        // CRITICAL work that would not start by its deadline's budget even were the queue
        // ahead drained twice as fast as estimated: that is no guess about a burst, and it is
        // refused now (the estimate is Little's law on the mean service time; for it to start
        // in time slots would have to free at over twice that rate). Held to the max wait
        // instead, an all-CRITICAL burst at 20× a 4-worker service's capacity kept 800
        // waiters, two seconds of work for callers allowing 190 ms, and refused most of its
        // work after 100 ms for its first second (issue 28's sweep, R4a: median refusal
        // 100 ms; 0 ms with this).
        let hopeless = c >= Criticality::Critical
            && req.deadline.is_some()
            && now.checked_add(wait / 2).map_or(true, |t| t > by_deadline);
        if late
            && (deadline_bound
                || (c < Criticality::Critical && !above_shed)
                || sustained
                || hopeless)
        {
            // It could not start in time: refuse now instead of after waiting in vain. Past
            // its own deadline's budget that is `DeadlineExceeded`; past the queue's max wait
            // it is a queueing refusal (another task may serve it: retryable while the
            // overload is momentary), and then nothing less critical may keep waiting in its
            // place either. Critical work bound only by the max wait is not refused on the
            // estimate unless hopeless (above): it is a guess (a cut limit's slots free
            // faster than the mean says), and such work is served ahead of all that queues
            // after it, so it waits out its max wait instead. So does any work above a level being shed (refused for
            // overload within one max wait): the slots that level gives up come to it first,
            // and refusing it on the guess let the shed level run in its place (`spillway
            // demo`: the `good` customer's SHEDDABLE_PLUS, 10/s of a capacity of 100/s,
            // refused `queue_full` on the estimate three attempts in a row while `noisy`'s
            // SHEDDABLE was being served). Neither holds once CRITICAL overload is sustained.
            if deadline_bound {
                drop(q);
                return refuse(RefusalReason::DeadlineExceeded);
            }
            q.drop_below(now, c, |e, why| inner.drop_waiter(e, why, now));
            inner.publish(&q);
            drop(q);
            return refuse(RefusalReason::QueueFull);
        }
        waiter.set_give_up(crate::clock::saturating_nanos(
            give_up_at.saturating_duration_since(now),
        ));
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
        super::interleave::between_dispatch_and_answer();
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
                    retry,
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
            deadline: req.deadline,
            done: false,
        })
    }
}
