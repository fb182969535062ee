//! When a waiting entry gives up, and who is dropped with it: the give-up time from the
//! deadline and the max wait, the wait estimate on arrival, and the drops that keep strict
//! criticality order (nothing less critical keeps waiting in the place of a more critical
//! request that gave up). Apart from `dequeue.rs`, which decides who is served.

use std::time::{Duration, Instant};

use super::codel::Codel;
use super::{
    cannot_finish, class_of, classes_in, highest, AdmissionQueue, DropReason, QueueEntry, CLASSES,
};
use crate::criticality::Criticality;

impl<T> AdmissionQueue<T> {
    /// When an entry of `criticality` enqueued at `enqueued_at` with `deadline` should give
    /// up waiting, given the `expected` service time: `deadline - expected` — the last moment
    /// it could still start and finish in time — and for sheddable work no later than
    /// `enqueued_at + max_wait`, unless its level's overload is a burst (below); without a
    /// deadline, `enqueued_at + max_wait`.
    ///
    /// Sheddable work whose level's overload is a burst
    /// ([`set_burst_levels`](Self::set_burst_levels)) waits until `deadline - 2 × expected`
    /// (never less than it would otherwise). At 0.9 × a
    /// 4-worker service's capacity an M/M/4 queue's wait passes 100 ms for about a third of
    /// requests (Erlang C), and the lowest level, served last, waits longer still: refused at
    /// the max wait, SHEDDABLE lost 4.9 % of what the unprotected service served in time
    /// within its callers' 1 s (issue 28's sweep, R1). The second service time is a margin
    /// for the budget's error: it is measured from finished requests, and sits below a
    /// skewed or slowing service's mean (deadline − one budget left queue exits past
    /// deadline − mean in bimodal and capacity-drop cells, R4b).
    ///
    /// Why still `max_wait` with a far deadline for sheddable work once its overload is
    /// sustained: a deadline says when the caller gives up on the whole call, not on this
    /// attempt. `spillway demo`'s clients give each of 3 attempts a third of a 1 s deadline;
    /// waiting up to the deadline throughout kept abandoned attempts queued and goodput fell
    /// to 24 % of capacity at 5× in one run; and in front of a 4-worker service closed-loop
    /// callers kept in the queue longer instead of being refused lost 12 % of the goodput
    /// (issue 28's sweep). A burst's patience lasts until the level is refused more often
    /// than admitted, or has been refused for a second on end while more than a third of its
    /// first attempts are.
    ///
    /// Why not for CRITICAL (and CRITICAL_PLUS): it is served before everything less
    /// critical, so it waits only while the limit is full of work at least as critical or a
    /// cut of the limit leaves more in flight than it allows — a round trip or two, not a
    /// standing queue. A flat 100 ms refused it `queue_timeout` where its caller would still
    /// have been served in time (issue 28's sweep, R2: a 4-worker, 10 ms service under on/off
    /// bursts whose callers allow 200 ms, CRITICAL 95.4 % at 2×; 100 % waiting to its
    /// deadline): issue 28's R4 — a queued request waits as long as its remaining deadline
    /// allows, not a flat limit. The controller still bounds by `max_wait` CRITICAL work not
    /// expected to start in time (its wait estimate past this), so that a CRITICAL queue
    /// that outgrew its callers' deadlines is not held until they run out, and refuses at
    /// once what would not start in time even at twice the estimated drain.
    pub fn give_up_at(
        &self,
        enqueued_at: Instant,
        deadline: Option<Instant>,
        expected: Duration,
        criticality: Criticality,
    ) -> Instant {
        let by_wait = enqueued_at + self.cfg.max_wait;
        match deadline {
            Some(d) => {
                let by_deadline = d.checked_sub(expected).unwrap_or(enqueued_at);
                if criticality >= Criticality::Critical {
                    return by_deadline.max(enqueued_at);
                }
                let bounded = by_deadline.clamp(enqueued_at, by_wait);
                match d.checked_sub(expected.saturating_mul(2)) {
                    Some(margin) if self.in_burst(criticality) && !expected.is_zero() => {
                        bounded.max(margin)
                    }
                    _ => bounded,
                }
            }
            None => by_wait,
        }
    }

    /// Notes which sheddable levels' overload the controller holds to be a burst rather than
    /// sustained (bit `c` for level `c`; it refuses that level for overload no more often
    /// than it admits it, and past a second on end at most a third of its first attempts,
    /// `controller/episode.rs`).
    /// Their work with a deadline waits as that deadline allows
    /// ([`give_up_at`](Self::give_up_at)), and CoDel neither drops it nor calls its queue
    /// standing: the max wait and CoDel's 5 ms target tell a standing queue from a burst for
    /// packets served in microseconds, not for a service whose slot frees every tens of
    /// milliseconds, where waits of several service times are what a service below capacity
    /// shows (the levels above it, served first, see to the rest).
    /// Default: none (every level bounded as before).
    pub fn set_burst_levels(&mut self, levels: u8) {
        self.burst_levels = levels;
    }

    /// Whether sheddable level `c`'s overload is held to be a burst
    /// ([`set_burst_levels`](Self::set_burst_levels)).
    pub fn in_burst(&self, c: Criticality) -> bool {
        c < Criticality::Critical && self.burst_levels & (1 << c.index()) != 0
    }

    /// Whether the oldest entry of `class` (non-empty) has a deadline and its level is in a
    /// burst: it waits as its deadline allows, not CoDel's judgement.
    pub(super) fn waits_for_deadline(&self, class: usize) -> bool {
        self.classes[class]
            .front()
            .is_some_and(|e| e.deadline.is_some() && self.in_burst(e.criticality))
    }

    /// Whether an entry of `criticality` with a deadline waits at most `max_wait` (without
    /// one, every entry does; [`give_up_at`](Self::give_up_at)): sheddable work unless its
    /// level is in a burst, CRITICAL work while its overload is sustained (`sustained.rs`).
    fn max_wait_bounds_deadline(&self, criticality: Criticality) -> bool {
        if criticality < Criticality::Critical {
            !self.in_burst(criticality)
        } else {
            self.was_sustained()
        }
    }

    /// Entries that would be served before a new arrival of `criticality` / `continuation`
    /// (those of its class and above; FIFO order assumed).
    pub fn ahead_of(&self, criticality: Criticality, continuation: bool) -> usize {
        let class = class_of(criticality, continuation);
        classes_in(self.nonempty)
            .filter(|&k| k >= class)
            .map(|k| self.classes[k].len())
            .sum()
    }

    /// The criticality CoDel holds to be a standing queue (its dropping state: the level whose
    /// own waiters stood above target for an interval, see `codel.rs`); `None` otherwise. The
    /// controller refuses arrivals of that criticality or below at the door (they would join
    /// the back of a queue CoDel is already dropping from — PIE, RFC 8033, likewise drops at
    /// enqueue on the queue's delay): under sustained overload the refusal comes at once
    /// instead of after a wait. More critical arrivals are queued: they wait behind none of
    /// that level's backlog.
    ///
    /// Only while some of that level's work is queued: once it has all left, an arrival of
    /// it waits (and restarts its judgement) as it did before the standing queue formed.
    pub fn standing(&self) -> Option<Criticality> {
        let level = self.codel.as_ref().and_then(Codel::standing)?;
        let at_or_below = (1u32 << (class_of(level, true) + 1)) - 1;
        (self.nonempty & at_or_below != 0).then_some(level)
    }

    /// Removes every entry of criticality below `criticality`, handing each to `on_drop` as
    /// [`DropReason::Evicted`]: once a request of `criticality` has given up waiting, nothing
    /// less critical may keep waiting to be served in its place.
    pub fn drop_below(
        &mut self,
        now: Instant,
        criticality: Criticality,
        mut on_drop: impl FnMut(QueueEntry<T>, DropReason),
    ) {
        let below = class_of(criticality, false);
        let mut dropped = 0;
        for class in classes_in(self.nonempty).filter(|&k| k < below) {
            while let Some(e) = self.classes[class].pop_back() {
                dropped += 1;
                on_drop(e, DropReason::Evicted);
            }
            self.note_class(class);
        }
        if dropped > 0 {
            self.len -= dropped;
            self.note_len(now);
        }
    }

    /// After an arrival of `criticality` joined, drops the entries it pushed back so far that
    /// they can no longer start in time: the newest of the lowest class below `criticality`,
    /// while its expected wait (`len` slots at its level's share of them,
    /// [`expected_wait`](Self::expected_wait); it being served last) ends after its give-up
    /// time. Each goes to `on_drop` as [`DropReason::Evicted`] (a more critical
    /// request took its place) — refused now rather than after waiting in vain.
    ///
    /// With `shed_level` (a level being refused for overload), only entries of that level or
    /// below are dropped on the estimate: those above it are first in line for the slots the
    /// shed level gives up, and wait out their own budget instead.
    pub fn drop_pushed_back(
        &mut self,
        now: Instant,
        criticality: Criticality,
        shed_level: Option<Criticality>,
        per_slot: Duration,
        expected: Duration,
        mut on_drop: impl FnMut(QueueEntry<T>, DropReason),
    ) {
        if per_slot.is_zero() {
            return;
        }
        let below =
            class_of(criticality, false).min(shed_level.map_or(CLASSES, |s| class_of(s, true) + 1));
        while let Some(class) = classes_in(self.nonempty).next().filter(|&k| k < below) {
            let Some(back) = self.classes[class].back() else {
                break;
            };
            let give_up =
                self.give_up_at(back.enqueued_at, back.deadline, expected, back.criticality);
            let wait =
                self.expected_wait(back.criticality, self.len, per_slot, shed_level.is_some());
            if now.checked_add(wait).is_some_and(|t| t <= give_up) {
                break;
            }
            if let Some(e) = self.classes[class].pop_back() {
                self.note_class(class);
                self.len -= 1;
                self.note_len(now);
                on_drop(e, DropReason::Evicted);
            }
        }
    }
    /// Drops every entry at the front of its class that has run out of time: once it can no
    /// longer finish by its deadline given `expected` service time (`DeadlineExceeded`), or
    /// has waited `max_wait` where that bounds it (`QueueTimeout`, see
    /// [`give_up_at`](Self::give_up_at)). A
    /// `QueueTimeout` at criticality `c` also drops everything queued below `c`
    /// ([`drop_below`](Self::drop_below)): it would be served in the timed-out entry's place.
    pub fn purge(
        &mut self,
        now: Instant,
        expected: Duration,
        mut on_drop: impl FnMut(QueueEntry<T>, DropReason),
    ) {
        let max_wait = self.cfg.max_wait;
        let mut dropped = 0;
        let mut timed_out: Option<Criticality> = None;
        // Highest class first, so that a timeout's cascade covers every class below it.
        let mut set = self.nonempty;
        while let Some(class) = highest(set) {
            set &= !(1 << class);
            if timed_out.is_some_and(|c| class < class_of(c, false)) {
                break;
            }
            let bounded = self.max_wait_bounds_deadline(Criticality::ALL[class / 2]);
            let q = &mut self.classes[class];
            while let Some(front) = q.front() {
                let reason = if cannot_finish(now, expected, front.deadline) {
                    DropReason::DeadlineExceeded
                } else if (bounded || front.deadline.is_none())
                    && now.saturating_duration_since(front.enqueued_at) >= max_wait
                {
                    DropReason::QueueTimeout
                } else {
                    break;
                };
                if let Some(e) = q.pop_front() {
                    dropped += 1;
                    if reason == DropReason::QueueTimeout && timed_out.is_none() {
                        timed_out = Some(e.criticality);
                    }
                    on_drop(e, reason);
                }
            }
            self.note_class(class);
        }
        if dropped > 0 {
            self.len -= dropped;
            self.note_len(now);
        }
        if let Some(c) = timed_out {
            self.drop_below(now, c, &mut on_drop);
        }
    }
}
