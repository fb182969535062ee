//! The proxy's client throttle in a cell: the proxy keeps one per upstream task and
//! criticality (`upstream.throttle`, core's proxy preset), asks it before an admitted request
//! goes to the task, and settles it when the request's outcome is known.
//!
//! Why modelled: it sits between admission and the task, and what it refuses the admission
//! limit learns as drops. When it counted requests in flight as refusals, a real 1000-worker,
//! 500 ms upstream's cold start had ~120 requests refused locally and its limit halved four
//! times (82–85 % served in time, where the unprotected upstream served 99.3 %), and this
//! sweep, without the throttle, showed 99 % for the same cell (`bench/results/
//! throttle-outstanding-issue28.md`). The sweep's backends never refuse, so a throttle right
//! about requests in flight refuses nothing here; one that is not shows.

use super::*;

impl Sim<'_> {
    /// The throttle request `id` goes through, with the proxy in front.
    fn throttle(&self, id: u32) -> Option<&AdaptiveThrottle<SimRandom>> {
        let critical = usize::from(self.reqs[id as usize].critical);
        self.throttles.as_ref().map(|t| &t[critical])
    }

    /// Whether the throttle refuses admitted request `id` locally, before it reaches the task.
    pub(super) fn throttled(&self, id: u32) -> bool {
        let now = self.clock.at(self.now);
        self.throttle(id)
            .is_some_and(|t| t.try_acquire(now).is_err())
    }

    /// Refused by the throttle: the proxy answers 503 and releases the permit as a drop
    /// (`forward::verdict`, `Ended::Throttled`).
    pub(super) fn refuse_throttled(&mut self, id: u32, held: Held) {
        let r = &mut self.reqs[id as usize];
        let was_queued = matches!(r.held, Held::Queued(_) | Held::Waiting);
        r.held = held;
        if was_queued {
            self.left_queue(id);
        }
        self.release(id, Outcome::Dropped);
        self.refuse_as(id, "throttled");
    }

    /// Request `id`'s outcome at the task is known: `accepted` unless the proxy's own upstream
    /// timeout fired (a caller's deadline or departure is an accept, as in the proxy).
    pub(super) fn settle_throttle(&self, id: u32, accepted: bool) {
        let now = self.clock.at(self.now);
        if let Some(t) = self.throttle(id) {
            if accepted {
                t.record_accept(now);
            }
            t.settle();
        }
    }
}
