//! `unqueued_floor`: a cut does not take the limit below the in-flight level the upstream was
//! just seen to run without queueing.
//!
//! Why: the gradient judges a window by its median latency, and a window of a few dozen
//! answers from an exponential or skewed service has a median that swings well past the
//! tolerance by chance. Each such window cuts the limit, and a cut below the upstream's
//! workers leaves them idle while requests wait in the proxy: a 20-worker 50 ms service
//! behind 64 closed-loop clients had its limit swing 16–26, with 15–19 workers busy and 17–22
//! requests queued in a third of the samples (issue 28's sweep, R1 −2.35 % of the goodput the
//! same proxy serves with no limit). Nothing in the gradient remembers that 20 in flight ran
//! without queueing a second earlier.
//!
//! The evidence is in `thrash.rs`'s levels: completed requests grouped by the in-flight count
//! they were admitted at, pooled lowest first until each pool holds 100. Below the upstream's
//! workers a level's mean latency is the service time; past them it grows by the queue. The
//! highest level whose pool's mean is within a tenth of the lowest pool's (beyond two standard
//! errors, as `knee.rs` judges a knee) ran unqueued, and a cut keeps the limit at least there.
//! It is only a floor under cuts: the limit never grows because of it.
//!
//! Bounds, each from a way a floor did harm in the sweep (`bench/results/floor-issue28.md`):
//!
//! - At most Little's law's bandwidth-delay product, the best pool's delivery (level / mean
//!   latency) × the unqueued latency × 1.1: a small upstream's pools mix queued and unqueued
//!   requests, and a floor read from them alone held a 1-worker service at 13.
//! - Not below [`CONFOUNDED_BELOW`] (where `thrash.rs` reads level and latency as
//!   confounded, for the same reason).
//! - Not in a window where a tenth or more of the requests were dropped: the callers are
//!   giving up, and the gradient's cut is the way out.
//! - Applied before `throughput_ceiling`, which may always cap below it: a floor that overrode
//!   the ceiling held a thrashing upstream at its old level while it ran ~100 orphaned
//!   requests (goodput 0.654 → 0.068 of capacity).
//! - The levels fade as `thrash.rs`'s do (halved every 2 s): a capacity drop retires the old
//!   levels within seconds (with `knee.rs`'s 30-s groups the floor held the old speed through a
//!   drop: goodput 0.995 → 0.944).
//!
//! The floor is an in-flight level, the limit a ceiling on what every criticality may fill
//! together: the headroom ladder lets SHEDDABLE use only 0.8 of it. As `thrash.rs` does, the
//! level is divided by the share of the limit the closing window used (at least one half), so
//! that all-SHEDDABLE traffic still reaches the level that ran unqueued.
//!
//! On in the default policy, with `knee_cap` (`controller::preset`). Measured alone (issue
//! 28's sweep, five seeds, against the same policy without it): failing R1 cells 89 → 79,
//! 91 → 78, 95 → 84, 93 → 83, 97 → 80; R2's figure +0.0016 on average (four standard errors);
//! R3's mean unchanged but 0–12 more cells failing per seed, mostly bimodal services in a
//! capacity drop: the floor holds the level through the drop, the throughput ceiling then
//! compares the old levels' fast answers with the held level's slow ones and caps below the
//! workers. And a level read while the limit never went below the knee is itself queued: in
//! front of a saturated thrashing upstream the floor held the limit at 21–33 for 20 workers
//! where the ceiling alone holds 19–24 (`bench/results/floor-issue28.md`); the sweep's `c=20
//! mean=50ms lognormal timeout=20x offered=2x crit=0.8 slowdown` ran at 35 in flight for its
//! 20 workers, the floor read from a lowest pool at 33. Three bounds tried against that — no
//! floor when the lowest pool's mean is past the gradient's tolerance; Little's bound taken on
//! the tolerated latency rather than the lowest pool's; no floor unless the lowest pool is at
//! or below the cut's target — each lifted that cell (CRITICAL 72.9 → 88–96 %) and lost more
//! than it gained over five seeds: the same unproven floor keeps closed loops' limits above
//! their workers through a capacity drop (R1 failing cells +2 to +22 per seed;
//! `bench/results/early-window-issue28.md`).

use super::knee::DELAY_SHARE;
use super::thrash::CONFOUNDED_BELOW;

/// Windows with at least this share of their requests dropped hold no floor.
const DROPPED_SHARE: f64 = 0.1;

/// What the levels say about running unqueued (`ThroughputCeiling::unqueued`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Unqueued {
    /// The highest mean in-flight level of a pool within [`DELAY_SHARE`] of the lowest.
    pub level: f64,
    /// The lowest pool's mean latency plus two standard errors (ns): the unqueued latency.
    pub base_ns: f64,
    /// The best delivery of any pool, level / mean latency (requests per ns).
    pub best_rate: f64,
}

/// The floor under a cut of the limit from `old`, for a window whose largest in-flight count
/// was `peak` and that counted `answered` and `dropped` requests; 0 when there is none. Never
/// above `old` (a floor, not growth) nor `max`.
pub(super) fn floor(
    unqueued: Option<Unqueued>,
    old: usize,
    peak: usize,
    answered: u32,
    dropped: u32,
    max: usize,
) -> usize {
    let Some(u) = unqueued else {
        return 0;
    };
    // Little's law: what the best level delivers, held for the unqueued latency (and a tenth).
    let bdp = (u.best_rate * u.base_ns * (1.0 + DELAY_SHARE)).ceil();
    if !bdp.is_finite() || !u.level.is_finite() {
        return 0;
    }
    // Both finite and non-negative here; `as` saturates.
    let level = (u.level.floor() as usize).min(bdp as usize).min(max);
    let counted = f64::from(answered) + f64::from(dropped);
    if level < CONFOUNDED_BELOW || f64::from(dropped) >= DROPPED_SHARE * counted.max(1.0) {
        return 0;
    }
    if old == 0 {
        return 0;
    }
    // The ladder's share of the limit the window used (`thrash.rs` reads it the same way).
    let share = (peak as f64 / old as f64).clamp(0.5, 1.0);
    ((level as f64 / share).ceil() as usize).min(old)
}

#[cfg(test)]
mod tests;
