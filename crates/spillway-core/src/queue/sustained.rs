//! Whether the work that may wait for its deadline (CRITICAL and above) is in a burst or in
//! sustained overload, and how fast the queue really drains.
//!
//! Why: CRITICAL work with a deadline may wait until its deadline less the expected service
//! ([`give_up_at`](super::AdmissionQueue::give_up_at)), so that a burst its callers' deadlines
//! can absorb is served rather than refused (issue 28, R2). But when CRITICAL itself is offered
//! more than the service can do — the zero-config default, where no request says how critical
//! it is, so all of it is CRITICAL — that same rule let the queue stand at almost the deadline:
//! every success waited ~0.7–0.95 s of a 1 s deadline for no goodput (a standing queue adds
//! latency, not throughput: CoDel's point), and arrivals the estimate put past their deadline
//! waited out the 100 ms max wait before being refused (`bench/soak.sh`, 2,000/s in front of
//! 200/s: successes p50 698 ms, refusals p50 101 ms; issue 28's R4 wants refusals at once).
//!
//! A burst and sustained overload look alike at any one instant; what tells them apart is
//! time. So, as CoDel judges a standing queue (Nichols & Jacobson 2012: above target for an
//! interval) and DAGOR moves its admission level on the queueing time (Zhou et al., SoCC
//! 2018), the queue watches how long the oldest waiter of these levels has waited. Once that
//! has stayed above the max wait for [`SUSTAINED_INTERVALS`] max waits (1 s by default: a
//! burst at twice the capacity that long builds a queue a 1 s deadline still absorbs), the
//! overload is *sustained* — as it is when the controller has refused such work for overload
//! for a second on end (its refusals' own "sustained", `controller/refusal.rs`: the queue then
//! holds mostly work bound by the max wait, which leaves at it, so its oldest waiter is never
//! seen past it). Until these levels' queue next drains, their work waits no longer
//! than the max wait, like everything else, and is refused on arrival when it is not expected
//! to start within it. Those already waiting longer are let go at the next dequeue. The state
//! ends only when the levels' queue empties — under sustained overload it never does — and
//! within the same window after, a queue above the max wait is judged sustained again at once
//! (RFC 8289 re-enters its dropping state near the previous rate for the same reason:
//! overload that paused is likely the same overload).
//!
//! The drain rate: the wait estimate's "a slot frees every mean service / in flight" is
//! Little's law for the slots, and under-estimated the real drain when the service time the
//! proxy sees includes the backend's own queue (the soak above: ~3.6 ms estimated against
//! 5 ms measured per dispatch). While these levels' overload is sustained, the estimate uses
//! the measured interval between two dispatches from the queue (an EWMA, gain 1/8 as TCP's
//! smoothed RTT) when that is longer. Only intervals with waiters throughout are measured: a
//! gap in which the queue was empty says how fast work arrived, not how fast slots free.

use std::time::{Duration, Instant};

use super::{classes_in, AdmissionQueue};
use crate::criticality::Criticality;

/// How many max waits the oldest CRITICAL waiter must have stayed above the max wait for the
/// overload to count as sustained (module docs).
pub const SUSTAINED_INTERVALS: u32 = 10;

/// log2 of the inverse gain of the drain-interval EWMA (1/8).
const DRAIN_GAIN_SHIFT: u32 = 3;

/// The classes of the levels that may wait for their deadline (CRITICAL and above).
const DEADLINE_CLASSES: u32 = !((1u32 << (Criticality::Critical.index() * 2)) - 1);

/// The state behind [`AdmissionQueue::sustained`] and [`AdmissionQueue::drain_per_slot`].
#[derive(Debug, Clone, Default)]
pub(super) struct Sustained {
    /// Since when the oldest deadline-bound waiter has been seen waiting past the max wait.
    above_since: Option<Instant>,
    /// Whether the overload of the deadline-bound levels is sustained.
    sustained: bool,
    /// When the last sustained episode ended.
    ended_at: Option<Instant>,
    /// The last dispatch from the queue, while waiters remained after it.
    last_dispatch: Option<Instant>,
    /// EWMA of the interval between two dispatches, ns (0: none measured yet).
    drain_ns: u64,
}

impl Sustained {
    /// A dispatch at `now`; `remaining` waiters are left after it.
    pub(super) fn on_dispatch(&mut self, now: Instant, remaining: usize) {
        if let Some(last) = self.last_dispatch {
            let x =
                u64::try_from(now.saturating_duration_since(last).as_nanos()).unwrap_or(u64::MAX);
            self.drain_ns = if self.drain_ns == 0 {
                x
            } else {
                // EWMA in integers: d + (x − d) / 8, without overflow or sign games.
                let d = self.drain_ns;
                if x >= d {
                    d + ((x - d) >> DRAIN_GAIN_SHIFT)
                } else {
                    d - ((d - x) >> DRAIN_GAIN_SHIFT)
                }
            };
        }
        self.last_dispatch = (remaining > 0).then_some(now);
    }

    /// The queue went empty: the next interval would measure arrivals, not the drain.
    pub(super) fn on_empty(&mut self) {
        self.last_dispatch = None;
    }
}

impl<T> AdmissionQueue<T> {
    /// Whether the overload of the levels that may wait for their deadline (CRITICAL and
    /// above) is sustained at `now` (module docs): then their work waits at most the max wait
    /// and is refused on arrival when it is not expected to start within it. Updates the
    /// judgement from the oldest such waiter's wait.
    pub fn sustained(&mut self, now: Instant) -> bool {
        let max_wait = self.cfg.max_wait;
        let window = max_wait.saturating_mul(SUSTAINED_INTERVALS);
        let oldest = classes_in(self.nonempty & DEADLINE_CLASSES)
            .filter_map(|k| self.classes[k].front())
            .map(|e| now.saturating_duration_since(e.enqueued_at))
            .max();
        let s = &mut self.sustained;
        let Some(oldest) = oldest else {
            if s.sustained {
                s.ended_at = Some(now);
            }
            s.sustained = false;
            s.above_since = None;
            return false;
        };
        if oldest <= max_wait {
            s.above_since = None;
            return s.sustained;
        }
        let since = *s.above_since.get_or_insert(now);
        let recent = s
            .ended_at
            .is_some_and(|t| now.saturating_duration_since(t) < window);
        if now.saturating_duration_since(since) >= window || recent {
            s.sustained = true;
        }
        s.sustained
    }

    /// Holds the overload of the deadline-bound levels sustained (until their queue next
    /// drains): the controller's word when it has refused such work for overload for a
    /// sustained while. That is the same overload seen from the door: when most CRITICAL
    /// waiters are bound by the max wait (not expected to start by their deadlines), they leave
    /// at it, and the oldest waiter is never seen past it.
    pub fn mark_sustained(&mut self) {
        self.sustained.sustained = true;
    }

    /// Whether [`sustained`](Self::sustained) last judged the overload sustained, without
    /// judging again.
    pub(super) fn was_sustained(&self) -> bool {
        self.sustained.sustained
    }

    /// The measured interval between two dispatches from the queue while waiters remained
    /// (an EWMA); zero before any was measured.
    pub fn drain_per_slot(&self) -> Duration {
        Duration::from_nanos(self.sustained.drain_ns)
    }
}
