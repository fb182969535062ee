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
//! A second signature needs no spread of levels: a **step**. While the limit is not the
//! constraint (at most half of it in use) and windows stay within tolerance, the highest
//! median latency and the highest in-flight peak they showed are kept. When a window then
//! leaves tolerance — its median past that calm latency by more than the buffer — at levels
//! no higher than the calm peak, the latency is the upstream's: our own requests ran at those
//! levels within tolerance in the latest calm run, and a queue of ours grows only with the
//! level. The baseline is raised as above. The run is kept through windows above tolerance,
//! and ends with a window within tolerance that was not calm, or with a raise. A 20-worker,
//! constant 50 ms upstream at half its capacity's load that dropped to half speed answered in 105 ms at levels 20–27, levels its calm windows
//! had reached, and too narrow a span for the rank test: the gradient cut the limit one window
//! at a time from 47 to 10, below the 20 workers the slower upstream needed, for 2.7 s before
//! the rank test had its spread, and refused what the unprotected service served (issue 28's
//! sweep, R1 −2.6 pp; none now). Only after [`MIN_CALM_WINDOWS`] calm windows in a row
//! spanning [`CALM_SPANS`] × their latency: a window's median is biased low while longer
//! requests admitted before it are still running (at a cold start, the first answers of a
//! 500 ms exponential service are its short ones), and a calm of a window or two under
//! overload is such a window, not the upstream's speed. And only windows with at most half
//! the limit in use count as calm: with the limit the constraint, a window within tolerance is
//! one admitted just after a cut, and steps judged against such windows raised the baseline
//! under plain overload (in a variant without this condition, sweep R3 640 → 686 failing
//! cells). The same dropped-share rule applies.
//!
//! A third signature, for loads that never leave the limit free: a **step at a held level**.
//! A closed loop keeps the limit in use, so no window is calm; and where the levels' own
//! evidence holds the limit against the gradient's cuts (`floor.rs`), windows above tolerance
//! leave it where it is, window after window. A queue of ours at a given level is the same
//! queue whenever that level is held, so such a run's latency is what the level gives: when
//! [`HELD_STEPS`] windows in a row are past the run's latency (the median of its window
//! medians) by more than the buffer, at levels no higher than the run held, the upstream got
//! slower. The baseline is raised by as much as the held level slowed (its latency held a
//! queue of ours; at most doubled, once, as above), and while the raise stands the limit does
//! not grow past where it was held: the queue was ours and stays the size it was. Windows past
//! the run's latency neither join the run nor end it; a window that changes the limit
//! otherwise ends it. A 20-worker bimodal upstream (95 % at 25.6 ms) behind 64 closed-loop
//! clients, held at 29 in flight by the floor, slowed to half speed for 12 s: every fast
//! answer took 51.5 ms, twice minRTT at any level, and the gradient cut the limit one window
//! at a time from 18 to 11, with 20 workers to feed (issue 28's sweep, seed 28: goodput
//! −21.6 % of the same proxy with no limit; −0.10 % with the rule).
//!
//! Stricter than the other two, it is off while any request was given up on over the last one
//! to two [`PERIOD_NS`]: a request whose caller left still runs upstream, so the same level of
//! ours is then more work there, and a held level's latency rises with the work left behind —
//! in front of an upstream that slows with what it holds (`slowdown` in the sweep, 5 service
//! times allowed) the rule fired on that rise and goodput fell from 362 to 277/s, where cuts
//! were what kept it. Without the growth cap, a run of slow answers of a bimodal service
//! (a few 512 ms requests on the workers at once, a passing loss of capacity) read as a step
//! let the limit grow from 29 to 44 in front of a thrashing upstream (308 → 286/s).
//!
//! It does run on a provisional minRTT (`live.rs`: no measurement of `request_count`
//! low-concurrency answers has completed), with too few of those answers to test the low
//! levels: that is an upstream whose load kept more than `min_concurrency` in flight from
//! its first seconds on — 20 workers at their capacity's load — where, without the rule, a
//! slower upstream has its limit cut one window at a time though latency is the same at every
//! level (`bench/results/history-issue28.md`). The raise is bounded as ever (at most doubled,
//! once), and a queue of ours still shows in the window's own levels.
//!
//! Not during slow start, which neither keeps samples nor raises: the limit ramps then, so the
//! level a request was admitted at follows the time, and a window sees of the latest levels only
//! the answers that came back fast — latency reads flat over a queue the ramp itself built. A
//! 100-worker, 1 ms exponential upstream at 10 × its capacity was raised to twice its
//! provisional minRTT 5 ms into its start, with 285 in flight; slow start, held on that
//! provisional minRTT up to twice its tolerance (`window.rs`), then kept 430 in flight for the
//! whole run, a 3.3 ms queue for callers allowing 5 ms (issue 28's sweep: CRITICAL 84 % served,
//! 97 % without the raise). Once slow start ends, the samples from then on are judged as before.

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

/// Calm windows in a row before a step is judged against them.
const MIN_CALM_WINDOWS: u32 = 3;
/// How many times their highest latency the calm windows must span (module docs).
const CALM_SPANS: f64 = 4.0;

/// Window medians a held run keeps: its reference is their median.
const HELD_WINDOWS: usize = 16;
/// Windows in a row past the held run's latency before they count as a step: one window of a
/// few dozen answers of an exponential service passes 1.5 × its median about one time in
/// twenty; three independent ones in a row, about one in ten thousand.
const HELD_STEPS: u32 = 3;

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
    /// The calm windows in a row so far (module docs: a step).
    calm: Option<Calm>,
    /// The windows above tolerance at an unchanged limit, in a row (module docs: a step at a
    /// held level).
    held: Option<Held>,
    /// The limit when a step at a held level raised the baseline: no growth past it while
    /// the raise stands.
    held_limit: Option<usize>,
}

/// Windows above tolerance that left the limit where it was, in a row.
#[derive(Debug, Clone, Copy)]
struct Held {
    /// Their medians (ns), the latest [`HELD_WINDOWS`].
    medians: [f64; HELD_WINDOWS],
    /// How many windows, in all.
    windows: u32,
    /// Their highest in-flight level among the samples they counted.
    peak: usize,
    /// When the first closed (ns since the origin).
    since_ns: u64,
    /// Windows in a row since past [`Held::reference`] by the factor, at levels the run held.
    steps: u32,
    /// The latest window was one of those: it neither joins nor ends the run.
    stepping: bool,
}

impl Held {
    /// The median of the run's window medians (ns).
    fn reference(&self) -> f64 {
        let n = (self.windows as usize).min(HELD_WINDOWS);
        let mut m = self.medians;
        let m = &mut m[..n];
        m.sort_unstable_by(f64::total_cmp);
        m[n / 2]
    }
}

/// Windows within tolerance while at most half the limit was in use, in a row.
#[derive(Debug, Clone, Copy)]
struct Calm {
    /// Their highest median latency (ns).
    latency_ns: f64,
    /// Their highest in-flight level among the samples they counted.
    peak: usize,
    /// How many.
    windows: u32,
    /// When the first closed (ns since the origin).
    since_ns: u64,
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

    /// A window closed within tolerance, uncensored, with at most half the limit in use:
    /// `latency_ns` its median, `peak` the highest level among the samples it counted.
    pub(super) fn calm_window(&mut self, now_ns: u64, latency_ns: f64, peak: usize) {
        let c = self.calm.get_or_insert(Calm {
            latency_ns,
            peak,
            windows: 0,
            since_ns: now_ns,
        });
        c.latency_ns = c.latency_ns.max(latency_ns);
        c.peak = c.peak.max(peak);
        c.windows = c.windows.saturating_add(1);
    }

    /// A window within tolerance that was not calm (censored, or the limit in use), or a
    /// raise that used the run: the calm run, if any, is over.
    pub(super) fn end_calm(&mut self) {
        self.calm = None;
    }

    /// Whether a window above tolerance with median `latency_ns` and levels up to `peak` is a
    /// step (module docs): past `factor` × the calm latency at levels the calm windows ran,
    /// after enough of them, with few requests dropped.
    pub(super) fn stepped(&self, now_ns: u64, latency_ns: f64, peak: usize, factor: f64) -> bool {
        self.few_dropped()
            && self.calm.is_some_and(|c| {
                c.windows >= MIN_CALM_WINDOWS
                    && now_ns.saturating_sub(c.since_ns) as f64 >= CALM_SPANS * c.latency_ns
                    && peak <= c.peak
                    && latency_ns > factor * c.latency_ns
            })
    }

    /// Whether a window above tolerance with median `latency_ns` and levels up to `peak` is a
    /// step at a held level (module docs): the [`HELD_STEPS`]th in a row past `factor` × the
    /// held run's latency at levels the run held, with no request dropped over the last one to
    /// two periods (module docs). Returns the run's latency (ns) then. Call for every window
    /// above tolerance, before [`held_window`](Self::held_window).
    pub(super) fn held_step(
        &mut self,
        now_ns: u64,
        latency_ns: f64,
        peak: usize,
        factor: f64,
    ) -> Option<f64> {
        let none_dropped = self.drops == [0, 0];
        let h = self.held.as_mut()?;
        let reference = h.reference();
        h.stepping = none_dropped
            && h.windows >= MIN_CALM_WINDOWS
            && now_ns.saturating_sub(h.since_ns) as f64 >= CALM_SPANS * reference
            && peak <= h.peak
            && latency_ns > factor * reference;
        h.steps = if h.stepping { h.steps + 1 } else { 0 };
        (h.steps >= HELD_STEPS).then_some(reference)
    }

    /// A window closed: `held` if above tolerance, uncensored, out of slow start, with the
    /// limit left where it was. It joins the held run (or starts one) — unless it was a step
    /// candidate ([`held_step`](Self::held_step)), which neither joins nor ends it; any other
    /// window ends the run.
    pub(super) fn held_window(&mut self, now_ns: u64, latency_ns: f64, peak: usize, held: bool) {
        if let Some(h) = self.held.as_mut() {
            if std::mem::take(&mut h.stepping) {
                return;
            }
        }
        if !held {
            self.held = None;
            return;
        }
        let h = self.held.get_or_insert(Held {
            medians: [0.0; HELD_WINDOWS],
            windows: 0,
            peak,
            since_ns: now_ns,
            steps: 0,
            stepping: false,
        });
        h.medians[h.windows as usize % HELD_WINDOWS] = latency_ns;
        h.windows = h.windows.saturating_add(1);
        h.peak = h.peak.max(peak);
        h.steps = 0;
    }

    /// A raise used the held run: it is over. `limit` is the limit a step at the held level
    /// raised the baseline at, if that is what used it.
    pub(super) fn end_held(&mut self, limit: Option<usize>) {
        self.held = None;
        if limit.is_some() {
            self.held_limit = limit;
        }
    }

    /// How far the limit may grow: `None` when not `raised` (the baseline is the measured
    /// minRTT again), else the limit a step at a held level raised it at, if that raised it.
    pub(super) fn growth_cap(&mut self, raised: bool) -> Option<usize> {
        if !raised {
            self.held_limit = None;
        }
        self.held_limit
    }

    /// At most one request in [`MAX_DROPPED_SHARE`] timed out or was abandoned over the last
    /// one to two periods.
    fn few_dropped(&self) -> bool {
        let drops = u64::from(self.drops[0]) + u64::from(self.drops[1]);
        let total = u64::from(self.total[0]) + u64::from(self.total[1]);
        drops * MAX_DROPPED_SHARE <= total
    }

    /// Whether latency is flat across a wide enough span of levels, with few requests dropped
    /// (module docs).
    pub(super) fn flat(&mut self) -> bool {
        if self.levels.len() < MIN_POINTS || !self.few_dropped() {
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
