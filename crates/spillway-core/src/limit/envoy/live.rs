//! `live_min_rtt`: minRTT measured on live traffic, never by pinning the limit.
//!
//! Why: Envoy measures minRTT by pinning the limit to `min_concurrency` until `request_count`
//! requests have completed, at start and every `interval`. Whatever the load, that refuses or
//! queues everything beyond a handful of requests for the measurement's duration: the
//! zero-config proxy started at 5 and refused traffic a cold service would have served, and
//! every 30–34.5 s pinned a busy service's limit to 5 (issue 28). The pin exists to see the
//! latency the upstream gives with almost nothing else in flight. Live traffic shows that
//! too, without being held back: every completed request reports how many were in flight when
//! it started ([`Sample::in_flight`](crate::limit::Sample)), so the samples that started with
//! at most `min_concurrency` in flight are exactly the pinned window's samples — taken when
//! the load happens to be light (the first requests after a start, troughs between bursts), or
//! when the limit has been cut to its floor, where every sample qualifies (Envoy's stale-minRTT
//! case: there minRTT is re-measured as before). So:
//!
//! - minRTT is the `sample_percentile` of the last `request_count` low-concurrency samples —
//!   or, where latency rises with the in-flight level among them (an upstream with fewer
//!   workers than `min_concurrency`, whose higher low levels are a queue in it), the latency
//!   at one in flight (`levels.rs`) —
//!   of requests that completed: a dropped (timed-out) one's latency is where its caller gave
//!   up, and at a 1-worker service whose callers allow 5 service times, every sample ran at
//!   low concurrency, the timed-out ones made "minRTT" the timeout, and no latency was ever
//!   above tolerance again (issue 28's sweep); a
//!   measurement whose first sample is older than `interval` starts again (an old trough says
//!   little about the upstream now);
//! - until the first measurement completes, the percentile of the low-concurrency samples seen
//!   so far stands in (the very first request of a start qualifies) — or, once the whole
//!   first round (every request admitted before any answer came back) is in, its percentile
//!   where that is lower: four times the answers, where the start's first five alone read a
//!   variable service's median at up to twice what it is
//!   ([`LiveMinRtt::provisional_estimate`]) — and the limit does not move before there is one;
//!   slow start neither ends nor cuts on it unless a window is clearly past it (twice its
//!   tolerance) or most of it timed out — and not even then while it rests on at most half of
//!   the low levels' answers with the first round still out ([`LiveMinRtt::partial`]): the
//!   median of the first few requests of an
//!   exponential service lies anywhere in 0.3–1.3 × the mean, and read as minRTT a low one
//!   ended slow start at once and held a 100-worker service's cold start at 20–25 for a
//!   quarter of a second (issue 28's sweep: 547 refused at 0.9×). Growth on fast answers only
//!   still stops slow start where the queue starts. While the round is out the low levels'
//!   percentile counts their missing answers as the slowest (the round's requests left
//!   together, so they come back in order of latency): the median of five is the third
//!   back, not the second of three ([`LiveMinRtt::round_low_estimate`]);
//! - and once the start's first 64 admissions are all back, without a rise with the level
//!   above the low ones, their percentile replaces a provisional minRTT above 1.5 × it
//!   (`cohort.rs`): under a load that never goes light the five low-level answers are all a
//!   start has, and a median of five answers of an exponential service is past 1.5 × its
//!   own one time in four — a tolerance the gradient then keeps as a queue in the upstream
//!   for good; and one below a fifth of it, when some answer of the set above the low
//!   levels was as fast (an unqueued set's answers are draws of the service time too): there
//!   the gradient halves the limit at every window until the levels measure it afresh;
//! - from the start the limit grows in slow start: by one per request answered within
//!   `minRTT·(1 + buffer)` while at least half of it was in use — doubling per round trip, as
//!   TCP's window grows by one per acknowledgement (RFC 5681 §3.1) — so a cold start reaches
//!   what the service can run in a few round trips rather than a few 100 ms windows, and stops
//!   by itself where latency starts to rise (past the knee few requests are that fast). The
//!   first window whose latency leaves that tolerance ends slow start; from then on only the
//!   gradient moves the limit. Answers back before there is any minRTT are judged once there
//!   is one, as if it had been known (the first answers back are the fastest, and the first
//!   low level's, which sets minRTT, often comes after them);
//! - slow start grows only while the limit is below twice the highest in-flight level an
//!   answer came back from within an eighth of minRTT (HyStart's delay threshold). Requests
//!   admitted just past an upstream's workers still come back within the gradient's 1.5 ×
//!   when a worker frees soon after they arrive, and fast answers from levels 21–39 took a
//!   20-worker, 50 ms service's limit past 60 within a window, before any window was slow: an
//!   upstream that slows with what it holds then held 84 and served almost nothing for ten
//!   seconds (issue 28's sweep, R2: CRITICAL 84 % at 1×). A larger upstream answers within the
//!   eighth at every level it has workers for, so its ramp is as fast as before. Over three
//!   seeds of the sweep: mean R2 +0.0028, R3 +0.0023 (`bench/results/seeds-issue28.md`);
//! - the limit is never pinned: a load that never goes light keeps the last minRTT, which is
//!   what pinning would re-measure too unless the upstream changed — and if it got slower the
//!   gradient cuts to the floor, whose samples then measure it;
//! - but at an upstream smaller than the low levels a load that never goes light keeps a
//!   minRTT read across the upstream's own queue: a 1-worker, 10 ms exponential service under
//!   2× overload had 22–24 low-level answers, all queued at the worker, a rank test below the
//!   `z` of 4 the fit at one in flight asks (`levels.rs`), and minRTT 54–58 ms; the gradient
//!   held 6–11 in flight and CRITICAL waited behind SHEDDABLE in the upstream's FIFO (100 ms
//!   on average; the sweep's HAProxy-tuned model, capped at one, 2.3 ms). So while the controller reports some
//!   level's overload sustained ([`Limit::set_overloaded`](crate::limit::Limit)), at most
//!   once per `interval`, a fit at one in flight below minRTT by more than the buffer, from
//!   low levels whose latency shows a sign of rising (`z` ≥ 2), becomes minRTT
//!   ([`LiveMinRtt::queued_min_rtt`]). The gradient then cuts as from any lower minRTT, step
//!   by step — not below one level under the lowest the fit saw (`levels.rs`) — and the low
//!   levels it reaches measure minRTT again: a fit that was wrong is replaced by the next
//!   measurement. Without overload the `z` of 4 stands (at 3 a 20-worker
//!   lognormal service at half its capacity read a slope into its troughs and was cut from
//!   42 to 8, `levels.rs`). Over issue 28's sweep (seeds 28–32): failing R2 cells −1, −1,
//!   0, 0, −1 and R3 −4, −3, −2, −2, +1, R1 unchanged (`c=1 mean=10ms exp timeout=20x
//!   offered=2x crit=0.8`: CRITICAL 76.4 → 90.6 % served in time). Pinning the limit to one
//!   to measure the answers alone, tried instead, measured right but refused CRITICAL work
//!   while the upstream drained the requests admitted before
//!   (`bench/results/unqueued-latency-issue28.md` §3).

use super::super::histogram::{quantile_rank, LatencyHistogram};
use super::cohort::{CohortEstimate, StartCohort};
use super::levels::LevelFit;

/// Kendall's `z` among the low levels from which an upstream counts as smaller than them
/// (`LiveMinRtt::small_upstream`).
const SMALL_UPSTREAM_Z: f64 = 2.0;

/// Answers after which minRTT no longer counts as resting on the start's first answers back
/// ([`LiveMinRtt::partial`]), whatever is still out: three times the zero-config preset's
/// initial limit of 20 (the first round). A first-round request whose end never reaches the
/// limit (a failed connection is no sample) would otherwise keep it partial for ever.
const PARTIAL_ANSWERS: u32 = 64;

/// A provisional minRTT above this multiple of the start cohort's estimate is replaced by it:
/// the gradient's tolerance above it would be a queue of over a service time.
const COHORT_ABOVE: f64 = 1.5;

/// A provisional minRTT below the start cohort's estimate divided by this is replaced by it,
/// when some answer of the cohort's set above the low levels was as fast
/// ([`LiveMinRtt::provisional_estimate`]). Five answers of an exponential service read a
/// median below a fifth of its own about once in 57 starts (each answer falls there with
/// probability 1 − 2^−0.2 = 0.13, and three of five must), a lognormal (σ = 1) one's about
/// once in 700; there every window at the service's median is past twice the tolerance and
/// the gradient halves the limit at each.
const COHORT_BELOW: f64 = 5.0;

/// The low-concurrency samples of the measurement in progress.
#[derive(Debug)]
pub(super) struct LiveMinRtt {
    hist: LatencyHistogram,
    /// When the measurement in progress took its first sample (ns since the origin).
    started_ns: u64,
    /// Samples that started with at most this many in flight measure minRTT.
    low: usize,
    request_count: u32,
    percentile: f64,
    /// A measurement older than this starts again.
    max_age_ns: u64,
    /// No measurement has completed yet: every low-concurrency sample updates the provisional
    /// minRTT.
    provisional: bool,
    /// Completed answers that ran alone (nothing else of ours in flight), for
    /// [`LiveMinRtt::slower`].
    alone: LatencyHistogram,
    /// The measurement's samples by in-flight level: at an upstream with fewer workers than
    /// `low`, the median at one in flight (`levels.rs`).
    levels: LevelFit,
    /// `1 + buffer`: the latency at one in flight replaces the percentile only when the
    /// percentile is past this multiple of it.
    tolerance: f64,
    /// Until a measurement completes: the answers of the first round, the requests admitted
    /// before any answer came back (see [`LiveMinRtt::provisional_estimate`]).
    first_round: LatencyHistogram,
    /// When the first answer came back (ns since the origin; `None` before).
    first_answer_ns: Option<u64>,
    /// The highest in-flight level among the first round's answers: the round was admitted
    /// at levels 1, 2, … (nothing left before its first answer), so it is all in once it
    /// holds that many.
    first_round_top: usize,
    /// One of the first round's requests timed out: its percentile is unknown.
    first_round_spoiled: bool,
    /// How many of the first round's answers came from low levels (at most `low`: one
    /// request per level): while some are out, the low levels' percentile counts them as the
    /// slowest ([`LiveMinRtt::round_low_estimate`]).
    round_low: usize,
    /// The provisional minRTT of the low-concurrency samples alone.
    low_estimate: Option<f64>,
    /// The provisional minRTT last reported (ns; 0 before any).
    reported_ns: f64,
    /// Answers seen (completed or dropped), up to [`PARTIAL_ANSWERS`].
    answers: u32,
    /// The level fit has new samples since [`LiveMinRtt::queued_min_rtt`] last looked: the
    /// fit is quadratic in them and its answer cannot change without them.
    fit_unchecked: bool,
    /// The start's first admissions, for a check on the provisional minRTT (`cohort.rs`).
    cohort: StartCohort,
    /// The cohort's estimate, once complete without a rise: while no measurement has
    /// completed it replaces the low levels' and the first round's where those are past
    /// [`COHORT_ABOVE`] × it, or below it ÷ [`COHORT_BELOW`] with an answer of its set as
    /// fast.
    cohort_estimate: Option<CohortEstimate>,
    /// The fit at one in flight last taken for minRTT (ns), and the lowest in-flight level
    /// among its samples ([`LiveMinRtt::fitted`]).
    fitted: Option<(f64, u32)>,
}

impl LiveMinRtt {
    pub(super) fn new(
        low: usize,
        request_count: u32,
        percentile: f64,
        max_age_ns: u64,
        tolerance: f64,
    ) -> Self {
        LiveMinRtt {
            hist: LatencyHistogram::new(),
            started_ns: 0,
            low: low.max(1),
            request_count: request_count.max(1),
            percentile,
            max_age_ns,
            provisional: true,
            alone: LatencyHistogram::new(),
            levels: LevelFit::default(),
            tolerance,
            first_round: LatencyHistogram::new(),
            first_answer_ns: None,
            first_round_top: 0,
            first_round_spoiled: false,
            round_low: 0,
            low_estimate: None,
            reported_ns: 0.0,
            answers: 0,
            fit_unchecked: false,
            cohort: StartCohort::default(),
            cohort_estimate: None,
            fitted: None,
        }
    }

    /// Feeds one sample. Returns a minRTT when a measurement completes, or — until the first
    /// one has — the provisional one from the low-concurrency samples so far.
    /// A dropped (timed-out) request is no sample: its latency is where its caller gave up.
    pub(super) fn on_sample(
        &mut self,
        now_ns: u64,
        rtt_ns: u64,
        in_flight: usize,
        dropped: bool,
    ) -> Option<f64> {
        let checked = self.provisional
            && self
                .cohort
                .on_end(
                    now_ns,
                    rtt_ns,
                    in_flight,
                    !dropped,
                    self.low,
                    self.percentile,
                )
                .map(|m| self.cohort_estimate = Some(m))
                .is_some();
        let reported = self.reported_ns;
        self.measure(now_ns, rtt_ns, in_flight, dropped)
            .or_else(|| {
                checked
                    .then(|| self.provisional_estimate())
                    .flatten()
                    .filter(|&m| m != reported)
            })
    }

    /// [`on_sample`](Self::on_sample) but for the cohort's check.
    fn measure(
        &mut self,
        now_ns: u64,
        rtt_ns: u64,
        in_flight: usize,
        dropped: bool,
    ) -> Option<f64> {
        self.answers = (self.answers + 1).min(PARTIAL_ANSWERS);
        let first_answer_ns = *self.first_answer_ns.get_or_insert(now_ns);
        let first_round = self.provisional && now_ns.saturating_sub(rtt_ns) < first_answer_ns;
        if dropped {
            // The round's percentile without its slowest answers would be too low.
            self.first_round_spoiled |= first_round;
            return None;
        }
        if first_round {
            self.first_round.record(rtt_ns);
            self.first_round_top = self.first_round_top.max(in_flight);
            if in_flight <= self.low {
                self.round_low = (self.round_low + 1).min(self.low);
            }
        }
        if in_flight > self.low {
            // Reported only when it moves: each report resets minRTT, and a re-baseline above
            // it (`flat.rs`) must stand between the first round's answers.
            let before = self.reported_ns;
            return first_round
                .then(|| self.provisional_estimate())
                .flatten()
                .filter(|&m| m != before);
        }
        if self.hist.count() > 0
            && !self.provisional
            && now_ns.saturating_sub(self.started_ns) > self.max_age_ns
        {
            self.hist.clear();
            self.alone.clear();
            self.levels.clear();
        }
        if self.hist.count() == 0 {
            self.started_ns = now_ns;
        }
        self.hist.record(rtt_ns);
        self.levels.record(in_flight, rtt_ns);
        self.fit_unchecked = true;
        if in_flight <= 1 {
            self.alone.record(rtt_ns);
        }
        if self.hist.count() >= self.request_count {
            let q = self.estimate();
            self.hist.clear();
            self.alone.clear();
            // The level fit keeps its latest samples across measurements (`levels.rs`).
            self.provisional = false;
            return q;
        }
        if self.provisional {
            self.low_estimate = self
                .low_levels_out()
                .then(|| self.round_low_estimate())
                .flatten()
                .or_else(|| self.estimate());
            self.provisional_estimate()
        } else {
            None
        }
    }

    /// Whether the first round is still out with some of its low levels' answers missing
    /// (no measurement has completed): the low levels' percentile is then
    /// [`round_low_estimate`](Self::round_low_estimate)'s.
    fn low_levels_out(&self) -> bool {
        self.provisional
            && self.round_low > 0
            && !(self.first_round_spoiled || self.first_round_all_in())
            && self.round_low < self.round_low_levels()
    }

    /// How many of the first round's requests ran at low levels: one per level, every low
    /// level once the round is seen to have reached past them.
    fn round_low_levels(&self) -> usize {
        self.first_round_top.min(self.low).max(self.round_low)
    }

    /// The low levels' percentile while some of the first round's are still out, counting
    /// those as slower than every answer back — `None` until its rank is among the answers
    /// back. At a start the round's requests left together, so they come back in order of
    /// latency and the missing ones are the slowest: the median of five is the third answer
    /// back, which the plain percentile of the three back puts at the second (a 1000-worker,
    /// 500 ms exponential service's read 19.5 ms for a median of 347 ms, and slow start took
    /// one answer in twenty for fast). Before its rank is in, the plain percentile of those
    /// back stands, and [`LiveMinRtt::partial`] keeps slow start from ending or cutting on it.
    /// Not a bound rising with the time the missing ones have been out: a request whose caller
    /// gave up need never report to the measurement, and the bound would rise with it. Read
    /// from the measurement's histogram, which holds the low levels' answers: while the round
    /// is out under load they are the round's.
    fn round_low_estimate(&self) -> Option<f64> {
        let n = self.round_low_levels();
        let rank = quantile_rank(self.percentile, n as u64);
        (self.round_low as u64 >= rank)
            .then(|| self.hist.at_rank(rank))
            .flatten()
    }

    /// A request whose caller gave up after `rtt_ns`: one of the first round's spoils it as a
    /// timed-out one does (its latency is unknown, so the round's percentile is too) — and
    /// ends [`partial`](Self::partial), which would otherwise wait for its answer for ever.
    pub(super) fn on_abandoned(&mut self, now_ns: u64, rtt_ns: u64, in_flight: usize) {
        if self.provisional {
            // Its latency is unknown: a cohort it belongs to gives no estimate.
            self.cohort
                .on_end(now_ns, rtt_ns, in_flight, false, self.low, self.percentile);
        }
        let started_ns = now_ns.saturating_sub(rtt_ns);
        if self.provisional
            && self
                .first_answer_ns
                .map_or(true, |first| started_ns < first)
        {
            self.first_round_spoiled = true;
        }
    }

    /// Until a measurement completes, minRTT is the low-concurrency samples' estimate — or the
    /// first round's percentile where that is lower, once all its answers are in.
    ///
    /// Why: under a load that never lets the in-flight count fall to `low`, the only
    /// low-concurrency samples are the start's first few requests, and a percentile of five
    /// answers of a variable service lies anywhere in half to twice the service's own (its
    /// log spreads by 1.25 σ / √5): a 100-worker lognormal (σ = 1) service with a 303 ms
    /// median read 685 ms. The gradient's tolerance above that is a queue in the upstream, and
    /// slow start counted queued answers as fast: the limit reached 546 and the upstream held
    /// 1.7 s of queue for 3.5 s (`bench/robustness.sh`'s `w100-500ms-lognormal-t5-2x-c0.6`,
    /// simulated: CRITICAL 85 % served in time at 2×, at some seeds). The requests admitted
    /// before any answer came back — up to the initial limit, 20 in the zero-config preset,
    /// four times the low levels' five — ran in the same conditions; at an upstream with
    /// workers for them it is the same latency, its spread halved. At a smaller one its upper
    /// levels queued and its percentile is the higher of the two, so the low levels' estimate
    /// (and its fit at one in flight) stands. Only the round, and only once all of it is in
    /// (at least twice the low levels' count): answers come back in order of latency, and
    /// the first few back — or the round's with later requests' short answers among them —
    /// are the fast ones (counting those, a 10 ms exponential service's 6.9 ms median read
    /// 3.7 ms). A round one of whose requests timed out never completes: the low levels'
    /// estimate stands.
    fn provisional_estimate(&mut self) -> Option<f64> {
        let n = self.first_round.count() as usize;
        let round = (self.first_round_all_in() && n >= 2 * self.low && !self.first_round_spoiled)
            .then(|| self.first_round.quantile(self.percentile))
            .flatten();
        // No low-concurrency answer at all (a load heavy from its first request on): nothing
        // to lower; the limit measures at low concurrency first (`window.rs`).
        let low = self.low_estimate?;
        let m = round.map_or(low, |round| low.min(round));
        // The cohort (`cohort.rs`): more answers, all back, none visibly queued — but the
        // levels where a queue starts hardly show in its rank test and raise its percentile,
        // so it corrects only an estimate past the band it would itself be tolerated in. A
        // minRTT too high has the gradient tolerate a queue in the upstream, which a load that
        // never goes light keeps for good. One too low has it cut, down to the levels where
        // every answer is a low-concurrency sample and a measurement completes — mostly
        // harmless, and corrected within [0.5, 1.5] × the cohort's both ways the low side's
        // corrections cost more than they gained (issue 28's sweep, seeds 28–32: R2 −0.0001,
        // closed loops −6.8 %, s.e. 3.3; `bench/results/start-cohort-issue28.md`). Far below
        // (`COHORT_BELOW`) the cuts halve the limit window after window: 256 closed-loop
        // callers of a 20-worker, 50 ms exponential service read 3.85 ms (the cohort 40 ms)
        // and held 6–13 in flight for two seconds. Only with one of the set's answers above
        // the low levels as fast: a set that queues (a 1-worker service whose heavy tail hid
        // the rise from the rank test read 9.3 ms for a 1.45 ms start) has none.
        let m = match self.cohort_estimate {
            Some(c) if m > c.percentile_ns * COHORT_ABOVE => c.percentile_ns,
            Some(c) if m * COHORT_BELOW < c.percentile_ns && c.fastest_above_low_ns <= m => {
                c.percentile_ns
            }
            _ => m,
        };
        self.reported_ns = m;
        Some(m)
    }

    /// The measurement's percentile — or, where latency rises with the in-flight level among
    /// its samples (a queue in an upstream with fewer workers than `low`), the latency at one
    /// in flight, when the percentile is past it by more than the buffer: a smaller gap is
    /// within what the gradient tolerates anyway, and an upstream with workers to spare, whose
    /// rank test passes by chance now and then, keeps its median.
    ///
    /// Whatever the callers' budget: a 1-worker service's low levels are a queue of up to four
    /// service times, and with a minRTT read across it the gradient keeps that queue and more
    /// in the upstream's FIFO, where CRITICAL work waits behind SHEDDABLE work the proxy would
    /// have held back — even for callers with room for the queue (`c=1 mean=10ms bimodal 20x
    /// 2x crit=0.8` in issue 28's sweep: CRITICAL 79.4 % served in time, 72.4 % when such
    /// callers kept the percentile; `bench/results/span-issue28.md`).
    fn estimate(&mut self) -> Option<f64> {
        let q = self.hist.quantile(self.percentile)?;
        let one = self.levels.at_one().filter(|&one| one * self.tolerance < q);
        self.note_fit(one);
        Some(one.unwrap_or(q))
    }

    /// Whether the low-concurrency samples may hold a queue in the upstream (`flat.rs`):
    /// latency shows a sign of rising with the level among them (Kendall's `z` of 2, where
    /// `levels.rs` asks 4 before it fits), or too few say — unless no measurement has
    /// completed yet: then the load never let the in-flight count fall to `min_concurrency`
    /// long enough for one (20 workers at their capacity's load), and a queue of ours would
    /// show in the window's own levels. Once one has, too few samples means they were dropped
    /// (the upstream changed, or the limit sat at its floor), not that the upstream is large.
    pub(super) fn small_upstream(&mut self) -> bool {
        self.levels
            .rise_z()
            .map_or(!self.provisional, |z| z >= SMALL_UPSTREAM_Z)
    }

    /// Under sustained overload: the latency at one in flight, where the low levels show a
    /// sign of a queue ([`small_upstream`](Self::small_upstream)) and the fit puts it below
    /// `min_rtt_ns` by more than the buffer; `None` otherwise, before a measurement has
    /// completed, and when no low-level answer came since the last call (the same samples
    /// give the same answer, and this runs at every window's close). See the module docs for
    /// why the weaker test.
    pub(super) fn queued_min_rtt(&mut self, min_rtt_ns: f64) -> Option<f64> {
        if !std::mem::take(&mut self.fit_unchecked) || self.provisional || !self.small_upstream() {
            return None;
        }
        let one = self
            .levels
            .fit_at_one()
            .filter(|&one| one * self.tolerance < min_rtt_ns)?;
        self.note_fit(Some(one));
        Some(one)
    }

    /// The fit at one in flight last taken for minRTT (ns) and the lowest in-flight level its
    /// samples reached, when that was above one: a minRTT extrapolated below what was seen,
    /// under which cuts stop a level lower (`levels.rs`, [`cut_floor`](super::levels::cut_floor))
    /// while minRTT is still that value (the controller compares: a measurement or a
    /// re-baseline since replaced it).
    pub(super) fn fitted(&self) -> Option<(f64, u32)> {
        self.fitted.filter(|&(_, lowest)| lowest > 1)
    }

    /// Remembers the fit at one in flight taken for minRTT, or that the percentile was.
    fn note_fit(&mut self, one: Option<f64>) {
        self.fitted = one.zip(self.levels.span().map(|(lowest, _)| lowest));
    }

    /// Whether the provisional minRTT rests on no more than half of the low levels' requests
    /// (two of a start's first five) while the start's first round is still out: answers come
    /// back in order of latency, so the first few back are the fastest of them, and their
    /// median is a lower bound of the five's. Once the round is all in (or one of it timed
    /// out) the low levels' requests, admitted in it, have ended too.
    ///
    /// A 1000-worker, 500 ms exponential service (median 347 ms) read 9.8 ms from its first
    /// answers back, and a window at 47.5 ms, past twice that tolerance, ended slow start and
    /// cut the limit from 20 to 13, where the service needed 900 in flight (issue 28's sweep
    /// at 0.9 × its capacity, seed 31: 547 of 60,019 requests refused; 5 once slow start
    /// waits for the median).
    pub(super) fn partial(&self) -> bool {
        let round_ended = self.first_round_spoiled || self.first_round_all_in();
        self.provisional
            && !round_ended
            && self.answers < PARTIAL_ANSWERS
            && (self.hist.count() as usize).saturating_mul(2) <= self.low
    }

    /// Whether every request of the first round has answered: it was admitted at levels
    /// 1, 2, … up to its highest, so it holds that many answers.
    fn first_round_all_in(&self) -> bool {
        self.first_round_top > 0 && self.first_round.count() as usize >= self.first_round_top
    }

    /// Whether no measurement has completed yet (minRTT is the provisional one, from fewer
    /// than `request_count` samples).
    pub(super) fn provisional(&self) -> bool {
        self.provisional
    }

    /// The upstream itself got slower: once the limit has been cut to `low` or below and
    /// twice `low` answers that ran alone (the latency a pinned measurement would see, no
    /// queue of ours in it) have a percentile past `tolerated` (minRTT with its buffer), that
    /// percentile is minRTT from now on and the measurement starts again. Without this the
    /// new minRTT waited for five windows at the floor and then a full measurement: when a
    /// 20-worker, 50 ms service dropped to half speed at half its capacity's load, the
    /// gradient, judging against the old minRTT, cut the limit to 1 and held it there for
    /// two seconds while 200 requests queued (issue 28's sweep, R1: -25 pp at 0.5 ×
    /// capacity). Only answers that ran alone: at a 1-worker service, those that ran with up
    /// to `low` in flight include our own queue, and read as minRTT they raised the limit
    /// past what it can serve (goodput 0.58 -> 0.06 of capacity at 2×). Not before a first
    /// measurement has completed: every sample updates the provisional one already.
    pub(super) fn slower(&mut self, limit: usize, tolerated: f64) -> Option<f64> {
        if self.provisional || limit > self.low || (self.alone.count() as usize) < 2 * self.low {
            return None;
        }
        let q = self.alone.quantile(self.percentile)?;
        self.alone.clear();
        if q <= tolerated {
            return None;
        }
        self.hist.clear();
        self.levels.clear();
        Some(q)
    }

    /// Drops the measurement in progress (the limit sat at its floor: minRTT may be stale, and
    /// only samples from now on should measure it).
    pub(super) fn restart(&mut self) {
        self.hist.clear();
        self.alone.clear();
        self.levels.clear();
    }
}
