//! Latency by the in-flight level a request was admitted at: the evidence `knee.rs` and
//! `thrash.rs` judge.
//!
//! Why kept across windows and grouped on a log scale: a sampling window lasting one round trip
//! sees only the requests that finished fast, and slow start passes each level below a knee
//! only once or twice, so a level is judged on what it gathered over seconds, and
//! neighbouring levels are pooled until each pool holds enough requests. Why halving: a level
//! no longer visited (the limit was capped below it, the upstream changed) must fade, or old
//! evidence would decide forever.

/// One in-flight level's latencies: count, sum and sum of squares (ns), and the sum of the
/// levels themselves (a group spans a range of levels); and, apart, the requests whose callers
/// gave up: their count and the sum of the time they held a slot (ns).
#[derive(Debug, Default, Clone, Copy)]
struct Group {
    n: f64,
    sum: f64,
    sum_sq: f64,
    level: f64,
    gone: f64,
    gone_sum: f64,
}

impl Group {
    fn add(&mut self, g: &Group) {
        self.n += g.n;
        self.sum += g.sum;
        self.sum_sq += g.sum_sq;
        self.level += g.level;
        self.gone += g.gone;
        self.gone_sum += g.gone_sum;
    }

    fn halve(&mut self) {
        self.n /= 2.0;
        self.sum /= 2.0;
        self.sum_sq /= 2.0;
        self.level /= 2.0;
        self.gone /= 2.0;
        self.gone_sum /= 2.0;
    }

    /// Mean latency, its standard error and the mean level, once `min_samples` are in.
    fn stats(&self, min_samples: f64) -> Option<Pool> {
        if self.n < min_samples {
            return None;
        }
        let mean = self.sum / self.n;
        let var = (self.sum_sq / self.n - mean * mean).max(0.0);
        let se = (var / self.n).sqrt();
        (mean.is_finite() && se.is_finite() && mean > 0.0).then_some(Pool {
            mean,
            se,
            level: self.level / self.n,
            held_mean: (self.sum + self.gone_sum) / (self.n + self.gone),
            answered_share: self.n / (self.n + self.gone),
        })
    }
}

/// Neighbouring levels pooled until they held enough requests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Pool {
    /// Mean latency (ns).
    pub(super) mean: f64,
    /// Standard error of that mean (ns).
    pub(super) se: f64,
    /// Mean in-flight level of the pooled requests.
    pub(super) level: f64,
    /// Mean time a request held its slot (ns), the answered and those given up on alike: by
    /// Little's law the level over it is the rate slots turn over.
    pub(super) held_mean: f64,
    /// The share of those requests that were answered.
    pub(super) answered_share: f64,
}

/// The run of pools, from the lowest up, whose mean latency is within a share of the lowest
/// pool's (beyond two standard errors of each): the levels seen running unqueued.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct UnqueuedRun {
    /// The lowest pool's mean latency plus two standard errors (ns): the unqueued latency.
    pub(super) base_ns: f64,
    /// The mean level of the run's highest pool.
    pub(super) level: f64,
    /// The first pool past the run, if any.
    pub(super) past: Option<Pool>,
}

/// Latencies grouped by in-flight level, `PER_DOUBLING` groups per doubling, `GROUPS` groups
/// (levels beyond the last share it), halved every `half_life_ns`.
#[derive(Debug)]
pub(super) struct LatencyByLevel<const GROUPS: usize, const PER_DOUBLING: usize> {
    groups: Box<[Group; GROUPS]>,
    /// When the groups were last halved (ns since the origin).
    aged_ns: u64,
    half_life_ns: u64,
}

impl<const GROUPS: usize, const PER_DOUBLING: usize> LatencyByLevel<GROUPS, PER_DOUBLING> {
    /// Empty groups that halve every `half_life_ns` (at least 1 ns).
    pub(super) fn new(half_life_ns: u64) -> Self {
        LatencyByLevel {
            groups: Box::new([Group::default(); GROUPS]),
            aged_ns: 0,
            half_life_ns: half_life_ns.max(1),
        }
    }

    /// The group of an in-flight level.
    pub(super) fn group_of(level: usize) -> usize {
        (((level.max(1) as f64).log2() * PER_DOUBLING as f64) as usize).min(GROUPS - 1)
    }

    /// One completed (not dropped) request, admitted with `in_flight` in flight.
    pub(super) fn record(&mut self, now_ns: u64, in_flight: usize, rtt_ns: u64) {
        self.age(now_ns);
        let x = rtt_ns as f64;
        let g = &mut self.groups[Self::group_of(in_flight)];
        g.n += 1.0;
        g.sum += x;
        g.sum_sq += x * x;
        g.level += in_flight.max(1) as f64;
    }

    /// A request admitted with `in_flight` in flight whose caller gave up after `rtt_ns`
    /// (timed out or abandoned): it held a slot that long, and delivered nothing.
    pub(super) fn record_given_up(&mut self, now_ns: u64, in_flight: usize, rtt_ns: u64) {
        self.age(now_ns);
        let g = &mut self.groups[Self::group_of(in_flight)];
        g.gone += 1.0;
        g.gone_sum += rtt_ns as f64;
    }

    /// Halves every group once per half-life.
    fn age(&mut self, now_ns: u64) {
        if now_ns.saturating_sub(self.aged_ns) >= self.half_life_ns {
            self.aged_ns = now_ns;
            for g in self.groups.iter_mut() {
                g.halve();
            }
        }
    }

    /// Forgets every level.
    pub(super) fn clear(&mut self) {
        self.groups.fill(Group::default());
    }

    /// The pools from the lowest level up (`pools(0, min_samples)`) whose mean, less two
    /// standard errors, is within `1 + delay` × the lowest's mean plus two standard errors;
    /// `None` before a pool holds `min_samples`.
    pub(super) fn unqueued_run(&self, min_samples: f64, delay: f64) -> Option<UnqueuedRun> {
        let mut pools = self.pools(0, min_samples);
        let first = pools.next()?;
        let base_ns = first.mean + 2.0 * first.se;
        let threshold = base_ns * (1.0 + delay);
        let mut level = first.level;
        for p in pools {
            if p.mean - 2.0 * p.se > threshold {
                return Some(UnqueuedRun {
                    base_ns,
                    level,
                    past: Some(p),
                });
            }
            level = p.level;
        }
        Some(UnqueuedRun {
            base_ns,
            level,
            past: None,
        })
    }

    /// From group `first` up, lowest first, neighbouring groups pooled until each pool holds
    /// `min_samples` requests; a pool left short at the top is not given.
    pub(super) fn pools(&self, first: usize, min_samples: f64) -> impl Iterator<Item = Pool> + '_ {
        self.pools_in(first, GROUPS, min_samples)
    }

    /// [`pools`](Self::pools) of groups `first..end` only.
    pub(super) fn pools_in(
        &self,
        first: usize,
        end: usize,
        min_samples: f64,
    ) -> impl Iterator<Item = Pool> + '_ {
        self.groups
            .iter()
            .take(end)
            .skip(first)
            .scan(Group::default(), move |pool, g| {
                pool.add(g);
                Some(
                    pool.stats(min_samples)
                        .inspect(|_| *pool = Group::default()),
                )
            })
            .flatten()
    }
}
