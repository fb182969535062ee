//! `throughput_ceiling`: stop where admitting more makes the upstream deliver *less*.
//!
//! Why: the gradient reads latency, and tolerates it up to `minRTT·(1 + buffer)` plus √limit
//! of headroom. In front of a plain FIFO upstream the latency it tolerates is a queue in the
//! upstream: harmless to throughput, which stays at the workers' rate past the knee. An
//! upstream that *thrashes* when given more than it can run — a thread pool that context-
//! switches, a database whose transactions contend — slows every request it holds: past its
//! knee each extra request lowers what it delivers (issue 28's `slowdown` backend, service ×
//! held / workers: 20 workers at 30 in flight deliver two thirds of their rate, and the work of
//! callers who gave up is still run). The gradient's tolerance sits there, and a window that
//! opens just after a cut, when the upstream has drained, sees short answers and doubles the
//! limit again: a 20-worker, 50 ms service at 1× its capacity was held at 30–150 in flight and
//! served a third of what a cap at its workers serves.
//!
//! Throughput is what tells the two apart, as BBR's model of a path does (Cardwell et al.,
//! "BBR: Congestion-Based Congestion Control", ACM Queue 2016: past the bottleneck's
//! bandwidth-delay product, more in flight only adds delay; here it also removes delivery).
//! By Little's law a level of `n` in flight whose requests hold their slots `R` on average
//! turns them over at `n / R`, and delivers that times the share of them answered: a request
//! whose caller gave up (timed out, abandoned) held its slot until then and delivered nothing.
//! Requests are grouped by how many were in flight when they were admitted
//! ([`Sample::in_flight`](crate::limit::Sample)), [`PER_DOUBLING`] groups per doubling;
//! neighbouring groups are pooled, lowest first, until each pool holds [`MIN_SAMPLES`]. The
//! pool that delivers most is the best level; when a pool *above* it delivers clearly less —
//! by [`FALL`] of the best's rate beyond two standard errors of both (by [`STEEP_FALL`] below
//! [`CONFOUNDED_BELOW`] in flight, where long requests move level and latency together) —
//! more in flight destroyed throughput, and the limit is capped where in flight stays at the
//! best level.
//!
//! Why count the requests given up on: on the answered alone, a plain FIFO whose long
//! requests outlive their callers reads as thrashing. Its low levels answer their short
//! requests at once and its high levels after a wait, and the long ones, given up on at every
//! level, count nowhere: a 20-worker FIFO with 5 % of requests at 512 ms and callers allowing
//! 250 ms delivered 780 answers a second at 20 in flight and 546 at 29, by that count — a fall
//! of 26 %, where slots turned over within 8 % of each other — and its limit was capped at
//! 21–22 while SHEDDABLE work waited and was refused (issue 28's sweep, `c=20 mean=50ms bimodal
//! timeout=5x offered=0.9x crit=0.6`: −2.8 pp of requests served in time against the
//! unprotected service). The other way round, a thrashing upstream whose callers give up at
//! its high levels delivers less there than its answers alone say.
//!
//! What it leaves alone: below the knee delivery rises with the level; past the knee of a
//! plain FIFO it is flat (latency grows in proportion to the level), so no pool falls below
//! the best beyond the noise and the gradient decides alone, as before — but for chance: every
//! pool above the best is judged at two standard errors, window after window, and 10 of 30
//! seeded 8-second runs at a 20-worker FIFO saw one to three single-window caps, none the
//! [`CONFIRMED`] streak that is remembered; the gradient undoes them. Unlike `knee_cap` (which
//! caps every upstream at its knee, and moved plain upstreams' queues into the proxy's, where
//! sheddable work waits at most 100 ms), this cap exists only while delivery is seen to fall.
//!
//! The groups halve every [`HALF_LIFE_NS`], so that evidence about levels no longer visited
//! fades: a capped limit stops feeding the pools above the cap, and once their counts fall
//! below [`MIN_SAMPLES`] the cap lifts and the limit probes again (BBR probes above its
//! estimate periodically for the same reason: the path may have changed). They are cleared
//! when the live minRTT finds the upstream itself slower (`live.rs`).
//!
//! The probe is gentle: once a cap has held for [`CONFIRMED`] windows, the limit may grow past
//! it by an eighth (one group's width), not by the gradient's up to 2× plus √limit, until a
//! fall is seen again or the limit reaches twice the cap (the upstream has changed; the cap is
//! forgotten). The gradient's probe sent a thrashing upstream from its 22-request cap to 40–59
//! in one or two windows, every few seconds: its service times doubled, and the requests
//! admitted then outlived their callers (issue 28's sweep, a 20-worker 50 ms `slowdown`
//! service at 1×, callers allowing 5 service times: CRITICAL 81.4 % served in time; 94.5 %
//! with the gentle probe) — as TCP, having found loss at a window, grows past it by one
//! segment per round trip (congestion avoidance, RFC 5681 §3.1) rather than doubling again.
//!
//! Each step waits for its evidence: the next is taken once [`MIN_SAMPLES`] answers came from
//! requests admitted above the in-flight peak the last step was taken at (or above the peak
//! since, if the limit was cut back), so that a level is judged before the one above it is
//! tried. An eighth a window outran the pools: windows close about once a round trip, a level
//! gathers its 100 answers in a quarter of a second at 400 answers a second, and the limit was
//! at twice its cap before the level that falls had been judged. During a probe a fall caps at
//! once, in a window read as queued or not (this upstream was seen to thrash), and a probe that
//! found the fall again waits twice as many answers for its next step, up to [`MAX_BACKOFF`]
//! times as many (TCP's retransmission timer backs off the same way, RFC 6298 §5.5): a
//! thrashing upstream is probed less and less often, and one that stopped thrashing is still
//! found. A cut by the gradient below a step is not counted as a failure: at a plain FIFO the
//! gradient cuts near its knee by chance, and a cap remembered from a chance fall then held
//! the limit below where the gradient alone puts it (`limit::tests`' FIFO harness). With this
//! paragraph's rules and the next one's, issue 28's sweep (20 workers × 50 ms `slowdown` at
//! 1×, no CRITICAL work): goodput 79.1 → 83.7 % with an exponential service, 50.8 → 87.4 %
//! with a lognormal one.
//!
//! A cap is forgotten at once, not probed, when its evidence is refuted rather than faded: a
//! pool at or above the level that fell is judged again and delivers within half of [`FALL`]
//! of the best. The latency rise was then the upstream's, not the level's — a capacity drop
//! (levels visited before it answered fast, those visited in it slow) or a service with a slow
//! mode; held at the cap and probed at the evidence's pace, a 20-worker service at half its
//! capacity ran below its workers for the rest of the drop (issue 28's sweep: −1.0 → −7.7 pp of
//! requests served in time against the unprotected service; −1.1 pp with the refutation).
//!
//! The cap is on the limit, while the levels are in-flight counts: the headroom ladder lets
//! each criticality fill only a share of the limit (SHEDDABLE 0.8), so the limit is set to the
//! best level divided by the share the closing window used (its peak in flight over the
//! limit, at least one half).

use super::by_level::LatencyByLevel;
use super::floor::Unqueued;
use super::knee::DELAY_SHARE;

/// Pools with fewer completed requests are not judged (two standard errors of a mean of 100
/// exponential latencies are ±20 %; a level's queueing makes its latencies less variable).
pub(super) const MIN_SAMPLES: f64 = 100.0;
/// How much less than the best level's rate a higher level must deliver, beyond the noise, to
/// count as thrashing: a tenth (what a 20-worker thrashing upstream loses at 22 in flight).
pub(super) const FALL: f64 = 0.1;
/// Groups halve this often (ns): a few seconds of a busy service's requests judge a level, and
/// a level left for longer is judged again.
pub(super) const HALF_LIFE_NS: u64 = 2_000_000_000;
/// The lowest in-flight level judged: one in flight contends with nothing.
const FIRST_LEVEL: usize = 2;
/// Below this in-flight level a fall counts only when steeper than [`STEEP_FALL`]. At a
/// handful in flight, one long request raises both the in-flight count (arrivals pile up
/// behind it) and the latency of what is admitted then, so level and latency move together
/// without the level causing it: 1- and 4-worker services with 5 % of requests 20× slower,
/// judged on [`FALL`], looked like thrashing and were capped below their workers (issue 28's
/// sweep: R1 −0.3 to −1 pp, late queue exits in 40 cells). Never judged there, a 4-worker
/// upstream that thrashes past its workers was held at 6–24 in flight. Below it delivery is
/// read on the answered alone: the callers waiting behind a long request give up there too,
/// and counted, they steepened the confounded fall (the same services, callers allowing 5
/// mean service times: 10 more cells over five seeds of the sweep had queued requests
/// leave after their deadlines, R4b).
pub(super) const CONFOUNDED_BELOW: usize = 10;
/// The fall that counts below [`CONFOUNDED_BELOW`]: more than a long request holding one of
/// four workers takes from delivery (a quarter), less than what a 4-worker upstream that
/// slows with what it holds loses at 8 in flight (half).
const STEEP_FALL: f64 = 0.4;
/// Consecutive capped windows after which the cap is remembered and probed above gently — once
/// [`MIN_SAMPLES`] answers came in since the first: a fall seen once may be a burst of long
/// requests at a plain upstream (at 100 workers with 5 % of requests 20× slower, a cap
/// remembered from single verdicts held the limit below the workers, and requests waited in
/// the queue past their deadlines in 3 of the sweep's cells); a thrashing upstream renews its
/// cap window after window, while its capped levels answer afresh. A fall first seen just
/// after the upstream got slower compares levels run before (fast) with levels run after
/// (slow); held at the cap, the low levels answer slowly too, and the fall is gone. Windows
/// close about once a round trip: four of them took 0.4 s, and a 20-worker service at half
/// speed had a cap of 15 remembered on evidence from before its drop (issue 28's sweep,
/// `c=20 mean=50ms lognormal timeout=5x offered=0.5x crit=0.3 capacity_drop`, seed 32: −6.9 pp
/// of requests served in time; −0.5 pp with the answers).
const CONFIRMED: u32 = 4;
/// Groups per doubling of the in-flight count: one per ~9 %, so that the best level near a
/// knee of 20 is known to within two requests.
const PER_DOUBLING: usize = 8;
/// Groups kept: in-flight counts up to 2^24.
const GROUPS: usize = 192;
/// The most answers a probe step waits for, in [`MIN_SAMPLES`]: five failed probes in a row
/// (32 × 100 answers, 8 s at 400 answers a second).
const MAX_BACKOFF: f64 = 32.0;

/// Delivery by in-flight level.
#[derive(Debug)]
pub(super) struct ThroughputCeiling {
    levels: LatencyByLevel<GROUPS, PER_DOUBLING>,
    caps: u64,
    /// Whether the last window was capped.
    held: bool,
    /// The last cap that held for [`CONFIRMED`] windows in a row, with [`MIN_SAMPLES`]
    /// answers meanwhile (0: none since the levels were last forgotten).
    known: usize,
    /// Consecutive windows capped.
    streak: u32,
    /// Answers recorded since the streak began.
    streak_answers: f64,
    /// The lowest level seen falling when the cap was last set (refutation, module docs).
    fell_at: f64,
    /// Answers from requests admitted at `step_from` in flight or more since the last step.
    step_answers: f64,
    /// The in-flight level above which answers judge the last step.
    step_from: usize,
    /// Answers the next step waits for: [`MIN_SAMPLES`], doubled by each failed probe.
    step_need: f64,
}

impl ThroughputCeiling {
    pub(super) fn new() -> Self {
        ThroughputCeiling {
            levels: LatencyByLevel::new(HALF_LIFE_NS),
            caps: 0,
            held: false,
            known: 0,
            streak: 0,
            streak_answers: 0.0,
            fell_at: f64::INFINITY,
            step_answers: 0.0,
            step_from: 0,
            step_need: MIN_SAMPLES,
        }
    }

    /// One completed (not dropped) request, admitted with `in_flight` in flight.
    pub(super) fn record(&mut self, now_ns: u64, in_flight: usize, rtt_ns: u64) {
        self.levels.record(now_ns, in_flight, rtt_ns);
        if self.streak > 0 {
            self.streak_answers += 1.0;
        }
        if self.known > 0 && in_flight >= self.step_from {
            self.step_answers += 1.0;
        }
    }

    /// A request admitted with `in_flight` in flight whose caller gave up after `rtt_ns`: it
    /// held its slot that long and delivered nothing (module docs).
    pub(super) fn given_up(&mut self, now_ns: u64, in_flight: usize, rtt_ns: u64) {
        self.levels.record_given_up(now_ns, in_flight, rtt_ns);
    }

    /// Forgets every level (the upstream was re-measured).
    pub(super) fn forget(&mut self) {
        self.levels.clear();
        self.held = false;
        self.streak = 0;
        self.forget_cap();
    }

    /// Ends the probe: no cap is remembered, and the next one is probed from scratch.
    fn forget_cap(&mut self) {
        self.known = 0;
        self.step_need = MIN_SAMPLES;
    }

    /// What the levels say about running unqueued (`floor.rs`): the highest level of a pool
    /// whose mean latency is within [`DELAY_SHARE`] of the lowest pool's (beyond two
    /// standard errors of each), pooled from the lowest level up; `None` before a pool holds
    /// [`MIN_SAMPLES`].
    pub(super) fn unqueued(&self) -> Option<Unqueued> {
        let run = self.levels.unqueued_run(MIN_SAMPLES, DELAY_SHARE)?;
        let best_rate = self
            .levels
            .pools(0, MIN_SAMPLES)
            .map(|p| p.level / p.mean)
            .fold(0.0, f64::max);
        Some(Unqueued {
            level: run.level,
            base_ns: run.base_ns,
            best_rate,
        })
    }

    /// Times the ceiling lowered the limit.
    pub(super) fn caps(&self) -> u64 {
        self.caps
    }

    /// The pools from [`FIRST_LEVEL`] up, lowest first, each once it holds [`MIN_SAMPLES`]:
    /// (rate, standard error, mean level). Those below [`CONFOUNDED_BELOW`] are pooled apart
    /// from those above, so that the levels judged on [`FALL`] are pooled as if the low ones
    /// were not there.
    fn pools(&self) -> impl Iterator<Item = (f64, f64, f64)> + '_ {
        let first = LatencyByLevel::<GROUPS, PER_DOUBLING>::group_of(FIRST_LEVEL);
        let split = LatencyByLevel::<GROUPS, PER_DOUBLING>::group_of(CONFOUNDED_BELOW);
        let low = self.levels.pools_in(first, split, MIN_SAMPLES);
        low.chain(self.levels.pools(split, MIN_SAMPLES)).map(|p| {
            // Answers per second: slots turn over at level / held time, and only the answered
            // share of them delivered (module docs) — but for the low pools, read on the
            // answered alone ([`CONFOUNDED_BELOW`]).
            let rate = if p.level < CONFOUNDED_BELOW as f64 {
                p.level / p.mean
            } else {
                p.level / p.held_mean * p.answered_share
            };
            // The rate's relative error is taken as the answered latency's mean's.
            (rate, rate * p.se / p.mean, p.level)
        })
    }

    /// The best pool — (rate, standard error, level) — and the lowest higher level seen
    /// delivering clearly less (module docs); `None` while delivery is not seen to fall.
    fn fall(&self) -> Option<((f64, f64, f64), f64)> {
        let mut best: Option<(f64, f64, f64)> = None;
        let mut fell: Option<f64> = None;
        for (rate, se, level) in self.pools() {
            match best {
                Some(b) if rate < b.0 => {
                    let fall = if level < CONFOUNDED_BELOW as f64 {
                        STEEP_FALL
                    } else {
                        FALL
                    };
                    if fell.is_none() && falls_below((rate, se), b, fall) {
                        fell = Some(level);
                    }
                }
                _ => {
                    // Falls so far were below this level: not "more in flight, less delivered".
                    best = Some((rate, se, level));
                    fell = None;
                }
            }
        }
        best.zip(fell)
    }

    /// Whether the fall that set the cap is refuted: a pool at or above the level that fell
    /// delivers within half of [`FALL`] of the best pool (module docs).
    fn refuted(&self) -> bool {
        // One walk: the best rate of all pools, and the best of those at or above `fell_at`.
        let (best, above) = self
            .pools()
            .fold((0.0, 0.0), |(best, above), (rate, _, level)| {
                let above = if level >= self.fell_at {
                    f64::max(above, rate)
                } else {
                    above
                };
                (f64::max(best, rate), above)
            });
        above > 0.0 && above >= best * (1.0 - FALL / 2.0)
    }

    /// The limit's ceiling for a window that closed at `limit`, with `peak` in flight at most
    /// among the requests admitted at that limit, and its latency past the gradient's
    /// tolerance (`queued`) or not.
    ///
    /// A fall first caps the limit only in a window the gradient reads as queued: early in a
    /// slow service's run the pools hold only its fastest answers (the long ones have not
    /// finished), so a cold start's low levels look faster than its later ones. Once capped,
    /// each verdict renews the cap until the pools above it have aged out (nothing runs there
    /// any more); then the limit probes above it, or the gradient does if the cap was not
    /// remembered or its evidence was refuted.
    pub(super) fn ceiling(&mut self, limit: usize, peak: usize, queued: bool) -> Option<usize> {
        let Some((best, fell_at)) = self.fall() else {
            if self.known > 0 && self.refuted() {
                self.forget_cap();
            }
            self.held = false;
            self.streak = 0;
            return self.probe(limit, peak);
        };
        // During a probe a fall caps in any window: this upstream was seen to thrash.
        if !(queued || self.held || self.known > 0) {
            return self.probe(limit, peak);
        }
        let share = if limit > 0 {
            (peak as f64 / limit as f64).clamp(0.5, 1.0)
        } else {
            1.0
        };
        let cap = (best.2 / share).ceil().clamp(1.0, 1e12) as usize;
        if cap < limit {
            self.caps += 1;
        }
        self.fell_at = fell_at;
        if self.known > 0 && !self.held {
            // The probe found the fall again: the next one waits for twice as many answers.
            self.step_need = (self.step_need * 2.0).min(MIN_SAMPLES * MAX_BACKOFF);
        }
        self.held = true;
        if self.streak == 0 {
            self.streak_answers = 0.0;
        }
        self.streak = self.streak.saturating_add(1);
        if self.streak >= CONFIRMED && self.streak_answers >= MIN_SAMPLES {
            self.known = cap;
            // The first probe steps at once; one after a failed probe waits for its answers.
            self.step_answers = if self.step_need > MIN_SAMPLES {
                0.0
            } else {
                MIN_SAMPLES
            };
            self.step_from = 0;
        }
        Some(cap)
    }

    /// The ceiling while no cap holds, for a window that closed at `limit` with `peak` in
    /// flight: none, unless a cap held for [`CONFIRMED`] windows since the levels were last
    /// forgotten — then the limit may grow past that cap by one group's width (an eighth) once
    /// the last step has its answers (module docs), until it reaches twice the cap, where the
    /// cap is forgotten.
    fn probe(&mut self, limit: usize, peak: usize) -> Option<usize> {
        if self.known == 0 || limit >= self.known.saturating_mul(2) {
            if self.known > 0 {
                self.forget_cap();
            }
            return None;
        }
        let from = limit.max(self.known);
        // After a cut the level the step reached is not visited any more: the peak since
        // judges it.
        self.step_from = self.step_from.min(peak);
        if self.step_answers < self.step_need {
            return Some(from);
        }
        self.step_answers = 0.0;
        self.step_from = peak.saturating_add(1);
        Some(from.saturating_add((from / PER_DOUBLING).max(1)))
    }
}

/// Whether a pool's rate `(rate, se)` is clearly below the best's: by `fall` of it beyond two
/// standard errors of the difference.
fn falls_below((rate, se): (f64, f64), (b, b_se, _): (f64, f64, f64), fall: f64) -> bool {
    b - rate > fall * b + 2.0 * (se * se + b_se * b_se).sqrt()
}

#[cfg(test)]
mod tests;
