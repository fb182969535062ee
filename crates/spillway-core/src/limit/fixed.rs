//! A constant limit (Netflix concurrency-limits `FixedLimit`).
//!
//! Why keep one: when the capacity of a task is known (a pool of N connections, N worker
//! threads), a constant is the most predictable limit, and it is the baseline the adaptive
//! algorithms are compared against in the simulator.

use super::{Limit, Sample};
use crate::error::ConfigError;

pub(super) const NAME: &str = "fixed";

/// Parameters of [`FixedLimit`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct FixedConfig {
    /// The limit. Default 200: no upstream default exists (Netflix's `FixedLimit` requires a
    /// value); 200 is Netflix Gradient2's `maxConcurrency`, so switching algorithms keeps the
    /// same ceiling.
    pub limit: usize,
}

impl Default for FixedConfig {
    fn default() -> Self {
        FixedConfig { limit: 200 }
    }
}

impl FixedConfig {
    /// `limit` must be at least 1.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.limit < 1 {
            return Err(ConfigError::new(
                "limit.fixed.limit",
                self.limit,
                "an integer >= 1",
            ));
        }
        Ok(())
    }
}

/// A limit that never moves.
#[derive(Debug, Clone)]
pub struct FixedLimit {
    limit: usize,
}

impl FixedLimit {
    /// A fixed limit, after validating `cfg`.
    pub fn new(cfg: &FixedConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(Self::new_clamped(cfg))
    }

    pub(super) fn new_clamped(cfg: &FixedConfig) -> Self {
        FixedLimit {
            limit: cfg.limit.max(1),
        }
    }
}

impl Limit for FixedLimit {
    fn name(&self) -> &'static str {
        NAME
    }

    fn limit(&self) -> usize {
        self.limit
    }

    fn on_sample(&mut self, _s: &Sample) {}
}
