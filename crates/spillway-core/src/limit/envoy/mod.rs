//! Envoy's adaptive concurrency filter, gradient controller.
//!
//! Why offer it: it compares latency against an *ideal* latency (minRTT) measured under almost no
//! load, so it detects queueing even when the service has been overloaded for a long time (a
//! moving-average baseline would have drifted up with the load). The price is that the limit is
//! periodically pinned very low while minRTT is re-measured; jitter keeps the tasks of a fleet from
//! doing that at the same moment.
//!
//! Behaviour (Envoy docs "Adaptive Concurrency" and `gradient_controller.cc`, facts and formulas):
//! - minRTT window: the limit is pinned to `min_concurrency` (the old limit is remembered), samples
//!   from requests *started* before the window opened are discarded, and after `request_count`
//!   samples minRTT = their `sample_percentile` and the remembered limit is restored. The first
//!   window opens at `origin`, so the limit starts at `min_concurrency`.
//! - The next window opens `interval + U·interval·jitter` later (`U` uniform in `[0, 1)`), i.e.
//!   somewhere in `[interval, interval·(1 + jitter))`.
//! - Outside the window, samples are gathered for `update_interval`; then
//!   `sampleRTT = percentile(sample_percentile)`, `gradient = clamp((minRTT·(1 + buffer)) /
//!   sampleRTT, 0.5, 2.0)`, `limit' = limit·gradient`, `new = floor(limit' + sqrt(limit'))`
//!   (headroom = √limit, not configurable in Envoy), clamped to `[min_concurrency_limit,
//!   max_concurrency_limit]`. An empty sampling window changes nothing.
//! - If the limit is set to its minimum for 5 consecutive sampling windows, minRTT is assumed stale
//!   and re-measured at once.
//! - If `min_concurrency_limit` is set (newer Envoy), it is the floor instead of `min_concurrency`
//!   and minRTT windows measure live traffic without pinning the limit.
//! - `fixed_min_rtt` replaces dynamic minRTT measurement entirely (Envoy `fixed_value`).
//!
//! One addition, off by default (Envoy has no such rule): `app_limited_growth`. Envoy grows the
//! limit by the gradient (up to 2×) plus √limit every window in which latency stays near minRTT,
//! *whether or not the limit was in use*, so a lightly loaded task reaches `max_concurrency_limit`
//! (1000) within about a second, and the next surge sends up to 1000 requests at a service that
//! can only run a few (measured with `spillway demo`: 296 in flight at a 4-worker backend). With
//! `app_limited_growth = Some(f)`, a window whose peak in-flight count (from [`Sample::in_flight`])
//! is below `limit / f` may not raise the limit: low load says nothing about capacity. This is
//! the "app-limited" rule of Netflix concurrency-limits (`Gradient2Limit`, `AIMDLimit`:
//! `inflight < limit / 2` leaves the limit alone; see `gradient2.rs`, `aimd.rs`) and of TCP's
//! congestion window validation (RFC 7661: the window is not grown while the sender does not use
//! at least half of it). A window that may grow does so to at most `f ×` its peak in flight (or
//! by one, if that is more: at a limit of 2 the lowest criticality may use 1, and `2 × 1` kept a
//! limit cut to 2 there for good), as Linux's slow start grows the congestion window only up to twice the packets in flight
//! (`tcp_is_cwnd_limited`: `cwnd < 2 * max_packets_out`). Without that cap a window that used
//! just over half the limit, with latency at minRTT (a queue draining after a surge), doubled it
//! in one step: `spillway demo` went 15 → 35 with 8 in flight as its 10× staircase ended, held
//! 35 through the calm (4 in flight: app-limited), and the jump then put 28 requests at once on
//! the 4-worker backend; CRITICAL requests queued behind them missed their deadlines (2 of 953
//! failed, 99.8%). Decreases still apply; the minRTT window's pinning and restore are
//! unchanged.
//!
//! A second addition, off by default: `one_change_per_rtt`. Envoy's windows are short (100 ms)
//! and a request's RTT often longer, so the window after a change is summarised from requests
//! that were admitted — and queued — under the *old* limit: after a halving the next window
//! still sees the old queue's latency and halves again, and after growth the next window still
//! sees the old short latency and grows again. The limit swings far past its target both ways
//! (measured with `spillway demo`: 22 → 6 → 22 within 0.7 s at a 4-worker backend, with in-flight
//! falling to 3 and a worker idle at the troughs). With `one_change_per_rtt = true`, once the
//! limit has changed a window uses only samples of requests *started* after the change; until
//! such samples arrive the window is empty and changes nothing. So the limit moves at most once
//! per round trip, on evidence about itself — TCP's rule of reducing the congestion window at
//! most once per window of data, since losses of segments sent before the reduction belong to
//! the old window (RFC 5681 §3.2, RFC 6582 NewReno), and the same discard Envoy already applies
//! to samples predating a minRTT window. The first window after a change has the opposite
//! bias: it closes on its timer holding only the requests started since that have already
//! answered — the fastest, the slow ones still out. So a window that closes with fewer answers
//! than a measurement takes (`request_count`), sooner after the change than the latency that
//! made it, may cut but grows the limit by one at most (TCP's congestion avoidance past a
//! loss, RFC 5681 §3.1). Without this, each cut of a 20-worker upstream that slows with what it
//! holds was undone by the next window's two to seven early answers: it stayed at 35 in flight
//! (issue 28's sweep, `c=20 mean=50ms lognormal timeout=20x offered=2x crit=0.8 slowdown`).
//! Not growing at all there lifted that cell further but held limits cut below the workers in a
//! capacity drop there too (`bench/results/early-window-issue28.md`). Windows that fill with
//! `request_count` answers are left alone: at a 1000-worker upstream every window after a
//! change closes within one latency, and holding them all halved the gradient's probes above
//! the knee that `knee.rs` reads its cap from (`limit::tests`' saturated 1000-worker upstream:
//! its limit drifted to twice the workers).
//!
//! A third addition, off by default: `rebaseline_on_futile_cut` (needs `one_change_per_rtt`).
//! A latency gradient cannot tell a busy *host* from an overloaded upstream: with foreign work
//! on the same cores every answer is slower whatever the concurrency, and the limit is cut to
//! its floor while the upstream has capacity to spare. With the rule, windows whose limit was
//! reached and whose latency was above tolerance are kept; when their latency does not follow
//! their limit (log-log slope below 1/3 over limits at least 2× apart), minRTT is re-measured
//! on live traffic and the cuts are taken back (see `futile.rs`, which also says why the proxy
//! leaves it off: with real foreign CPU work the host itself ran out of CPU).
//!
//! A fourth addition, off by default: `exact_cuts`. Envoy adds `√limit` to every new limit, so
//! that a limit holding just above tolerance does not decay; at small limits that headroom is
//! most of the limit, and the limit cannot come down: from 5, any gradient above 0.64 gives 5
//! or more, and even the steepest cut (×0.5) gives `2.5 + 1.6 → 4`; from 3 it gives 2, never
//! 1 — on a 1-worker service whose callers allow 5 service times, 4–5 in flight is a queue as
//! long as their patience (issue 28's sweep: goodput 0.2 % at 2×). With `exact_cuts` a window
//! above tolerance lowers the limit by at least one (at large limits Envoy's formula already
//! does, and is kept: cutting to `limit × gradient` there left the limit hugging the knee, and
//! the lower criticalities' shares of it left workers idle). And a window in which at least
//! half the requests were dropped (timed out) halves the limit exactly: their latency is where
//! the caller gave up, a lower bound of the true one, so when the timeout is within
//! `1 + buffer` of minRTT the gradient read from them says "near tolerance" however long the
//! queue behind them has grown — TCP's response to loss, which does not ask by how much the
//! delay rose.
//!
//! A fifth addition, off by default: `rtt_windows`. Envoy closes a sampling window every
//! `update_interval` (100 ms) whatever the service's latency; for a 1 ms service that is a
//! hundred round trips per decision, and a cold start at a limit too large for the service
//! (20 at a 1-worker service) took four windows — 400 ms, the whole of a short run — to halve
//! down to what it can take, its queue growing meanwhile. With `rtt_windows` a window also
//! closes once it holds `request_count` samples and has lasted minRTT: decisions come about
//! once per round trip (TCP adjusts its window per round trip too), and never on fewer
//! samples than a minRTT measurement takes. Slow services are unaffected (their windows fill
//! in more than 100 ms).
//!
//! A sixth addition, off by default: `knee_cap` (`knee.rs`). The gradient's tolerance is a
//! queue in the upstream when the upstream is large (a median at 1.5 × minRTT is a third of a
//! service time of waiting at 1000 workers); with the rule, the mean latency of requests
//! grouped by the in-flight count they were admitted at shows where more in flight only
//! adds latency, and Little's law caps the limit at what keeps the upstream busy with a
//! tenth of a service time of queueing — BBR's in-flight bound of bandwidth × `RTprop`.
//!
//! A seventh addition, off by default: `throughput_ceiling` (`thrash.rs`). An upstream that
//! thrashes when given more than it can run delivers *less* past its knee, and the gradient's
//! tolerance sits past it (a 20-worker thrashing service at 1× its capacity was held at 30–150
//! in flight and served a third of its rate); by Little's law each in-flight level's delivery
//! is level / mean time a slot was held, times the share answered (a request given up on held
//! its slot and delivered nothing), and when a level delivers clearly less than a lower one the limit
//! is held where in flight stays at the level that delivered most — only then, so a plain FIFO
//! upstream (flat delivery past its knee) is left to the gradient.
//!
//! An eighth addition, off by default: `rebaseline_on_flat_levels` (needs `live_min_rtt`;
//! `flat.rs`). Latency above tolerance that does not rise with the in-flight level each
//! request was admitted at is the upstream's, not a queue of ours; the baseline is raised to
//! it (at most doubled, once until it is back) instead of cutting. A 20-worker upstream that
//! dropped to half speed at half its capacity's load was otherwise cut one by one to a limit
//! of 1. So is a step up at levels that ran calm just before, or at a level held above
//! tolerance (a closed loop's, held by `unqueued_floor`).
//!
//! A ninth addition, off by default: `unqueued_floor` (needs `throughput_ceiling`;
//! `floor.rs`). A cut does not take the limit below the in-flight level `thrash.rs`'s levels
//! show running unqueued: an exponential service's window medians otherwise swung a 20-worker
//! upstream's limit below its workers, idling them while requests waited in the proxy.
//!
//! A tenth addition, off by default: `proportional_growth`. Envoy's step assumes each window
//! holds a measurement; a window that closes on its timer with a few answers does not — the
//! median of three exponential draws lies in 0.2–1.6 × the mean only four times in five, and
//! just after a change the first answers back are the fastest. With the rule, a window of fewer than
//! `request_count` answers grows the limit by that share of the step the gradient asks (at
//! least one slot), so growth comes per measurement's worth of answers, as TCP's congestion
//! avoidance grows per acknowledged window rather than per timer tick (RFC 5681 §3.1). Cuts
//! are not scaled: a queue is undone at once, and a window that timed out is censored, not
//! thin. Without it a 1-worker 10 ms service's limit swung 4 → 10 → 4 within a quarter second,
//! growing on a window of 8 answers, and a 20-worker service that slows with what it holds
//! went 37 → 43 and 37 → 48 on windows of two, each step a queue its CRITICAL work waited in
//! (issue 28's sweep). Scaling cuts the same way held a slow exponential service's limit low after its
//! cold start (`bench/results/proportional-growth-issue28.md`).
//!
//! Differences forced by our shape: Envoy runs timers; here everything happens on the next sample
//! (a window due at `t` opens at the first sample at or after `t`), with time only from
//! [`Sample::now`]. Percentiles come from a fixed log-linear histogram (two significant digits,
//! like Envoy's circllhist). Dropped requests are sampled like any other (their long rtt is the
//! congestion signal); `in_flight` is not an input, as in Envoy.
//!
//! Defaults (Envoy `GradientControllerConfig` proto / `gradient_controller.cc`): request_count 50,
//! jitter 15 %, min_concurrency 3, buffer 25 %, sample percentile p50, max_concurrency_limit 1000.
//! Envoy requires `interval` and `concurrency_update_interval` without defaults; we default them to
//! the values of the example in Envoy's docs: 60 s and 100 ms.

use std::time::{Duration, Instant};

use self::flat::WindowLevels;
use self::futile::FutileCuts;
use self::knee::KneeCap;
use self::live::LiveMinRtt;
use self::thrash::ThroughputCeiling;
use self::unanswered::Unanswered;
use super::histogram::LatencyHistogram;
use super::{Limit, Sample};
use crate::clock::{nanos_since, saturating_nanos};
use crate::error::ConfigError;
use crate::random::RandomSource;

mod by_level;
mod cohort;
mod config;
mod flat;
mod floor;
mod futile;
mod knee;
mod levels;
mod live;
mod slow_start;
mod thrash;
mod unanswered;
mod window;

pub use self::config::EnvoyGradientConfig;

pub(super) const NAME: &str = "envoy_gradient";

/// Gradient clamp (Envoy: 0.5 ..= 2.0, "to prevent extreme changes between sample windows").
const GRADIENT_MIN: f64 = 0.5;
const GRADIENT_MAX: f64 = 2.0;
/// Sampling windows at the minimum limit that trigger a minRTT re-measurement (Envoy: 5).
const STALE_MIN_RTT_WINDOWS: u32 = 5;

/// Envoy's gradient controller as a [`Limit`].
#[derive(Debug)]
pub struct EnvoyGradientLimit {
    rng: Box<dyn RandomSource>,
    origin: Instant,
    // Configuration, clamped.
    interval_ns: u64,
    update_ns: u64,
    jitter: f64,
    request_count: u32,
    min_concurrency: usize,
    floor: usize,
    max: usize,
    pin: bool,
    buffer: f64,
    percentile: f64,
    dynamic_min_rtt: bool,
    app_limited_growth: Option<f64>,
    one_change_per_rtt: bool,
    /// `rebaseline_on_futile_cut` (only with `one_change_per_rtt`).
    futile: Option<FutileCuts>,
    /// `live_min_rtt` (only with a dynamic minRTT).
    live: Option<LiveMinRtt>,
    latency_slack: f64,
    exact_cuts: bool,
    rtt_windows: bool,
    proportional_growth: bool,
    /// `knee_cap` (`knee.rs`).
    knee: Option<KneeCap>,
    /// `throughput_ceiling` (`thrash.rs`).
    thrash: Option<ThroughputCeiling>,
    /// `unqueued_floor` (`floor.rs`; only with `throughput_ceiling`, whose levels it reads).
    unqueued_floor: bool,
    /// Cuts the floor raised.
    floor_holds: u64,
    /// When the live minRTT last took the latency at one in flight under sustained overload
    /// (`live.rs`; ns since the origin), if ever: at most once per `interval`.
    overload_fit_ns: Option<u64>,
    /// `rebaseline_on_flat_levels`: samples by level since latency left tolerance (`flat.rs`).
    flat: Option<WindowLevels>,
    /// The callers' latency budget in nanoseconds (0 = unknown).
    budget_ns: f64,
    /// The controller holds some level's overload sustained ([`Limit::set_overloaded`]).
    overloaded: bool,
    /// The share of the limit the lowest level may fill ([`Limit::set_lowest_share`]).
    lowest_share: f64,
    /// With `live_min_rtt`: growing by one per fast sample until a window is slow (see
    /// `live.rs`).
    slow_start: bool,
    /// `slow_start_gain`: slots added per fast answer in slow start.
    slow_start_gain: f64,
    /// Fractional slots slow start has earned but not yet added.
    slow_start_credit: f64,
    /// The highest in-flight level an answer was admitted at and came back from within
    /// `1 + SLOW_START_KNEE` × minRTT: slow start grows to at most twice it (`live.rs`).
    slow_start_level: usize,
    /// Answers (latency, level) back before any minRTT, for slow start once there is one
    /// (`slow_start.rs`).
    answers_before_min_rtt: Vec<(u64, usize)>,
    /// In slow start, the share of recent answers back within minRTT's tolerance (gain 1/8,
    /// from 1): [`Limit::probing`] while at least a third.
    fast_share: f64,
    // State.
    limit: usize,
    deferred_limit: usize,
    in_min_rtt_window: bool,
    min_rtt_epoch_ns: u64,
    /// With `one_change_per_rtt`: when the limit last changed (samples of requests started
    /// earlier are not used to change it again); 0 otherwise.
    change_epoch_ns: u64,
    /// With `one_change_per_rtt`: the window latency that made the last change (0 when the
    /// change was not a window's verdict).
    change_rtt_ns: f64,
    next_min_rtt_ns: u64,
    window_start_ns: u64,
    /// The baseline the gradient uses: the measured minRTT, or above it after a re-baseline.
    min_rtt_ns: f64,
    /// minRTT as last measured (or fixed); a re-baselined `min_rtt_ns` never goes below it.
    measured_min_rtt_ns: f64,
    sample_rtt_ns: f64,
    consecutive_at_floor: u32,
    /// Largest `Sample::in_flight` seen since the sampling window opened.
    window_peak_in_flight: usize,
    /// Largest `Sample::in_flight` among the samples the open window counted (recorded).
    window_peak_counted: usize,
    /// Dropped samples among those the open window counted.
    window_dropped: u32,
    /// Requests whose callers gave up past minRTT but within tolerance (`unanswered.rs`).
    unanswered: Unanswered,
    /// Whether the last closed window had at least half its samples dropped, or it closed a
    /// verdict of mostly unanswered (`unanswered.rs`).
    censored: bool,
    hist: LatencyHistogram,
}

impl EnvoyGradientLimit {
    /// A gradient controller whose first minRTT window opens at `origin`, after validating `cfg`.
    /// `rng` draws the jitter.
    pub fn new(
        cfg: &EnvoyGradientConfig,
        origin: Instant,
        rng: Box<dyn RandomSource>,
    ) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(Self::new_clamped(cfg, origin, rng))
    }

    pub(super) fn new_clamped(
        cfg: &EnvoyGradientConfig,
        origin: Instant,
        rng: Box<dyn RandomSource>,
    ) -> Self {
        let finite_or = |v: f64, lo: f64, hi: f64, d: f64| {
            if v.is_finite() {
                v.clamp(lo, hi)
            } else {
                d
            }
        };
        let min_concurrency = cfg.min_concurrency.max(1);
        let floor = cfg.min_concurrency_limit.unwrap_or(min_concurrency).max(1);
        let max = cfg.max_concurrency_limit.max(floor).max(min_concurrency);
        let fixed = cfg.fixed_min_rtt.map(|d| saturating_nanos(d).max(1) as f64);
        let interval_ns = saturating_nanos(cfg.interval).max(1_000_000);
        let percentile = finite_or(cfg.sample_percentile, 0.0, 1.0, 0.5);
        let request_count = cfg.request_count.max(1);
        let mut me = EnvoyGradientLimit {
            rng,
            origin,
            interval_ns,
            update_ns: saturating_nanos(cfg.update_interval).max(1),
            jitter: finite_or(cfg.jitter, 0.0, 1.0, 0.15),
            request_count,
            min_concurrency,
            floor,
            max,
            pin: cfg.min_concurrency_limit.is_none(),
            buffer: finite_or(cfg.buffer, 0.0, 10.0, 0.25),
            percentile,
            dynamic_min_rtt: fixed.is_none(),
            app_limited_growth: cfg
                .app_limited_growth
                .filter(|f| f.is_finite())
                .map(|f| f.clamp(1.0, 100.0)),
            one_change_per_rtt: cfg.one_change_per_rtt,
            futile: (cfg.rebaseline_on_futile_cut && cfg.one_change_per_rtt)
                .then(FutileCuts::default),
            live: (cfg.live_min_rtt && fixed.is_none()).then(|| {
                LiveMinRtt::new(
                    min_concurrency,
                    request_count,
                    percentile,
                    interval_ns,
                    1.0 + finite_or(cfg.buffer, 0.0, 10.0, 0.25),
                )
            }),
            latency_slack: finite_or(cfg.latency_slack, 0.0, 1.0, 0.0),
            exact_cuts: cfg.exact_cuts,
            rtt_windows: cfg.rtt_windows,
            proportional_growth: cfg.proportional_growth,
            knee: cfg.knee_cap.then(|| KneeCap::new(interval_ns)),
            thrash: cfg.throughput_ceiling.then(ThroughputCeiling::new),
            unqueued_floor: cfg.unqueued_floor && cfg.throughput_ceiling,
            floor_holds: 0,
            overload_fit_ns: None,
            flat: (cfg.rebaseline_on_flat_levels && cfg.live_min_rtt && fixed.is_none())
                .then(WindowLevels::default),
            budget_ns: 0.0,
            overloaded: false,
            lowest_share: 1.0,
            slow_start: cfg.live_min_rtt && fixed.is_none(),
            slow_start_gain: finite_or(cfg.slow_start_gain, 1.0, 8.0, 1.0),
            slow_start_credit: 0.0,
            slow_start_level: 0,
            answers_before_min_rtt: slow_start::answers_before_min_rtt(),
            fast_share: 1.0,
            limit: cfg
                .initial_limit
                .unwrap_or(min_concurrency)
                .clamp(floor, max),
            deferred_limit: 0,
            in_min_rtt_window: false,
            min_rtt_epoch_ns: 0,
            change_epoch_ns: 0,
            change_rtt_ns: 0.0,
            next_min_rtt_ns: 0,
            window_start_ns: 0,
            min_rtt_ns: fixed.unwrap_or(0.0),
            measured_min_rtt_ns: fixed.unwrap_or(0.0),
            sample_rtt_ns: 0.0,
            consecutive_at_floor: 0,
            window_peak_in_flight: 0,
            window_peak_counted: 0,
            window_dropped: 0,
            unanswered: Unanswered::default(),
            censored: false,
            hist: LatencyHistogram::new(),
        };
        if me.periodic_min_rtt() {
            me.enter_min_rtt_window(0);
        }
        me
    }

    /// The last measured minRTT (nanoseconds); 0 before the first measurement completes.
    pub fn min_rtt_nanos(&self) -> f64 {
        self.min_rtt_ns
    }

    /// minRTT as last measured (nanoseconds); [`min_rtt_nanos`](Self::min_rtt_nanos) is above it
    /// while a re-baseline (`rebaseline_on_futile_cut`) holds.
    pub fn measured_min_rtt_nanos(&self) -> f64 {
        self.measured_min_rtt_ns
    }

    /// How many times futile cuts re-baselined minRTT (`rebaseline_on_futile_cut`).
    pub fn futile_rebaselines(&self) -> u64 {
        self.futile.as_ref().map_or(0, FutileCuts::rebaselines)
    }

    /// The last sampling window's summarised RTT (nanoseconds); 0 before the first window.
    pub fn sample_rtt_nanos(&self) -> f64 {
        self.sample_rtt_ns
    }

    /// How many times `knee_cap` capped the limit.
    pub fn knee_caps(&self) -> u64 {
        self.knee.as_ref().map_or(0, KneeCap::caps)
    }

    /// How many times `throughput_ceiling` lowered the limit.
    pub fn throughput_caps(&self) -> u64 {
        self.thrash.as_ref().map_or(0, ThroughputCeiling::caps)
    }

    /// How many cuts `unqueued_floor` held above where the gradient would have put them.
    pub fn floor_holds(&self) -> u64 {
        self.floor_holds
    }

    /// `knee_cap`'s unqueued mean latency `R₀` (nanoseconds); 0 while unknown or off.
    pub fn knee_base_nanos(&self) -> f64 {
        self.knee.as_ref().map_or(0.0, KneeCap::base_nanos)
    }

    /// Whether a minRTT measurement is in progress.
    pub fn measuring_min_rtt(&self) -> bool {
        self.in_min_rtt_window
    }

    /// When the next minRTT window is due (only meaningful outside a window).
    pub fn next_min_rtt_at(&self) -> Instant {
        self.origin + Duration::from_nanos(self.next_min_rtt_ns)
    }
}

impl Limit for EnvoyGradientLimit {
    fn name(&self) -> &'static str {
        NAME
    }

    fn limit(&self) -> usize {
        self.limit
    }

    fn set_latency_budget(&mut self, budget: Duration) {
        self.budget_ns = saturating_nanos(budget) as f64;
    }

    fn set_overloaded(&mut self, overloaded: bool) {
        self.overloaded = overloaded;
    }

    fn probing(&self) -> bool {
        // Two conditions beside slow start, which alone outlasts a queue up to twice a
        // provisional minRTT (`window.rs`: a 20-worker service at 10 × its capacity, refused
        // nothing at the door, was refused at the max wait instead, R4a median 0 → 100 ms):
        // - at least a third of recent answers within minRTT's tolerance: an exponential or
        //   lognormal (σ = 1) service answers within 1.5 × its median about two times in
        //   three, a constant or bimodal one nearly always; behind a queue in the upstream
        //   nearly every answer is past it;
        // - the limit no further than slow start grows it (twice the highest level answered
        //   at minRTT): past that it is not a floor. A 1- or 4-worker upstream answers the
        //   first round at minRTT from as many levels as it has workers, so the initial 20 is
        //   past it at once; without this its first round's arrivals all queued, and small
        //   upstreams lost goodput (issue 28's small sweep, R3 −0.0009 over five seeds).
        // - or minRTT rests on the first answers back alone (`LiveMinRtt::partial`): the
        //   fastest of the start's, so hardly any later answer is within an eighth of it and
        //   the ceiling read from it is the lowest level's. Behind a 1000-worker, 500 ms
        //   exponential upstream whose first answer back (19.5 ms, for a median of 327 ms) was
        //   the lowest level's, the ceiling was 5, the limit of 20 counted as found, and the
        //   queue of the arrivals of the round trip it took to know more was refused at the
        //   door as a standing one (`bench/robustness.sh`'s `w1000-500ms-exp-t5-0.9x-c0.6`:
        //   78 SHEDDABLE requests).
        self.slow_start
            && self.fast_share * 3.0 >= 1.0
            && (self.measured_min_rtt_ns <= 0.0
                || self.limit <= self.slow_start_ceiling()
                || self.live.as_ref().is_some_and(LiveMinRtt::partial))
    }

    fn set_lowest_share(&mut self, share: f64) {
        // Validated by the limiter to (0, 1]; anything else leaves the cap as computed.
        self.lowest_share = if share > 0.0 && share <= 1.0 {
            share
        } else {
            1.0
        };
    }

    /// A request whose caller gave up while it ran (right-censored: its latency is at least
    /// `s.rtt`). Past tolerance it proves queueing as surely as a completed request that slow,
    /// so it counts like a timed-out one (kept out of minRTT, counted as censored in its
    /// window). Without this, when every admitted request outlived its caller the limit had
    /// no samples at all and stayed where it was while the upstream's queue grew (a 1-worker,
    /// 1 ms backend with 5 ms callers: the limit held at 20, 4 requests served in time).
    ///
    /// Below tolerance one such bound says nothing, but past minRTT it counts towards a
    /// verdict that most requests went unanswered (`unanswered.rs`), which censors the window.
    fn on_abandoned(&mut self, s: &Sample) {
        let rtt_ns = saturating_nanos(s.rtt);
        if self.measured_min_rtt_ns > 0.0 && rtt_ns as f64 > self.tolerated_ns() {
            self.on_sample(&Sample {
                dropped: true,
                ..*s
            });
            return;
        }
        let now_ns = nanos_since(self.origin, s.now);
        if let Some(live) = self.live.as_mut() {
            live.on_abandoned(now_ns, rtt_ns, s.in_flight);
        }
        if self.slow_start && self.measured_min_rtt_ns <= 0.0 {
            // Callers giving up before any answer came: the limit is no floor (`probing`).
            self.fast_share -= self.fast_share / 8.0;
        }
        if let Some(f) = self.flat.as_mut() {
            // flat.rs: counted as dropped all the same (`on_sample` counts the others).
            f.dropped(now_ns);
        }
        // Before any answer (no minRTT) every give-up is unanswered: the windows it closes
        // count towards measuring at low concurrency (`window.rs`), as answers would.
        if rtt_ns as f64 > self.min_rtt_ns {
            self.advance_window(now_ns);
            if self.counts(now_ns, rtt_ns) {
                self.unanswered.record(rtt_ns);
            }
        }
    }

    fn on_sample(&mut self, s: &Sample) {
        let now_ns = nanos_since(self.origin, s.now);
        let rtt_ns = saturating_nanos(s.rtt);

        if let Some(live) = self.live.as_mut() {
            if let Some(m) = live.on_sample(now_ns, rtt_ns, s.in_flight, s.dropped) {
                // A measurement supersedes a futile-cut re-baseline, as Envoy's window does.
                self.min_rtt_ns = m;
                self.measured_min_rtt_ns = m;
            }
            // The upstream got slower (live.rs): re-measured at once, not after the floor.
            if let Some(m) = live.slower(self.limit, self.measured_min_rtt_ns * (1.0 + self.buffer))
            {
                self.min_rtt_ns = m;
                self.measured_min_rtt_ns = m;
                // So is its latency by in-flight level (knee.rs).
                if let Some(k) = self.knee.as_mut() {
                    k.forget();
                }
                if let Some(t) = self.thrash.as_mut() {
                    t.forget();
                }
            }
            let measured = self.measured_min_rtt_ns > 0.0;
            // Not on a minRTT from the first answers back alone: they are the fastest, and
            // every later answer is past their tolerance (`LiveMinRtt::partial`). Before any
            // minRTT, a request that failed is a slow answer all the same.
            if self.slow_start && (s.dropped || measured) && !live.partial() {
                let tolerated = self.min_rtt_ns * (1.0 + self.buffer);
                let fast = !s.dropped && rtt_ns as f64 <= tolerated;
                self.fast_share += (f64::from(u8::from(fast)) - self.fast_share) / 8.0;
            }
            if self.slow_start && !s.dropped {
                self.slow_start_answer(rtt_ns, s.in_flight, measured);
            }
        }

        self.advance_window(now_ns);

        // This sample belongs to the window now open (it may just have closed the last one).
        self.window_peak_in_flight = self.window_peak_in_flight.max(s.in_flight);
        if let Some(f) = self.flat.as_mut() {
            // flat.rs: a dropped request may still be running upstream, a queue we no longer
            // count.
            f.count(now_ns, s.dropped);
        }
        // knee.rs groups every completed request by its admission's in-flight level, across
        // windows and limit changes: it needs no epoch.
        if let (Some(k), false) = (self.knee.as_mut(), s.dropped) {
            k.record(now_ns, s.in_flight, rtt_ns);
        }
        // So does thrash.rs, for the same reason; a request given up on held its slot and
        // delivered nothing, which counts there.
        if let Some(t) = self.thrash.as_mut() {
            if s.dropped {
                t.given_up(now_ns, s.in_flight, rtt_ns);
            } else {
                t.record(now_ns, s.in_flight, rtt_ns);
            }
        }

        if !self.counts(now_ns, rtt_ns) {
            return;
        }
        self.hist.record(rtt_ns);
        // flat.rs: not during slow start, whose ramp makes the level follow the time.
        if let (Some(f), false) = (self.flat.as_mut(), s.dropped || self.slow_start) {
            f.record(s.in_flight, rtt_ns);
        }
        self.window_peak_counted = self.window_peak_counted.max(s.in_flight);
        self.window_dropped += u32::from(s.dropped);

        if self.in_min_rtt_window && self.hist.count() >= self.request_count {
            self.finish_min_rtt_window(now_ns);
        }
    }
}
