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
//! time. A burst the callers' deadlines absorb is served without refusing CRITICAL work; once
//! CRITICAL work has been refused for overload for a second on end (its refusals' own
//! "sustained", `controller/episode.rs`: the queue stands at its callers' deadlines and what
//! arrives does not fit), the overload is *sustained* — DAGOR (Zhou et al., SoCC 2018) likewise
//! moves its admission on the queueing it sees, and CoDel (Nichols & Jacobson 2012) calls a
//! delay that has not drained for an interval a standing queue. Until these levels' queue next
//! drains, their work waits no longer than the max wait, like everything else, and is refused on
//! arrival when it is not expected to start within it; those already waiting longer are let go
//! at the next dequeue. Under sustained overload the queue never drains; when the overload
//! ends it does, and the next burst is absorbed again.
//!
//! The second of refusals must also be steady — at least one refusal per eight admissions
//! since they began (`Episode::refuses_steadily`) — because nothing but a drained queue lifts
//! the latch, and a closed loop's queue never drains: its population less what runs stands
//! there whatever the policy, and each refusal sends its client straight back. A cold start's
//! handful of queue timeouts (the service estimate still high) latched 64 closed-loop clients
//! in front of 4 workers, whose CRITICAL queue fit their 200 ms deadlines, into refusing half
//! of their CRITICAL requests for the rest of the run (`bench/results/closed64-issue28.md`).
//!
//! Why not the queue's own delay (the oldest CRITICAL waiter past the max wait for a second):
//! tried first, it also fired where CRITICAL is served in time from a longer queue — slow
//! services (500 ms: a slot frees less often than the max wait) and long on/off bursts at 1.2×
//! capacity whose callers' 1 s deadlines absorb them — and bounding those lost CRITICAL work
//! that was being served (issue 28's sweep, R2: 10 cells newly failing).
//!
//! The drain rate: the wait estimate's "a slot frees every mean service / in flight" is
//! Little's law for the slots, from a mean that lags a change of service and a limit that may
//! not be what is running; a request refused on it is refused for good. While these levels'
//! overload is sustained, the estimate uses
//! the measured interval between two dispatches from the queue (an EWMA, gain 1/8 as TCP's
//! smoothed RTT) when that is longer. Only intervals with waiters throughout are measured: a
//! gap in which the queue was empty says how fast work arrived, not how fast slots free.

use std::time::{Duration, Instant};

use super::AdmissionQueue;
use crate::criticality::Criticality;

/// log2 of the inverse gain of the drain-interval EWMA (1/8).
const DRAIN_GAIN_SHIFT: u32 = 3;

/// The classes of the levels that may wait for their deadline (CRITICAL and above).
const DEADLINE_CLASSES: u32 = !((1u32 << (Criticality::Critical.index() * 2)) - 1);

/// The state behind [`AdmissionQueue::sustained`] and [`AdmissionQueue::drain_per_slot`].
#[derive(Debug, Clone, Default)]
pub(super) struct Sustained {
    /// Whether the overload of the deadline-bound levels is sustained.
    sustained: bool,
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
    /// above) is sustained (module docs): then their work waits at most the max wait and is
    /// refused on arrival when it is not expected to start within it. It stops being so once
    /// no such work is queued: their queue drained.
    pub fn sustained(&mut self) -> bool {
        if self.nonempty & DEADLINE_CLASSES == 0 {
            self.sustained.sustained = false;
        }
        self.sustained.sustained
    }

    /// Holds the overload of the deadline-bound levels sustained until their queue next
    /// drains: the controller's word, once it has refused such work for overload for a second
    /// on end (module docs).
    pub fn mark_sustained(&mut self) {
        self.sustained.sustained = true;
    }

    /// Whether the overload is held sustained, without looking at the queue again.
    pub(super) fn was_sustained(&self) -> bool {
        self.sustained.sustained
    }

    /// The measured interval between two dispatches from the queue while waiters remained
    /// (an EWMA); zero before any was measured.
    pub fn drain_per_slot(&self) -> Duration {
        Duration::from_nanos(self.sustained.drain_ns)
    }
}
