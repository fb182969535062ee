//! `knee_cap`: stop where admitting more only adds queueing in the upstream.
//!
//! Why: the gradient tolerates a window's median latency up to `minRTT·(1 + buffer)` or
//! `minRTT` plus a share of the callers' budget (1.5 ×, and up to 10 ms, in the default
//! policy, so that a shared host's jitter does not shrink the limit). On a large service that
//! tolerance is a queue *in the upstream's own FIFO*, where a CRITICAL request waits behind
//! SHEDDABLE ones the proxy would have held back: with 1000 workers × 10 ms and callers
//! allowing 100 ms the gradient held 2000 in flight (issue 28: once the limit's ceiling was
//! raised from 1000, CRITICAL success at 1000 workers fell from 99.5 to 95.8 % at 10×). Past
//! the knee, admitting more raises the in-flight count without raising throughput, and by
//! Little's law (`L = X·R`) the concurrency that keeps the upstream busy is `X·R₀`, with
//! `R₀` the latency of unqueued requests — BBR's bound of bandwidth × `RTprop` on the data
//! in flight (Cardwell et al., "BBR: Congestion-Based Congestion Control", ACM Queue 2016).
//!
//! How, without knowing the upstream: completed requests are grouped by how many were in
//! flight when they were admitted ([`Sample::in_flight`](crate::limit::Sample), four groups
//! per doubling), and each group keeps the count, mean and variance of its latency. A group
//! is kept over time, not per sampling window: a window lasting one round trip sees only the
//! requests that finished fast, and during slow start that made its mean half the service
//! time. Neighbouring groups are pooled, lowest first, until each pool holds at least
//! [`MIN_SAMPLES`] requests (slow start passes each level below the knee once or twice). Then:
//!
//! - `R₀` is the lowest pool's mean plus two standard errors;
//! - the first pool whose mean, less two standard errors, exceeds `R₀·(1 + DELAY_SHARE)` is
//!   queued: by Little's law its in-flight level `L` over its latency `R` runs `c = L·R₀/R`
//!   at once, and the limit is capped at `c·(1 + DELAY_SHARE)` — a tenth of a service time of
//!   queueing in the upstream — by at most half per window (the gradient's steepest cut);
//! - unless that cap is below the in-flight level of a pool that ran unqueued: then the latency
//!   rose for another reason (the upstream or the host got slower: a capacity drop, a busy
//!   CPU — what the gradient's slack is for), no cap applies and the gradient decides, as it
//!   did before this rule.
//!
//! The groups halve their counts every `interval` (30 s in the default policy), so old levels
//! fade, and are cleared when the live minRTT finds the upstream itself slower (`live.rs`).
//!
//! When it applies (`window.rs`): only while the admission controller reports some level's
//! overload sustained (`Limit::set_overloaded`), and as the lowest level's share of the limit
//! (`Limit::set_lowest_share`): the limit is the cap ÷ that share, so the lowest level may run what the upstream runs at
//! once and the levels above it keep their headroom on top. Under sustained overload the
//! upstream's FIFO is where CRITICAL would wait behind work the proxy holds back; below it, a
//! queue moved from the upstream into the proxy meets the proxy's deadlines and criticality
//! order, and refused work the upstream's FIFO would have served (issue 28's sweep, capped
//! always: 6–14 more R1 cells failing at seeds 28–29; `bench/results/knee-ladder-issue28.md`).
//! A limiter used without a controller is never told of overload: the cap stays off.

use super::by_level::{LatencyByLevel, Pool};

/// Levels with fewer completed requests are not judged: with a coefficient of variation of 1
/// (exponential service), 100 samples know the mean to ±20 % (two standard errors).
pub(super) const MIN_SAMPLES: u64 = 100;
/// Queueing in the upstream tolerated as a share of `R₀` (BBR's `cwnd_gain` is 2 for its
/// ack aggregation; an upstream's FIFO is what this project protects CRITICAL work from).
pub(super) const DELAY_SHARE: f64 = 0.1;

/// Groups per doubling of the in-flight count.
const PER_DOUBLING: usize = 4;
/// Groups kept: in-flight counts up to 2^24.
const GROUPS: usize = 96;

/// Latency by in-flight level.
#[derive(Debug)]
pub(super) struct KneeCap {
    levels: LatencyByLevel<GROUPS, PER_DOUBLING>,
    caps: u64,
    base_ns: f64,
}

/// What the groups say about the limit at a window's close.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Verdict {
    /// No queued level known: the gradient decides alone.
    Free,
    /// Past the knee: the limit may be at most this.
    Cap(usize),
}

impl KneeCap {
    /// Groups that halve every `interval_ns`.
    pub(super) fn new(interval_ns: u64) -> Self {
        KneeCap {
            levels: LatencyByLevel::new(interval_ns),
            caps: 0,
            base_ns: 0.0,
        }
    }

    /// One completed (not dropped) request, admitted with `in_flight` in flight.
    pub(super) fn record(&mut self, now_ns: u64, in_flight: usize, rtt_ns: u64) {
        self.levels.record(now_ns, in_flight, rtt_ns);
    }

    /// Forgets every level (the upstream was re-measured).
    pub(super) fn forget(&mut self) {
        self.levels.clear();
        self.base_ns = 0.0;
    }

    /// Caps applied so far.
    pub(super) fn caps(&self) -> u64 {
        self.caps
    }

    /// `R₀` in nanoseconds as last computed (0 = not known).
    pub(super) fn base_nanos(&self) -> f64 {
        self.base_ns
    }

    /// The cap for a window closing at `limit`.
    pub(super) fn close(&mut self, limit: usize) -> Verdict {
        // Neighbouring levels pooled, lowest first, until each pool holds enough requests:
        // slow start passes each level below the knee only once or twice, so the unqueued
        // evidence is thin per level and plentiful together.
        let Some(run) = self.levels.unqueued_run(MIN_SAMPLES as f64, DELAY_SHARE) else {
            return Verdict::Free;
        };
        let base = run.base_ns;
        self.base_ns = base;
        // The first pool past the levels seen running unqueued.
        let Some(Pool { mean, level, .. }) = run.past else {
            return Verdict::Free;
        };
        let runs = level * base / mean;
        if runs * (1.0 + DELAY_SHARE) < run.level {
            // Fewer than already ran unqueued: not our queue (module docs).
            return Verdict::Free;
        }
        let cap = (runs * (1.0 + DELAY_SHARE)).max(limit as f64 / 2.0).floor();
        if cap < limit as f64 {
            self.caps += 1;
        }
        Verdict::Cap(if cap >= 1.0 { cap as usize } else { 1 })
    }
}
