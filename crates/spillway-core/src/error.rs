//! The one error every policy's configuration check returns.

/// A configuration value outside what a policy accepts.
///
/// `field` names the setting (as it is spelled in configuration files, e.g. `throttle.k`) and
/// `expected` says what is accepted, so the message alone tells the user how to fix it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid {field} = {value}: expected {expected}")]
pub struct ConfigError {
    /// The setting, e.g. `throttle.k`.
    pub field: &'static str,
    /// The rejected value, rendered.
    pub value: String,
    /// What is accepted, e.g. `a number >= 1`.
    pub expected: &'static str,
}

impl ConfigError {
    /// A `ConfigError` for `field`, which was `value` but must be `expected`.
    pub fn new(field: &'static str, value: impl std::fmt::Display, expected: &'static str) -> Self {
        ConfigError {
            field,
            value: value.to_string(),
            expected,
        }
    }
}

/// Checks a float setting is finite and within `[min, max]`.
pub fn check_range(
    field: &'static str,
    value: f64,
    min: f64,
    max: f64,
    expected: &'static str,
) -> Result<(), ConfigError> {
    if value.is_finite() && value >= min && value <= max {
        Ok(())
    } else {
        Err(ConfigError::new(field, value, expected))
    }
}
