//! The `[shutdown]` table: the drain delay and timeout after SIGTERM (what they do is `crate::drain`).
//!
//! Why here rather than beside the drain: the configuration is the layer every other module
//! reads, and it must not import the modules it configures.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use spillway_core::ConfigError;

/// The `[shutdown]` table.
///
/// ```toml
/// [shutdown]
/// drain_delay_ms = 0        # keep serving this long after SIGTERM while /ready says 503
/// drain_timeout_ms = 5000   # then wait at most this long for requests in progress
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ShutdownConfig {
    /// After SIGTERM, keep accepting and serving this long while `/ready` answers 503, so load
    /// balancers stop sending before the listener closes. Default 0 (close at once).
    pub drain_delay_ms: u64,
    /// Then, the longest wait for requests in progress before the process exits anyway.
    /// Default 5000.
    pub drain_timeout_ms: u64,
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        ShutdownConfig {
            drain_delay_ms: 0,
            drain_timeout_ms: 5000,
        }
    }
}

impl ShutdownConfig {
    /// Checks both bounds; `ConfigError::field` is the key inside `[shutdown]`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.drain_delay_ms > 600_000 {
            return Err(ConfigError::new(
                "drain_delay_ms",
                self.drain_delay_ms,
                "milliseconds from 0 to 600000 (10 minutes)",
            ));
        }
        if self.drain_timeout_ms > 600_000 {
            return Err(ConfigError::new(
                "drain_timeout_ms",
                self.drain_timeout_ms,
                "milliseconds from 0 to 600000 (10 minutes)",
            ));
        }
        Ok(())
    }

    /// The drain delay.
    pub fn delay(&self) -> Duration {
        Duration::from_millis(self.drain_delay_ms)
    }

    /// The drain timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.drain_timeout_ms)
    }
}
