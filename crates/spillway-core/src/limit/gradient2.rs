//! Netflix concurrency-limits `Gradient2Limit`: latency gradient between the last RTT and a
//! long-term average RTT.
//!
//! Why this one is the default: it needs no capacity figure, reacts to queueing (rising latency)
//! before requests fail, and — unlike minimum-RTT algorithms (Vegas, Envoy's controller) — uses an
//! *average* baseline, which Netflix found avoids an unrealistically low baseline and excessive
//! shedding for bursty RPC workloads. It also never has to pin the limit low to re-measure.
//!
//! Per sample (Netflix `Gradient2Limit._update`, facts and formulas):
//! - `short = rtt` (the last sample; the short window is a single measurement);
//! - `long` = exponential moving average of rtt: the first `WARMUP` = 10 samples are a plain
//!   mean, then `long = long·(1−α) + rtt·α` with `α = 2 / (long_window + 1)`;
//! - drift recovery: if `long / short > 2` (latency came back down after a long overload), the
//!   long average is multiplied by 0.95 so the baseline does not lag for minutes;
//! - app-limited: if `in_flight < estimate / 2` the limit was not the constraint, so the estimate
//!   is left alone (low load says nothing about capacity);
//! - `gradient = max(0.5, min(1.0, rtt_tolerance · long / short))` — never grows by the gradient
//!   (growth comes from the queue allowance) and never more than halves on an outlier;
//! - `new = estimate · gradient + queue_size(estimate)`;
//! - `estimate = estimate·(1 − smoothing) + new·smoothing`, clamped to `[min_limit, max_limit]`.
//!
//! Drops are not an input (Netflix ignores `didDrop` here); a timed-out request still feeds its
//! long rtt, which pulls the gradient down.
//!
//! Known limitation (Netflix concurrency-limits issue #137): the baseline is an average of the
//! latency the limit itself causes, so when latency rises *smoothly* with the limit the gradient
//! stays at 1 and the queue allowance grows the limit to `max_limit` (see the closed-loop test).
//! Gradient2 reacts to latency *changes*; `max_limit` must be a real capacity bound.
//!
//! Defaults, all from Netflix `Gradient2Limit.Builder`: initial 20, min 20, max 200, smoothing
//! 0.2, queue size 4 (a constant function of the limit), long window 600 samples, rtt tolerance
//! 1.5 (accepted `≥ 1`).

use super::{check_bounds, clamp_limit, rtt_nanos, Limit, Sample};
use crate::error::{check_range, ConfigError};

pub(super) const NAME: &str = "gradient2";

/// Samples averaged plainly before the exponential average takes over (Netflix
/// `ExpAvgMeasurement` warm-up window of 10).
const WARMUP: u32 = 10;
/// `long / short` above which the long average is decayed (Netflix: 2).
const DRIFT_RATIO: f64 = 2.0;
/// Decay applied to the long average on drift (Netflix: 0.95).
const DRIFT_DECAY: f64 = 0.95;

/// How much the limit may grow beyond the gradient-scaled estimate (the queue allowance).
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum QueueSize {
    /// A constant (Netflix default: 4).
    Fixed(u32),
    /// `max(1, sqrt(estimate))`: grows faster at high limits (Netflix `SquareRootFunction`).
    SquareRoot,
}

impl QueueSize {
    fn of(self, estimate: f64) -> f64 {
        match self {
            QueueSize::Fixed(n) => f64::from(n),
            QueueSize::SquareRoot => estimate.max(0.0).sqrt().floor().max(1.0),
        }
    }
}

/// Parameters of [`Gradient2Limit`].
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct Gradient2Config {
    /// Starting limit. Default 20 (Netflix).
    pub initial_limit: usize,
    /// Floor. Default 20 (Netflix).
    pub min_limit: usize,
    /// Ceiling. Default 200 (Netflix `maxConcurrency`).
    pub max_limit: usize,
    /// Weight of the new estimate per sample, in `(0, 1]`. Default 0.2 (Netflix).
    pub smoothing: f64,
    /// Queue allowance. Default `Fixed(4)` (Netflix).
    pub queue_size: QueueSize,
    /// Samples in the long-term RTT average, `≥ 1`. Default 600 (Netflix).
    pub long_window: u32,
    /// How much latency growth over the baseline is tolerated before shrinking, `≥ 1`
    /// (1.5 = 50 %). Default 1.5 (Netflix).
    pub rtt_tolerance: f64,
}

impl Default for Gradient2Config {
    fn default() -> Self {
        Gradient2Config {
            initial_limit: 20,
            min_limit: 20,
            max_limit: 200,
            smoothing: 0.2,
            queue_size: QueueSize::Fixed(4),
            long_window: 600,
            rtt_tolerance: 1.5,
        }
    }
}

impl Gradient2Config {
    /// Checks bounds (`1 ≤ min ≤ initial ≤ max`), `smoothing ∈ (0, 1]`, `long_window ≥ 1`,
    /// `rtt_tolerance ∈ [1, 100]`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_bounds(
            "limit.gradient2.min_limit",
            self.min_limit,
            "limit.gradient2.max_limit",
            self.max_limit,
            "limit.gradient2.initial_limit",
            self.initial_limit,
        )?;
        check_range(
            "limit.gradient2.smoothing",
            self.smoothing,
            f64::MIN_POSITIVE,
            1.0,
            "a number in (0, 1]",
        )?;
        if self.long_window < 1 {
            return Err(ConfigError::new(
                "limit.gradient2.long_window",
                self.long_window,
                "an integer >= 1 (samples)",
            ));
        }
        check_range(
            "limit.gradient2.rtt_tolerance",
            self.rtt_tolerance,
            1.0,
            100.0,
            "a number in [1, 100]",
        )
    }
}

/// Netflix's Gradient2 concurrency limit.
#[derive(Debug, Clone)]
pub struct Gradient2Limit {
    estimate: f64,
    limit: usize,
    min: usize,
    max: usize,
    smoothing: f64,
    queue_size: QueueSize,
    alpha: f64,
    tolerance: f64,
    long_rtt: f64,
    long_count: u32,
    last_rtt: f64,
}

impl Gradient2Limit {
    /// A Gradient2 limit, after validating `cfg`.
    pub fn new(cfg: &Gradient2Config) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(Self::new_clamped(cfg))
    }

    pub(super) fn new_clamped(cfg: &Gradient2Config) -> Self {
        let min = cfg.min_limit.max(1);
        let max = cfg.max_limit.max(min);
        let limit = cfg.initial_limit.clamp(min, max);
        let smoothing = if cfg.smoothing.is_finite() {
            cfg.smoothing.clamp(f64::MIN_POSITIVE, 1.0)
        } else {
            0.2
        };
        let tolerance = if cfg.rtt_tolerance.is_finite() {
            cfg.rtt_tolerance.clamp(1.0, 100.0)
        } else {
            1.5
        };
        Gradient2Limit {
            estimate: limit as f64,
            limit,
            min,
            max,
            smoothing,
            queue_size: cfg.queue_size,
            alpha: 2.0 / (f64::from(cfg.long_window.max(1)) + 1.0),
            tolerance,
            long_rtt: 0.0,
            long_count: 0,
            last_rtt: 0.0,
        }
    }

    /// The long-term average RTT (the baseline), in nanoseconds; 0 before the first sample.
    pub fn long_rtt_nanos(&self) -> f64 {
        self.long_rtt
    }

    /// The last sample's RTT, in nanoseconds; 0 before the first sample.
    pub fn short_rtt_nanos(&self) -> f64 {
        self.last_rtt
    }

    /// The unrounded estimate the limit is taken from.
    pub fn estimate(&self) -> f64 {
        self.estimate
    }

    fn add_long(&mut self, rtt: f64) -> f64 {
        if self.long_count < WARMUP {
            self.long_count += 1;
            let n = f64::from(self.long_count);
            self.long_rtt += (rtt - self.long_rtt) / n;
        } else {
            self.long_rtt = self.long_rtt * (1.0 - self.alpha) + rtt * self.alpha;
        }
        self.long_rtt
    }
}

impl Limit for Gradient2Limit {
    fn name(&self) -> &'static str {
        NAME
    }

    fn limit(&self) -> usize {
        self.limit
    }

    fn on_sample(&mut self, s: &Sample) {
        // `rtt_nanos` is ≥ 1 and finite (≤ u64::MAX), so every ratio below is finite.
        let short = rtt_nanos(s.rtt);
        self.last_rtt = short;
        let queue = self.queue_size.of(self.estimate.floor());
        let long = self.add_long(short);

        if long / short > DRIFT_RATIO {
            self.long_rtt *= DRIFT_DECAY;
        }

        if (s.in_flight as f64) < self.estimate / 2.0 {
            return;
        }

        let gradient = (self.tolerance * long / short).clamp(0.5, 1.0);
        let target = self.estimate * gradient + queue;
        let smoothed = self.estimate * (1.0 - self.smoothing) + target * self.smoothing;
        self.estimate = clamp_limit(smoothed, self.min, self.max);
        self.limit = (self.estimate as usize).clamp(self.min, self.max);
    }
}
