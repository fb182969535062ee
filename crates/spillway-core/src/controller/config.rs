//! What a controller is built from: [`AdmissionConfig`] and its validation. The zero-config
//! values live in `preset.rs`; this file only says what each part is and what it accepts.

use std::time::Duration;

use crate::criticality::PerCriticality;
use crate::error::ConfigError;
use crate::limit::LimitConfig;
use crate::limiter::validate_headroom;
use crate::queue::QueueConfig;
use crate::quota::QuotaConfig;
use crate::shed::ShedConfig;

/// Everything the controller needs. `Default` is [`AdmissionConfig::zero_config`], the policy
/// `spillway proxy` runs with no configuration.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
pub struct AdmissionConfig {
    /// The concurrency-limit algorithm (default: the Envoy gradient of
    /// [`zero_config`](Self::zero_config)).
    pub limit: LimitConfig,
    /// Share of the limit each criticality may fill (default 0.8 / 0.9 / 0.95 / 1.0, see
    /// [`crate::limiter`]).
    pub headroom: PerCriticality<f64>,
    /// The admission queue (default: 1024 entries, 100 ms max wait for requests without a
    /// deadline, CoDel 5 ms / 100 ms).
    pub queue: QueueConfig,
    /// Shedding on utilisation (default: SHEDDABLE at 1.0, ramp 0.03, the rest never).
    pub shed: ShedConfig,
    /// Per-customer quotas (default: none, i.e. unlimited).
    pub quota: QuotaConfig,
    /// Attempts beyond this are refused `TooManyAttempts` while overloaded (default 3).
    pub max_attempts: u32,
    /// `Retry-After` hint on refusals for this task's overload (default 1 s; `None` = no hint).
    #[cfg_attr(
        feature = "serde",
        serde(
            rename = "overload_retry_after_ms",
            with = "crate::queue::millis::option"
        )
    )]
    pub overload_retry_after: Option<Duration>,
}

impl AdmissionConfig {
    /// Checks every part; the error names the field and what it accepts.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.limit.validate()?;
        validate_headroom(&self.headroom)?;
        self.queue.validate()?;
        self.shed.validate()?;
        self.quota.validate()?;
        if !(1..=100).contains(&self.max_attempts) {
            return Err(ConfigError::new(
                "max_attempts",
                self.max_attempts,
                "an integer in 1 ..= 100 (attempts per request, the first included)",
            ));
        }
        if let Some(d) = self.overload_retry_after {
            if d > Duration::from_secs(3600) {
                return Err(ConfigError::new(
                    "overload_retry_after",
                    format_args!("{d:?}"),
                    "a duration of at most 1 h, or none",
                ));
            }
        }
        Ok(())
    }
}
