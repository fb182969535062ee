//! minRTT at one request in flight, when the low-concurrency samples hold a queue.
//!
//! Why: live minRTT (`live.rs`) is the median of answers admitted with at most
//! `min_concurrency` (5) in flight — latency without a queue at an upstream with at least that
//! many workers. At a smaller upstream the higher of those levels are a queue in the upstream
//! itself: at one worker a request admitted with `k` in flight waits for `k − 1` others, and
//! the median came out at 3.6–4.7 ms for a 1 ms service (issue 28, `policy6`). Judged against
//! that minRTT and its 1.5 × tolerance, four or five requests queued at the worker passed for
//! calm, the limit held there, and callers allowing five service times timed out while
//! HAProxy with a cap of one (the workers) served their CRITICAL work ahead of the rest.
//!
//! So the measurement's samples keep the in-flight level they were admitted at, and when
//! latency rises with that level — Kendall's rank test, `z ≥ 4` (with ties in the level
//! accounted for), which an upstream with workers to spare at every low level passes by
//! chance about once in 30,000 measurements — minRTT is the median latency a Theil–Sen fit
//! gives at one in flight: what a measurement pinned at one request would have seen. Ranks
//! and medians of pairwise slopes, not least squares: a bimodal service's rare slow answers
//! would otherwise make or break the slope on their own. An upstream with workers for every
//! low level shows no such slope and keeps the plain median.
//!
//! The fit is a hockey stick, not a straight line: latency is flat up to the upstream's
//! workers and rises past them, and a line through both parts lies below the flat one at one
//! in flight. At a 2-worker, 40 ms ± 50 % service the line gave 20–34 ms against the 40 ms
//! its answers alone took; the gradient's tolerance then sat inside the spread of a window's
//! median at one or two in flight, and windows of a few answers cut the limit one by one to
//! 1, a worker idle for up to half a second (`spillway demo --quick`: 25–37 served in a
//! second of 50). So each number of free workers from 1 (the line) up to the highest level
//! seen is fitted — flat up to it, Theil–Sen slope past it — and the fit with the smallest
//! sum of absolute deviations says; both shapes have two parameters, so neither is favoured.
//!
//! Below the lowest level sampled the samples say nothing: every stick flat up to a `free` at
//! or below it fits alike (the same slope, shifted), and the first of those ties, the straight
//! line, stands — the lowest reading. 4 workers × 40 ms seen at 4 and 5 in flight answer like
//! 1 worker × 10 ms (40 ms at 4, 50 at 5, the same throughput); only answers below them tell
//! which. So a cut made on a minRTT read from samples that never reached one in flight stops
//! one level below the lowest seen ([`cut_floor`]) until answers there measure again: a
//! 1-worker upstream comes down a level per measurement, 4 workers lose one of theirs until
//! the next. Without the stop the demo's 4 workers (uniform 20–60 ms) seen at 4–5 under
//! overload read 20.4 ms at one in flight, and the gradient cut the limit 5 → 1 in four
//! windows with the workers idle (`spillway sim --demo-seeds 500`: the 2× level missed its
//! goodput target in 34 draws, 27 with the stop). Taking the last tie instead (no queue below
//! what was seen) kept a 1-worker service's queue of four at its worker (issue 28's sweep,
//! 1-worker cells: R2 −0.013), and so did extrapolating one level only (the fit then rarely
//! clears the percentile by the tolerance). Remembering the workers a probe found, so as not
//! to probe again once its answers leave the 64 samples kept, helped the demo more (20 draws)
//! and cost 1-worker cells, whose noisy levels read as flat now and then
//! (`bench/results/demo-seeds-issue28.md`).

/// Fewer samples than this make no test (the level's effect is not told from noise).
const MIN_POINTS: usize = 10;
/// The samples the fit looks at: the latest, across measurements (about two and a half of
/// the preset's 25), so that a slope of the size a 1-worker exponential service shows is
/// told from chance at `z ≥ 4` (the test's `z` grows with the root of the count). The fit
/// is quadratic in them.
const MAX_POINTS: usize = 64;
/// The most workers a fit looks for: levels above are always taken as queued (the fit is
/// repeated for each, and live minRTT's low levels are 5 in the zero-config preset).
const MAX_FREE: u32 = 8;
/// Kendall's `z` above which latency is taken to rise with the level. At 3 (one chance in
/// 700 per measurement) a 20-worker lognormal service at half its capacity, which measures
/// every second or so, once read a slope into its troughs over issue 28's sweep and cut its
/// limit from 42 to 8 (R1: −0.99 pp).
const Z: f64 = 4.0;

/// The limit under a cut made on a minRTT that a fit read from samples whose lowest in-flight
/// level was `lowest` (module docs): low enough for the lowest criticality to run one level
/// below them, and no lower until answers there say more. `peak` of `old` is the
/// share of the limit the closing window used, which the headroom ladder gives that
/// criticality (at least one half; `floor.rs` reads it the same way). 0 when the fit saw one in
/// flight (nothing was extrapolated); never above `old`.
pub(super) fn cut_floor(lowest: u32, old: usize, peak: usize) -> usize {
    if lowest <= 1 || old == 0 {
        return 0;
    }
    let share = (peak as f64 / old as f64).clamp(0.5, 1.0);
    ((f64::from(lowest - 1) / share).ceil() as usize).min(old)
}

/// The latest `(in-flight level, latency)` pairs, and the fit's
/// scratch space: allocated once, so that admitting and releasing never allocate.
#[derive(Debug)]
pub(super) struct LevelFit {
    /// A ring of the latest samples once full; `next` is the oldest.
    points: Vec<(u32, u64)>,
    next: usize,
    slopes: Vec<f64>,
    scratch: Vec<f64>,
}

impl Default for LevelFit {
    fn default() -> Self {
        LevelFit {
            points: Vec::with_capacity(MAX_POINTS),
            next: 0,
            slopes: Vec::with_capacity(MAX_POINTS * (MAX_POINTS - 1) / 2),
            scratch: Vec::with_capacity(MAX_POINTS),
        }
    }
}

impl LevelFit {
    /// Keeps one low-concurrency sample (the latest [`MAX_POINTS`]).
    pub(super) fn record(&mut self, in_flight: usize, rtt_ns: u64) {
        let p = (u32::try_from(in_flight).unwrap_or(u32::MAX), rtt_ns);
        if self.points.len() < MAX_POINTS {
            self.points.push(p);
        } else {
            self.points[self.next] = p;
            self.next = (self.next + 1) % MAX_POINTS;
        }
    }

    /// Forgets every sample (the upstream changed, or the samples are too old to say what
    /// it is now).
    pub(super) fn clear(&mut self) {
        self.points.clear();
        self.next = 0;
    }

    /// The median latency at one request in flight (ns), when latency rises with the
    /// in-flight level beyond chance; `None` when it does not (or too few samples say).
    /// Never below the fastest sample.
    pub(super) fn at_one(&mut self) -> Option<f64> {
        if self.rise_z()? < Z {
            return None;
        }
        self.fit_at_one()
    }

    /// The best fit's median latency at one request in flight (ns), whatever the rank test
    /// says; `None` with fewer than [`MIN_POINTS`] samples or no rising fit. Never below the
    /// fastest sample. Callers ask the test first ([`at_one`](Self::at_one) at `z ≥ 4`).
    pub(super) fn fit_at_one(&mut self) -> Option<f64> {
        if self.points.len() < MIN_POINTS {
            return None;
        }
        let top = self.points.iter().map(|p| p.0).max()?.min(MAX_FREE + 1);
        let mut best: Option<(f64, f64)> = None;
        // `free`: the highest level that ran without a queue; 1 is the straight line.
        for free in 1..top {
            match (self.hockey_stick(free), best) {
                (Some(fit), Some((_, cost))) if fit.1 < cost => best = Some(fit),
                (Some(fit), None) => best = Some(fit),
                _ => {}
            }
        }
        let fastest = self.points.iter().map(|p| p.1).min()? as f64;
        best.map(|(at_one, _)| at_one.max(fastest))
    }

    /// How many samples are kept.
    pub(super) fn len(&self) -> usize {
        self.points.len()
    }

    /// The lowest and highest level among the kept samples (`None` when there are none).
    pub(super) fn span(&self) -> Option<(u32, u32)> {
        let lo = self.points.iter().map(|p| p.0).min()?;
        let hi = self.points.iter().map(|p| p.0).max()?;
        Some((lo, hi))
    }

    /// Kendall's `z` of latency on the level over the kept samples; `None` with fewer than
    /// [`MIN_POINTS`].
    pub(super) fn rise_z(&mut self) -> Option<f64> {
        (self.points.len() >= MIN_POINTS).then(|| kendall_z(&self.points, &mut self.scratch))
    }

    /// The Theil–Sen fit of latency flat up to level `free` and rising past it — its value at
    /// one in flight and its sum of absolute residuals — or `None` if it does not rise.
    fn hockey_stick(&mut self, free: u32) -> Option<(f64, f64)> {
        let past = |x: u32| f64::from(x.saturating_sub(free));
        let slopes = &mut self.slopes;
        slopes.clear();
        for (i, &(xi, yi)) in self.points.iter().enumerate() {
            for &(xj, yj) in &self.points[i + 1..] {
                let dx = past(xj) - past(xi);
                if dx != 0.0 {
                    slopes.push((yj as f64 - yi as f64) / dx);
                }
            }
        }
        let slope = median(slopes)?;
        if slope <= 0.0 {
            return None;
        }
        let intercepts = &mut self.scratch;
        intercepts.clear();
        intercepts.extend(self.points.iter().map(|&(x, y)| y as f64 - slope * past(x)));
        let flat = median(intercepts)?;
        let cost = self
            .points
            .iter()
            .map(|&(x, y)| (y as f64 - flat - slope * past(x)).abs())
            .sum();
        Some((flat, cost))
    }
}

/// Kendall's rank-correlation `z` of latency on the in-flight level over `points`: S under
/// independence over its standard deviation, corrected for ties in the level (latencies in
/// ns hardly tie): Var S = [n(n−1)(2n+5) − Σ t(t−1)(2t+5)] / 18 over the level's groups.
/// 0 when there is nothing to rank (one level).
pub(super) fn kendall_z(points: &[(u32, u64)], scratch: &mut Vec<f64>) -> f64 {
    let mut s: i64 = 0;
    for (i, &(xi, yi)) in points.iter().enumerate() {
        for &(xj, yj) in &points[i + 1..] {
            if xi == xj {
                continue;
            }
            // Concordant pairs count +1, discordant −1, equal latencies 0.
            let d = (i64::from(xj) - i64::from(xi)).signum() * (yj.cmp(&yi) as i64);
            s += d;
        }
    }
    let nf = points.len() as f64;
    let mut var = nf * (nf - 1.0) * (2.0 * nf + 5.0);
    scratch.clear();
    scratch.extend(points.iter().map(|p| f64::from(p.0)));
    scratch.sort_unstable_by(f64::total_cmp);
    for group in scratch.chunk_by(|a, b| a == b) {
        let t = group.len() as f64;
        var -= t * (t - 1.0) * (2.0 * t + 5.0);
    }
    var /= 18.0;
    if var <= 0.0 {
        return 0.0;
    }
    s as f64 / var.sqrt()
}

/// The median of `v` (the mean of the middle two for an even count); `None` when empty.
fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    // Selection, not a sort: the fit takes a median of up to 2,016 slopes per candidate, under
    // the limit's lock.
    let (m, odd) = (v.len() / 2, v.len() % 2 == 1);
    let (below, &mut upper, _) = v.select_nth_unstable_by(m, f64::total_cmp);
    Some(if odd {
        upper
    } else {
        let lower = below.iter().copied().max_by(f64::total_cmp)?;
        (lower + upper) / 2.0
    })
}

#[cfg(test)]
mod tests;
