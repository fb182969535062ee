//! Concurrency-limit algorithms: how many requests may run at once.
//!
//! Why: a rate limit (requests/s) goes stale as soon as request cost, hardware or fleet size
//! changes, while the number of requests in flight is what actually exhausts a task (Little's law:
//! in-flight = throughput × latency). So, like TCP congestion control, we *estimate* a concurrency
//! window from what completed requests tell us — their latency, whether they were dropped, and how
//! full the window was — and refuse (or queue) work beyond it. The admission limiter
//! ([`crate::limiter`]) owns one [`Limit`] behind a mutex, feeds it one [`Sample`] per released
//! permit, and mirrors [`Limit::limit`] into an atomic for the lock-free admit path.
//!
//! Algorithms (each module documents its parameters, defaults and their source):
//!
//! | type | signal | source |
//! | --- | --- | --- |
//! | [`FixedLimit`] | none: a constant | Netflix concurrency-limits `FixedLimit` |
//! | [`AimdLimit`] | drops / timeouts (loss-based) | Netflix concurrency-limits `AIMDLimit`; TCP Reno AIMD |
//! | [`Gradient2Limit`] | short RTT vs long-term average RTT | Netflix concurrency-limits `Gradient2Limit` |
//! | [`EnvoyGradientLimit`] | windowed RTT percentile vs periodically measured minRTT | Envoy adaptive concurrency filter, gradient controller |
//!
//! [`LimitConfig::default`] is [`Gradient2Limit`] with Netflix's parameters. The admission
//! policy everyone runs by default (`AdmissionConfig::zero_config`, the proxy's and the tower
//! layer's) uses the Envoy controller instead, with live minRTT (never pinned) and a latency
//! slack: under latency that grows smoothly with concurrency Gradient2 drifts up to its
//! `max_limit`, while the Envoy controller settles near capacity (tests in `closed_loop.rs`).
//!
//! Rules every implementation keeps: time comes only from [`Sample::now`] (never the system
//! clock), no allocation in [`Limit::on_sample`], no panic on any sample (rtt of zero or of
//! centuries), and the limit is always within the configured `[min, max]` and never 0.
//!
//! Configuration is serialisable behind the `serde` feature; durations are written as
//! milliseconds in fields suffixed `_ms` (a float, so `0.5` is 500 µs).

use std::time::{Duration, Instant};

use crate::error::ConfigError;
use crate::random::{RandomSource, ThreadRandom};

mod aimd;
mod envoy;
mod fixed;
mod gradient2;
mod histogram;

pub use aimd::{AimdConfig, AimdLimit};
pub use envoy::{EnvoyGradientConfig, EnvoyGradientLimit};
pub use fixed::{FixedConfig, FixedLimit};
pub use gradient2::{Gradient2Config, Gradient2Limit, QueueSize};

#[cfg(test)]
mod closed_loop;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

/// One completed (or abandoned) request, as the limit algorithm sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Time from admission to completion.
    pub rtt: Duration,
    /// Requests in flight when this one was admitted (including it): tells the algorithm whether
    /// the current limit was actually being used.
    pub in_flight: usize,
    /// The request timed out or was refused for overload downstream: a congestion signal.
    pub dropped: bool,
    /// When the request completed.
    pub now: Instant,
}

/// A concurrency-limit algorithm.
///
/// `on_sample` takes `&mut self`: the limiter serialises calls behind a mutex, so algorithms keep
/// plain fields. `limit` must be cheap (a field read): the limiter mirrors it into an atomic after
/// every sample.
pub trait Limit: Send + std::fmt::Debug {
    /// A short stable name for metrics and logs (`"fixed"`, `"aimd"`, `"gradient2"`, `"envoy_gradient"`).
    fn name(&self) -> &'static str;
    /// The current concurrency limit; always at least 1.
    fn limit(&self) -> usize;
    /// Feeds one completed request into the estimate.
    fn on_sample(&mut self, s: &Sample);
    /// How long callers give a request, as far as the admission controller knows (their
    /// deadlines, or the queue's max wait when they send none), set before each sample. An
    /// algorithm may tolerate latency up to a share of it before cutting (the Envoy
    /// gradient's `latency_slack`); the default ignores it.
    fn set_latency_budget(&mut self, _budget: Duration) {}
    /// A request whose caller gave up while it ran: `s.rtt` is a lower bound on its latency,
    /// and its end is not the upstream's failure. The default learns nothing from it (a loss-
    /// or drift-based algorithm would read it as a failure or a biased sample).
    fn on_abandoned(&mut self, _s: &Sample) {}
    /// Whether the admission controller holds some level's overload to be sustained (refused
    /// for overload for a second on end), set before each sample it feeds. An algorithm may
    /// hold the limit tighter then (the Envoy gradient's `knee_cap`); the default ignores it.
    fn set_overloaded(&mut self, _overloaded: bool) {}
    /// The share of the limit the lowest criticality may fill (the limiter's headroom, 0.8 by
    /// default), set once: a cap meant for what the upstream can run is a cap on that share
    /// (the Envoy gradient's `knee_cap`); the default ignores it.
    fn set_lowest_share(&mut self, _share: f64) {}
    /// Whether the limit is still growing from a start that knew nothing of the upstream (the
    /// Envoy gradient's slow start): it is then a floor of what the upstream runs, not an
    /// estimate of it, and the admission controller refuses no one on a wait estimate made
    /// from it. The default: never (a fixed or configured limit is what it says).
    fn probing(&self) -> bool {
        false
    }
}

/// Which algorithm to run, with its parameters.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "algorithm", rename_all = "snake_case"))]
pub enum LimitConfig {
    /// A constant limit.
    Fixed(FixedConfig),
    /// Additive increase, multiplicative decrease on drops.
    Aimd(AimdConfig),
    /// Netflix's Gradient2 (the default).
    Gradient2(Gradient2Config),
    /// Envoy's adaptive-concurrency gradient controller.
    EnvoyGradient(EnvoyGradientConfig),
}

impl Default for LimitConfig {
    /// [`Gradient2Config::default`]: adaptive, and needs no capacity figure.
    fn default() -> Self {
        LimitConfig::Gradient2(Gradient2Config::default())
    }
}

impl LimitConfig {
    /// Checks every parameter; the error names the field (e.g. `limit.gradient2.smoothing`) and
    /// what it accepts.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self {
            LimitConfig::Fixed(c) => c.validate(),
            LimitConfig::Aimd(c) => c.validate(),
            LimitConfig::Gradient2(c) => c.validate(),
            LimitConfig::EnvoyGradient(c) => c.validate(),
        }
    }

    /// Builds the algorithm; `origin` is the time its clock starts (the Envoy controller's first
    /// minRTT window opens there). Randomness (Envoy's minRTT jitter) comes from [`ThreadRandom`].
    ///
    /// Never panics: call [`validate`](Self::validate) first; out-of-range values that slipped
    /// through are clamped to the nearest accepted value.
    pub fn build(&self, origin: Instant) -> Box<dyn Limit> {
        self.build_with_random(origin, Box::new(ThreadRandom))
    }

    /// [`build`](Self::build) with an injected random source (for reproducible simulations).
    pub fn build_with_random(&self, origin: Instant, rng: Box<dyn RandomSource>) -> Box<dyn Limit> {
        match self {
            LimitConfig::Fixed(c) => Box::new(FixedLimit::new_clamped(c)),
            LimitConfig::Aimd(c) => Box::new(AimdLimit::new_clamped(c)),
            LimitConfig::Gradient2(c) => Box::new(Gradient2Limit::new_clamped(c)),
            LimitConfig::EnvoyGradient(c) => {
                Box::new(EnvoyGradientLimit::new_clamped(c, origin, rng))
            }
        }
    }

    /// [`validate`](Self::validate), then [`build`](Self::build).
    pub fn try_build(&self, origin: Instant) -> Result<Box<dyn Limit>, ConfigError> {
        self.validate()?;
        Ok(self.build(origin))
    }

    /// The algorithm's name, as [`Limit::name`] will report it.
    pub fn name(&self) -> &'static str {
        match self {
            LimitConfig::Fixed(_) => fixed::NAME,
            LimitConfig::Aimd(_) => aimd::NAME,
            LimitConfig::Gradient2(_) => gradient2::NAME,
            LimitConfig::EnvoyGradient(_) => envoy::NAME,
        }
    }
}

/// Checks `[min, max]` bounds and an initial value inside them (shared by AIMD and Gradient2).
fn check_bounds(
    min_field: &'static str,
    min: usize,
    max_field: &'static str,
    max: usize,
    initial_field: &'static str,
    initial: usize,
) -> Result<(), ConfigError> {
    if min < 1 {
        return Err(ConfigError::new(min_field, min, "an integer >= 1"));
    }
    if max < min {
        return Err(ConfigError::new(
            max_field,
            max,
            "an integer >= the minimum limit",
        ));
    }
    if initial < min || initial > max {
        return Err(ConfigError::new(
            initial_field,
            initial,
            "an integer within [minimum limit, maximum limit]",
        ));
    }
    Ok(())
}

/// RTT as f64 nanoseconds, at least 1 ns so ratios never divide by zero (an rtt of 0 is what a
/// coarse clock reports for a very fast request; 1 ns is as good an estimate).
#[inline]
fn rtt_nanos(rtt: Duration) -> f64 {
    (crate::clock::saturating_nanos(rtt) as f64).max(1.0)
}

/// Clamps a float limit into `[min, max]` and truncates it; NaN goes to `min` (defensive: the
/// formulas are guarded, but a limit must never be driven by NaN).
#[inline]
fn clamp_limit(value: f64, min: usize, max: usize) -> f64 {
    if value.is_nan() {
        return min as f64;
    }
    value.clamp(min as f64, max as f64)
}
