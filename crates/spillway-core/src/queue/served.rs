//! How the slots that free up are shared between criticality levels, for the wait estimates.
//!
//! Why: a request's wait is not just the entries ahead of it. More critical work that arrives
//! *after* it is served first too, so a level's queue drains only at the share of the slots
//! left over by the levels above it. Estimating a SHEDDABLE arrival's wait as `ahead × the
//! time between two slots freeing` (what every level drains at when it has the slots to
//! itself) admitted it to a queue that CRITICAL arrivals kept jumping; it then waited out its
//! budget or was pushed out, after tens of milliseconds (issue 28's sweep, R4a: at 2× with
//! CRITICAL at 0.8 of capacity, 20 workers × 50 ms, the median arrival→refusal was 12–21 ms,
//! and 100 workers × 10 ms up to 38 ms). With the level's drain rate `1 − share above`
//! the wait estimate is `ahead × per slot / (1 − share above)`, and the arrival is refused at
//! the door when that does not fit its budget.
//!
//! This is DAGOR's observation (Zhou et al., "Overload Control for Scaling WeChat
//! Microservices", SoCC 2018, §4.2: the admission level follows the queueing time, and what
//! each priority gets is what the ones above leave) applied per request: instead of a level
//! threshold moved in steps, each arrival's expected wait is judged against its own budget.
//!
//! The shares are an exponentially weighted record of which level each dequeue served (gain
//! 1/16: the last few dozen dispatches), in fixed point, kept under the queue's lock. Only
//! dispatches from the queue count: while nobody waits, admissions take the fast path and the
//! estimate is not needed. Before the first dispatch every share is zero: no level is assumed
//! to take anything (the estimate is the plain one).
//!
//! Only while a level is being shed (refused for overload within one max wait): the record
//! counts dispatches, and a short burst's queue is served highest level first, so below
//! capacity it credited CRITICAL with most slots though every level was about to be served.
//! Used at all loads, it refused SHEDDABLE at 0.9 × capacity that the backend would have
//! served (issue 28's sweep, R1: 18 cells newly failing, e.g. 100 workers × 1 ms at 0.9 ×,
//! 0 → −0.27 pp). Under sustained overload a level is refused all along, and the share is
//! what it drains at.

use super::AdmissionQueue;
use crate::criticality::Criticality;

/// Fixed-point one: the shares sum to about this once dispatches have filled the record.
pub(super) const ONE: u32 = 1 << 16;
/// log2 of the inverse gain: each dispatch moves the record by 1/16.
const GAIN_SHIFT: u32 = 4;
/// The smallest share of the slots a level is assumed to drain at (1/16): a level that has
/// seen none for a while is still served when the levels above it leave a slot, and its
/// estimate stays finite (at most 16 × the plain one).
const MIN_LEFT: u32 = ONE >> 4;

impl<T> AdmissionQueue<T> {
    /// Records that a request of criticality `c` was dispatched.
    pub(super) fn note_served(&mut self, c: Criticality) {
        for s in &mut self.served {
            *s -= *s >> GAIN_SHIFT;
        }
        self.served[c.index()] += ONE >> GAIN_SHIFT;
    }

    /// The share of recent dispatches that went to levels above `c`, in `ONE`ths.
    pub(super) fn share_above(&self, c: Criticality) -> u32 {
        self.served[c.index() + 1..].iter().sum::<u32>().min(ONE)
    }

    /// The expected wait of a request of criticality `c` with `ahead` entries to be served
    /// before it, when a slot frees every `per_slot`. While some level is being shed
    /// (`shedding`: refused for overload lately), those entries drain at the share of the
    /// slots the levels above `c` leave (module docs), at least `1/16` of them; otherwise at
    /// every slot (the plain estimate).
    pub fn expected_wait(
        &self,
        c: Criticality,
        ahead: usize,
        per_slot: std::time::Duration,
        shedding: bool,
    ) -> std::time::Duration {
        let left = if shedding {
            (ONE - self.share_above(c)).max(MIN_LEFT)
        } else {
            ONE
        };
        let plain = per_slot.saturating_mul(u32::try_from(ahead).unwrap_or(u32::MAX));
        // plain × ONE / left, in nanoseconds (u128: no overflow for any Duration).
        let nanos = plain.as_nanos() * u128::from(ONE) / u128::from(left);
        std::time::Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}
