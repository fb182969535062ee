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

/// Levels with fewer completed requests are not judged: with a coefficient of variation of 1
/// (exponential service), 100 samples know the mean to ±20 % (two standard errors).
pub(super) const MIN_SAMPLES: u64 = 100;
/// Queueing in the upstream tolerated as a share of `R₀` (BBR's `cwnd_gain` is 2 for its
/// ack aggregation; an upstream's FIFO is what this project protects CRITICAL work from).
pub(super) const DELAY_SHARE: f64 = 0.1;

/// Groups per doubling of the in-flight count.
const PER_DOUBLING: f64 = 4.0;
/// Groups kept: in-flight counts up to 2^24.
const GROUPS: usize = 96;

/// One in-flight level's latencies.
#[derive(Debug, Default, Clone, Copy)]
struct Group {
    n: f64,
    sum: f64,
    sum_sq: f64,
    in_flight: f64,
}

impl Group {
    /// Mean, standard error of the mean and mean in-flight level, once there are enough.
    fn stats(&self) -> Option<(f64, f64, f64)> {
        if self.n < MIN_SAMPLES as f64 {
            return None;
        }
        let mean = self.sum / self.n;
        let var = (self.sum_sq / self.n - mean * mean).max(0.0);
        let se = (var / self.n).sqrt();
        (mean.is_finite() && se.is_finite() && mean > 0.0).then_some((
            mean,
            se,
            self.in_flight / self.n,
        ))
    }
}

/// Latency by in-flight level.
#[derive(Debug)]
pub(super) struct KneeCap {
    groups: Box<[Group; GROUPS]>,
    /// When the groups were last halved (ns since the origin).
    aged_ns: u64,
    interval_ns: u64,
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
            groups: Box::new([Group::default(); GROUPS]),
            aged_ns: 0,
            interval_ns: interval_ns.max(1),
            caps: 0,
            base_ns: 0.0,
        }
    }

    /// One completed (not dropped) request, admitted with `in_flight` in flight.
    pub(super) fn record(&mut self, now_ns: u64, in_flight: usize, rtt_ns: u64) {
        if now_ns.saturating_sub(self.aged_ns) >= self.interval_ns {
            self.aged_ns = now_ns;
            for g in self.groups.iter_mut() {
                g.n /= 2.0;
                g.sum /= 2.0;
                g.sum_sq /= 2.0;
                g.in_flight /= 2.0;
            }
        }
        let level = in_flight.max(1) as f64;
        let i = ((level.log2() * PER_DOUBLING) as usize).min(GROUPS - 1);
        let x = rtt_ns as f64;
        let g = &mut self.groups[i];
        g.n += 1.0;
        g.sum += x;
        g.sum_sq += x * x;
        g.in_flight += level;
    }

    /// Forgets every level (the upstream was re-measured).
    pub(super) fn forget(&mut self) {
        self.groups.fill(Group::default());
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
        let mut pools = self.groups.iter().scan(Group::default(), |pool, g| {
            pool.n += g.n;
            pool.sum += g.sum;
            pool.sum_sq += g.sum_sq;
            pool.in_flight += g.in_flight;
            Some(pool.stats().inspect(|_| *pool = Group::default()))
        });
        let Some((mean0, se0, level0)) = pools.by_ref().flatten().next() else {
            return Verdict::Free;
        };
        let base = mean0 + 2.0 * se0;
        self.base_ns = base;
        let threshold = base * (1.0 + DELAY_SHARE);
        // The highest level seen running unqueued so far.
        let mut unqueued = level0;
        for (mean, se, level) in pools.flatten() {
            if mean - 2.0 * se <= threshold {
                unqueued = level;
                continue;
            }
            let runs = level * base / mean;
            if runs * (1.0 + DELAY_SHARE) < unqueued {
                // Fewer than already ran unqueued: not our queue (module docs).
                return Verdict::Free;
            }
            let cap = (runs * (1.0 + DELAY_SHARE)).max(limit as f64 / 2.0).floor();
            if cap < limit as f64 {
                self.caps += 1;
            }
            return Verdict::Cap(if cap >= 1.0 { cap as usize } else { 1 });
        }
        Verdict::Free
    }
}
