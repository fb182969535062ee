//! The start's first admissions, once every one of them is back: a larger check on a
//! provisional minRTT.
//!
//! Why: under a load that never lets the in-flight count fall to `min_concurrency`, a start's
//! provisional minRTT (`live.rs`) rests on its first five low-level answers — or on its first
//! round, the requests admitted before any answer came back, when that round holds at least
//! ten. At a Poisson load near capacity the round is small (nine at a 20-worker, 50 ms
//! service at 1×), and five answers of an exponential service put its median anywhere from a
//! tenth to twice what it is. Too high, it is never measured again: 72.5 ms for a 34.7 ms
//! median let the gradient hold a `slowdown` upstream at 27 in flight for its 20 workers for a
//! whole run (issue 28's sweep, seed 28: goodput 82 %, 88 % once checked here). Too low, the
//! gradient cuts down to where every answer measures it afresh; `live.rs` corrects that side
//! only when far off and when some answer of the set above the low levels was as fast (the
//! set's fastest is returned with its percentile: a set that queues has none that fast).
//!
//! Answers back so far are no better: they come back in order of latency, the slow ones
//! still out (a check on all the start's answers read the ramp's censoring as levels without
//! a queue and was reverted, `bench/results/flat-slow-start-issue28.md`). So the check waits
//! for a *cohort*: the first [`COHORT`] requests admitted, every one of them back. A sample's
//! in-flight level is the admissions up to it less the completions before it, so its
//! admission's rank is its level plus the completions that ended before it started; the
//! cohort is complete when ranks 1 to [`COHORT`] have all answered. A completion the limit is
//! never told of (a release without a sample) or a race between an admission and a release
//! makes two ranks collide: the check is abandoned, and the provisional minRTT stands.
//!
//! Complete, the cohort holds levels up to wherever the start's ramp took them: levels past
//! the upstream's workers queue, and their latency rises with the level. Kendall's rank test
//! (`levels.rs`) over the cohort's answers up to a level — the highest first, then lower —
//! finds the largest set of them whose levels above `min_concurrency` show no sign of rising
//! (`z` below [`NO_RISE_Z`]; the low levels' own answers are the estimate under check, not
//! evidence), with at least twice `min_concurrency`'s answers; the set's percentile is the
//! check's estimate. An upstream with fewer workers than that rises within it: no estimate,
//! and the low levels' (with their fit at one in flight) stand. A cohort with a request that
//! timed out or whose caller gave up has an unknown percentile: no estimate either.

use super::super::histogram::quantile_rank;
use super::levels::kendall_z;

/// Requests in the cohort: a bit per rank in a `u64`. The median of 64 answers of an
/// exponential service has a standard error of 18 % of it (`1 / (√n · ln 2)`), against 65 %
/// for five; a start at 1 × a 20-worker, 50 ms service admits them in a sixth of a second.
const COHORT: usize = 64;
/// Completions remembered to rank the cohort's samples: past this many without the cohort
/// complete (a member that never answers), the check is abandoned.
const MAX_COMPLETIONS: usize = 256;
/// Kendall's `z` below which latency shows no sign of rising with the level. An upstream with
/// workers for every level of the set passes by chance about five times in six (`z` < 1).
const NO_RISE_Z: f64 = 1.0;

/// What a complete cohort says of the upstream's latency without a queue of ours.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct CohortEstimate {
    /// The set's percentile (ns): the estimate.
    pub(super) percentile_ns: f64,
    /// The set's fastest answer admitted above the low levels (ns). Where those levels hold
    /// no queue their answers are draws of the service time as the low levels' are, and
    /// some are as fast as the low levels' percentile; where they queue (fewer workers than
    /// the levels, a rise the rank test missed in a heavy tail's spread) none is.
    pub(super) fastest_above_low_ns: f64,
}

/// The cohort of the start's first admissions.
#[derive(Debug)]
pub(super) struct StartCohort {
    /// When each completion seen ended (ns since the origin), the first [`MAX_COMPLETIONS`].
    ends: Vec<u64>,
    /// The cohort's answers by rank − 1: `(in-flight level, latency ns)`.
    members: Vec<(u32, u64)>,
    /// Bit `r − 1` set once rank `r` answered.
    seen: u64,
    /// Checked, or given up: nothing more to do.
    done: bool,
    /// Kendall's scratch space.
    scratch: Vec<f64>,
}

impl Default for StartCohort {
    fn default() -> Self {
        StartCohort {
            ends: Vec::with_capacity(MAX_COMPLETIONS),
            members: vec![(0, 0); COHORT],
            seen: 0,
            done: false,
            scratch: Vec::with_capacity(COHORT),
        }
    }
}

impl StartCohort {
    /// One completion: ended at `now_ns` after `rtt_ns`, admitted at `in_flight`; `answered`
    /// unless it timed out or its caller gave up. Returns the cohort's estimate once, when it
    /// completes without a rise among at least `2 × low` of its answers.
    pub(super) fn on_end(
        &mut self,
        now_ns: u64,
        rtt_ns: u64,
        in_flight: usize,
        answered: bool,
        low: usize,
        percentile: f64,
    ) -> Option<CohortEstimate> {
        if self.done {
            return None;
        }
        let started_ns = now_ns.saturating_sub(rtt_ns);
        // An end at the admission's instant came first: a closed-loop caller sends its next
        // request as its last answer arrives, into the slot that answer freed.
        let before = self.ends.iter().filter(|&&e| e <= started_ns).count();
        let rank = in_flight.saturating_add(before);
        if self.ends.len() < MAX_COMPLETIONS {
            self.ends.push(now_ns);
        } else {
            self.done = true;
            return None;
        }
        if !(1..=COHORT).contains(&rank) {
            return None;
        }
        let bit = 1u64 << (rank - 1);
        if !answered || self.seen & bit != 0 {
            // Unknown latency, or ranks that do not add up: no check.
            self.done = true;
            return None;
        }
        self.seen |= bit;
        self.members[rank - 1] = (u32::try_from(in_flight).unwrap_or(u32::MAX), rtt_ns);
        if self.seen.count_ones() as usize == COHORT {
            self.done = true;
            return self.estimate(low, percentile);
        }
        None
    }

    /// The percentile of the largest set of answers up to some level whose levels above
    /// `low` show no rise, with at least `2 × low` answers, `low` of them above it, and
    /// levels up to `2 × low` at least (with the set's fastest answer above `low`); `None`
    /// when every such set rises.
    ///
    /// Not tested at the low levels: their five answers are the estimate under check. Slow,
    /// they would hide a rise above them; fast, the set rises from them for that reason alone
    /// (a 20-worker, 50 ms exponential service whose levels 1–5 answered in 3–42 ms read a
    /// rise at every cut, `z` 1.2–2.4).
    fn estimate(&mut self, low: usize, percentile: f64) -> Option<CohortEstimate> {
        let low = low.max(1);
        self.members.sort_unstable();
        let above = self.members.partition_point(|p| p.0 as usize <= low);
        let mut upto = self.members.len();
        while upto >= 2 * low && upto >= above + low {
            let set = &self.members[..upto];
            if (set[upto - 1].0 as usize) < 2 * low {
                // Too narrow a span of levels to show a rise.
                break;
            }
            if kendall_z(&set[above..], &mut self.scratch) < NO_RISE_Z {
                self.scratch.clear();
                self.scratch.extend(set.iter().map(|p| p.1 as f64));
                self.scratch.sort_unstable_by(f64::total_cmp);
                let rank = quantile_rank(percentile, upto as u64) as usize;
                // The loop keeps `low` answers above `low`; none would be no evidence.
                let fastest_above_low = set[above..]
                    .iter()
                    .map(|p| p.1 as f64)
                    .min_by(f64::total_cmp);
                return Some(CohortEstimate {
                    percentile_ns: self.scratch[rank - 1],
                    fastest_above_low_ns: fastest_above_low.unwrap_or(f64::INFINITY),
                });
            }
            // Down to the next lower level: drop every answer at the highest one.
            let top = set[upto - 1].0;
            while upto > 0 && self.members[upto - 1].0 == top {
                upto -= 1;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests;
