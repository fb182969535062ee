//! The `[log]` table: the access log's keys (the writer that uses them is `crate::access`).
//!
//! Why here rather than beside the writer: the configuration is the layer every other module
//! reads, and it must not import the modules it configures.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use spillway_core::ConfigError;

/// The `[log]` section.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// The access log.
    pub access: AccessLogConfig,
}

impl LogConfig {
    /// Checks the access log's keys; `ConfigError::field` is the key inside `[log]`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let a = &self.access;
        if !(0.0..=1.0).contains(&a.sample) {
            return Err(ConfigError::new(
                "access.sample",
                a.sample,
                "a fraction from 0.0 to 1.0 (1.0 logs every request)",
            ));
        }
        if a.path.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
            return Err(ConfigError::new(
                "access.path",
                "\"\"",
                "a file path (leave the key out to log to stderr)",
            ));
        }
        Ok(())
    }
}

/// `[log.access]`: one line per answered request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AccessLogConfig {
    /// Write the access log. Default false.
    pub enabled: bool,
    /// The fraction of requests logged, drawn per request. Default 1.0.
    pub sample: f64,
    /// The file appended to (created if missing); default (unset) stderr.
    pub path: Option<PathBuf>,
    /// `text` or `json`; default (unset) the process's `--log-format`.
    pub format: Option<AccessFormat>,
}

impl Default for AccessLogConfig {
    fn default() -> Self {
        AccessLogConfig {
            enabled: false,
            sample: 1.0,
            path: None,
            format: None,
        }
    }
}

/// The access log's line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccessFormat {
    /// `key=value` pairs after the time, strings quoted when they need it.
    Text,
    /// One JSON object a line.
    Json,
}
