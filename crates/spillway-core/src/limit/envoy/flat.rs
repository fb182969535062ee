//! Latency that does not follow the in-flight level is not our queue.
//!
//! Why: the gradient reads latency above minRTT's tolerance as a queue its own requests built,
//! and cuts. When the upstream itself gets slower — half its capacity lost, a slow dependency
//! of its own — every answer is slower at any concurrency, the cuts shorten nothing, and the
//! limit falls below what the offered load needs (Little's law: in flight = rate × latency).
//! A 20-worker, 50 ms upstream that dropped to half speed at half its capacity's load had its
//! limit cut one by one from 22 to 1 over four seconds, with the queue full and requests
//! refused that the unprotected upstream served (issue 28's sweep, R1: −10 pp); live minRTT
//! re-measured the slower upstream only once the limit was down to its floor (`live.rs`).
//!
//! A queue of ours has a signature the slower upstream lacks: a request admitted with `k` of
//! ours in flight waits behind up to `k − 1` of them, so latency rises with the level each
//! request was admitted at (Kendall's rank test, as `levels.rs` applies to the low levels).
//! So while windows stay above tolerance their samples' `(level, latency)` are kept (the
//! latest 64); once at least [`MIN_POINTS`] span levels at least [`MIN_SPREAD`]×
//! apart and show no rise (`z` below [`Z`]), the latency is the upstream's: the baseline is
//! raised to the window's latency (at most doubled, as Envoy's gradient clamp moves nothing by
//! more) instead of cutting. It returns to the measured minRTT as soon as a window is back
//! within that one's tolerance, and is raised at most once until then: a second raise on
//! top of the first would let a queue we cannot see compound.
//!
//! Where it stays off, because the level does not say what waits upstream:
//! - while more than one request in [`MAX_DROPPED_SHARE`] timed out or was abandoned over
//!   the last one to two [`PERIOD_NS`]: the upstream still runs work whose callers left, a
//!   queue no longer counted in flight (a 1-worker, 1 ms upstream at 2× read flat over levels
//!   5–14 with latencies 4–10 ms, and the raise took its CRITICAL success from 94 % to 40 %);
//! - in a window that mostly timed out: its latencies are where callers gave up;
//! - at an upstream whose low levels may already queue (Kendall's `z` of 2 or more among the
//!   live measurement's samples at up to `min_concurrency` in flight, or, once a
//!   measurement has completed, too few of them to tell): fewer free workers than the
//!   window's levels span. Without this a 1-worker, 0.1 ms upstream at 2× read flat now and
//!   then and lost half its goodput.
//!
//! It does run on a provisional minRTT (`live.rs`: no measurement of `request_count`
//! low-concurrency answers has completed), with too few of those answers to test the low
//! levels: that is an upstream whose load kept more than `min_concurrency` in flight from
//! its first seconds on — 20 workers at their capacity's load — where, without the rule, a
//! slower upstream has its limit cut one window at a time though latency is the same at every
//! level (`bench/results/history-issue28.md`). The raise is bounded as ever (at most doubled,
//! once), and a queue of ours still shows in the window's own levels.

use super::levels::LevelFit;

/// Fewest samples to judge by (of the latest 64 the level fit keeps): with 20 a heavy-tailed
/// service's spread hid a queue's rise often enough to raise the baseline at upstreams with no
/// slowdown (issue 28's sweep).
const MIN_POINTS: usize = 40;
/// The highest level must be at least this multiple of the lowest: within a narrower span a
/// queue's rise hides in the service time's spread.
const MIN_SPREAD: u32 = 2;
/// Kendall's `z` below which latency is taken not to rise with the level: no sign of a rise
/// at all, where a queue of ours over a 2× span of levels gives `z` of 3 and more over 40
/// samples.
const Z: f64 = 1.0;

/// The period over which timed-out or abandoned requests are counted (ns).
const PERIOD_NS: u64 = 1_000_000_000;
/// The rule is off while more than one request in this many timed out or was abandoned.
const MAX_DROPPED_SHARE: u64 = 10;

/// The `(level, latency)` pairs of the windows since latency left tolerance, and the share of
/// requests dropped.
#[derive(Debug, Default)]
pub(super) struct WindowLevels {
    /// The latest samples, in the same ring and rank test `levels.rs` uses for the low levels.
    levels: LevelFit,
    /// Requests that timed out or whose callers left, and all requests, in the current period
    /// of [`PERIOD_NS`] and the one before: `[current, previous]`.
    drops: [u32; 2],
    total: [u32; 2],
    /// When the current period began (ns since the origin).
    period_ns: u64,
}

impl WindowLevels {
    /// Keeps one completed sample.
    pub(super) fn record(&mut self, in_flight: usize, rtt_ns: u64) {
        self.levels.record(in_flight.max(1), rtt_ns);
    }

    /// A request timed out or its caller left.
    pub(super) fn dropped(&mut self, now_ns: u64) {
        self.count(now_ns, true);
    }

    /// Counts one request that ended at `now_ns`, dropped or not.
    pub(super) fn count(&mut self, now_ns: u64, dropped: bool) {
        let since = now_ns.saturating_sub(self.period_ns);
        if since >= PERIOD_NS {
            let fresh = since < 2 * PERIOD_NS;
            self.drops = [0, if fresh { self.drops[0] } else { 0 }];
            self.total = [0, if fresh { self.total[0] } else { 0 }];
            self.period_ns = now_ns;
        }
        self.drops[0] = self.drops[0].saturating_add(u32::from(dropped));
        self.total[0] = self.total[0].saturating_add(1);
    }

    /// Forgets the samples (latency is back within tolerance, or a raise used them).
    pub(super) fn clear(&mut self) {
        self.levels.clear();
    }

    /// Whether latency is flat across a wide enough span of levels, with few requests dropped
    /// (module docs).
    pub(super) fn flat(&mut self) -> bool {
        let drops = u64::from(self.drops[0]) + u64::from(self.drops[1]);
        let total = u64::from(self.total[0]) + u64::from(self.total[1]);
        if self.levels.len() < MIN_POINTS || drops * MAX_DROPPED_SHARE > total {
            return false;
        }
        let Some((lo, hi)) = self.levels.span() else {
            return false;
        };
        hi > lo
            && hi >= lo.saturating_mul(MIN_SPREAD)
            && self.levels.rise_z().is_some_and(|z| z < Z)
    }
}

#[cfg(test)]
mod tests;
