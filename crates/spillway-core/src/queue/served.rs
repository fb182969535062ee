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
//! The shares are an exponentially weighted record, per level, of where the slots went while
//! that level had work waiting: to a level above it or to itself (gain 1/16: the last few dozen
//! such dispatches), in fixed point, kept under the queue's lock. Only slots the level
//! contested count. Counting every dispatch made the estimate fulfil itself: a level refused at
//! the door has nothing queued, every dispatch then goes to the levels above, its share falls
//! to nothing, and it is refused at the door again (`spillway demo` with throttling clients:
//! SHEDDABLE, owed 30 % of a 4-worker backend, refused with none of it queued while the backend
//! idled, goodput 89–95 % of capacity at the 10 × jump where 95 % is the target). Before a
//! level's first contested slot its share above is zero (the estimate is the plain one).
//!
//! A record goes stale while its level has nothing waiting: nothing updates it, and if it says
//! the level is starved the level is refused at the door and never waits to update it. So a
//! level with nothing waiting that has seen no contested slot for [`FRESH`] has its arrival
//! judged on the plain estimate: one waits, and what it sees renews the record. Once a second
//! at most — a probe that cannot start waits out its budget, and as a standing rule (one probe
//! whenever nothing waits) that cost slow services their quick refusals (20 workers × 500 ms
//! at 2 ×: the median arrival→refusal 0 → 100 ms, a probe timing out every max wait).
//!
//! Only while a level is being shed (refused for overload within one max wait): the record
//! counts dispatches, and a short burst's queue is served highest level first, so below
//! capacity it credited CRITICAL with most slots though every level was about to be served.
//! Used at all loads, it refused SHEDDABLE at 0.9 × capacity that the backend would have
//! served (issue 28's sweep, R1: 18 cells newly failing, e.g. 100 workers × 1 ms at 0.9 ×,
//! 0 → −0.27 pp). Under sustained overload a level is refused all along, and the share is
//! what it drains at.

use std::time::{Duration, Instant};

use super::{class_of, AdmissionQueue};
use crate::criticality::Criticality;

/// Fixed-point one: all of the slots a level contested.
pub(super) const ONE: u32 = 1 << 16;
/// log2 of the inverse gain: each dispatch moves the record by 1/16.
const GAIN_SHIFT: u32 = 4;
/// The smallest share of the slots a level is assumed to drain at (1/16): a level that has
/// seen none for a while is still served when the levels above it leave a slot, and its
/// estimate stays finite (at most 16 × the plain one).
const MIN_LEFT: u32 = ONE >> 4;
/// How long a level's record is trusted after the last slot it contested (module docs).
const FRESH: Duration = Duration::from_secs(1);

impl<T> AdmissionQueue<T> {
    /// Records that a request of criticality `c` is being dispatched, before it leaves the
    /// queue: for every level with work waiting, whether this slot went above it.
    pub(super) fn note_served(&mut self, now: Instant, c: Criticality) {
        for level in Criticality::ALL {
            if level > c || !self.has_waiting(level) {
                continue;
            }
            self.contested_at[level.index()] = Some(now);
            let above = &mut self.served[level.index()];
            if level < c {
                *above += (ONE - *above) >> GAIN_SHIFT;
            } else {
                *above -= *above >> GAIN_SHIFT;
            }
        }
    }

    /// Whether level `c`'s share of the slots is known now: it has work waiting, or saw a slot
    /// go while it had within `FRESH` (1 s). Otherwise an arrival of it is judged on the plain
    /// estimate (module docs).
    pub fn share_is_current(&self, c: Criticality, now: Instant) -> bool {
        self.has_waiting(c)
            || self.contested_at[c.index()]
                .is_some_and(|t| now.saturating_duration_since(t) < FRESH)
    }

    fn has_waiting(&self, c: Criticality) -> bool {
        let level = 1 << class_of(c, false) | 1 << class_of(c, true);
        self.nonempty & level != 0
    }

    /// The share of the slots that went to levels above `c` while `c` had work waiting, in
    /// `ONE`ths.
    pub(super) fn share_above(&self, c: Criticality) -> u32 {
        self.served[c.index()]
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
        per_slot: Duration,
        shedding: bool,
    ) -> Duration {
        let left = if shedding {
            (ONE - self.share_above(c)).max(MIN_LEFT)
        } else {
            ONE
        };
        let plain = per_slot.saturating_mul(u32::try_from(ahead).unwrap_or(u32::MAX));
        // plain × ONE / left, in nanoseconds (u128: no overflow for any Duration).
        let nanos = plain.as_nanos() * u128::from(ONE) / u128::from(left);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}
