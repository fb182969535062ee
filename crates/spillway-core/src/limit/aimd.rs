//! Loss-based AIMD limit (Netflix concurrency-limits `AIMDLimit`; TCP Reno's congestion window).
//!
//! Why: additive increase / multiplicative decrease is the simplest control law that converges to
//! a fair, stable share (Chiu & Jain 1989) and needs only a drop signal, so it works even where
//! latency is too noisy to read. It reacts to overload only once requests already fail, which is
//! why it is not the default.
//!
//! Rules (Netflix `AIMDLimit`, master):
//! - on a drop, or when `rtt > timeout`: `limit = floor(limit × backoff_ratio)`; we also take at
//!   least 1 off (as earlier Netflix versions did with `min(limit − 1, …)`) so small limits still
//!   back off;
//! - else if `in_flight × 2 ≥ limit` (the limit is actually being used): `limit + 1`;
//! - else (app-limited: the limit was not the constraint): unchanged;
//! - then clamp to `[min_limit, max_limit]`.
//!
//! Defaults, all from Netflix `AIMDLimit.Builder`: initial 20, min 20, max 200,
//! backoff ratio 0.9 (accepted range `[0.5, 1)`), timeout 5 s.

use std::time::Duration;

use super::{check_bounds, clamp_limit, Limit, Sample};
use crate::error::{check_range, ConfigError};

pub(super) const NAME: &str = "aimd";

/// Parameters of [`AimdLimit`].
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct AimdConfig {
    /// Starting limit. Default 20 (Netflix).
    pub initial_limit: usize,
    /// Floor. Default 20 (Netflix).
    pub min_limit: usize,
    /// Ceiling. Default 200 (Netflix).
    pub max_limit: usize,
    /// Multiplier applied on a drop, in `[0.5, 1)`. Default 0.9 (Netflix).
    pub backoff_ratio: f64,
    /// An rtt above this counts as a drop. Default 5 s (Netflix `DEFAULT_TIMEOUT`).
    #[cfg_attr(
        feature = "serde",
        serde(rename = "timeout_ms", with = "crate::queue::millis")
    )]
    pub timeout: Duration,
}

impl Default for AimdConfig {
    fn default() -> Self {
        AimdConfig {
            initial_limit: 20,
            min_limit: 20,
            max_limit: 200,
            backoff_ratio: 0.9,
            timeout: Duration::from_secs(5),
        }
    }
}

impl AimdConfig {
    /// Checks bounds (`1 ≤ min ≤ initial ≤ max`), `backoff_ratio ∈ [0.5, 1)` and `timeout > 0`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_bounds(
            "limit.aimd.min_limit",
            self.min_limit,
            "limit.aimd.max_limit",
            self.max_limit,
            "limit.aimd.initial_limit",
            self.initial_limit,
        )?;
        // Netflix's precondition: backoff ratio in [0.5, 1.0).
        check_range(
            "limit.aimd.backoff_ratio",
            self.backoff_ratio,
            0.5,
            1.0,
            "a number in [0.5, 1)",
        )?;
        if self.backoff_ratio >= 1.0 {
            return Err(ConfigError::new(
                "limit.aimd.backoff_ratio",
                self.backoff_ratio,
                "a number in [0.5, 1)",
            ));
        }
        if self.timeout.is_zero() {
            return Err(ConfigError::new(
                "limit.aimd.timeout_ms",
                self.timeout.as_secs_f64() * 1e3,
                "a duration > 0 ms",
            ));
        }
        Ok(())
    }
}

/// Additive-increase, multiplicative-decrease concurrency limit.
#[derive(Debug, Clone)]
pub struct AimdLimit {
    limit: usize,
    min: usize,
    max: usize,
    backoff_ratio: f64,
    timeout: Duration,
}

impl AimdLimit {
    /// An AIMD limit, after validating `cfg`.
    pub fn new(cfg: &AimdConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(Self::new_clamped(cfg))
    }

    pub(super) fn new_clamped(cfg: &AimdConfig) -> Self {
        let min = cfg.min_limit.max(1);
        let max = cfg.max_limit.max(min);
        let backoff_ratio = if cfg.backoff_ratio.is_finite() {
            cfg.backoff_ratio.clamp(0.5, 0.999)
        } else {
            0.9
        };
        AimdLimit {
            limit: cfg.initial_limit.clamp(min, max),
            min,
            max,
            backoff_ratio,
            timeout: cfg.timeout.max(Duration::from_nanos(1)),
        }
    }
}

impl Limit for AimdLimit {
    fn name(&self) -> &'static str {
        NAME
    }

    fn limit(&self) -> usize {
        self.limit
    }

    fn on_sample(&mut self, s: &Sample) {
        let current = self.limit;
        let next = if s.dropped || s.rtt > self.timeout {
            let backed_off = (current as f64 * self.backoff_ratio).floor();
            backed_off.min(current.saturating_sub(1) as f64)
        } else if s.in_flight.saturating_mul(2) >= current {
            current as f64 + 1.0
        } else {
            return;
        };
        self.limit = clamp_limit(next, self.min, self.max) as usize;
    }
}
