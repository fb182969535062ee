//! The quota settings and their validation.
//!
//! Why a file of its own: what a quota *is* (per customer, per criticality, global, split among
//! tasks or leased) is read by configuration loaders and status pages that never touch a bucket;
//! the arithmetic of charging lives in `book.rs`.

use std::time::Duration;

use crate::criticality::{Criticality, PerCriticality};
use crate::error::ConfigError;

use super::share::{self, DEFAULT_LEASE_INTERVAL};
#[cfg(feature = "serde")]
use super::units::millis;

/// Default burst: one second of quota (see the module docs for why).
pub const DEFAULT_BURST: Duration = Duration::from_secs(1);

/// Default cap on `retry_after`, and the debt floor while enforcing: one minute, long enough for
/// any sane per-request cost, short enough that a client told to wait is not parked for hours.
pub const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Largest accepted `tasks`: beyond this a per-task share is numerically meaningless.
pub(super) const MAX_TASKS: u32 = 1_000_000;

/// Largest accepted `burst` / `max_retry_after`: one day. More is certainly a unit mistake.
pub(super) const MAX_DURATION: Duration = Duration::from_secs(86_400);

/// When quotas refuse requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum QuotaEnforcement {
    /// Only while the task reports itself overloaded (SRE book ch. 21: a customer over quota is
    /// rejected "during overload"); otherwise usage is charged but nothing refused. Default.
    #[default]
    WhenOverloaded,
    /// Always: quotas are hard rate limits.
    Always,
}

/// One customer's quotas, per criticality.
#[derive(Debug, Clone, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct CustomerQuota {
    /// *Global* quota (across all tasks) in cost units per second (default unit: CPU-seconds per
    /// second) for each criticality; `None` = unlimited (never refused, costs nothing). Default:
    /// unlimited at every level.
    pub per_criticality: PerCriticality<Option<f64>>,
}

impl CustomerQuota {
    /// No limit at any criticality.
    pub fn unlimited() -> Self {
        CustomerQuota::default()
    }

    /// The same global quota (cost units/s) at every criticality, each in its own bucket.
    pub fn uniform(global_per_sec: f64) -> Self {
        CustomerQuota {
            per_criticality: PerCriticality([Some(global_per_sec); Criticality::COUNT]),
        }
    }

    /// This quota with criticality `c` set to `global_per_sec` (`None` = unlimited).
    pub fn with(mut self, c: Criticality, global_per_sec: Option<f64>) -> Self {
        self.per_criticality[c] = global_per_sec;
        self
    }
}

/// Quota settings for one task.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
pub struct QuotaConfig {
    /// Number of tasks the global quotas are divided among (per-task rate = global / tasks).
    /// Default 1. Accepted: 1 ..= 1,000,000.
    pub tasks: u32,
    /// When quotas refuse. Default [`QuotaEnforcement::WhenOverloaded`] (SRE book ch. 21).
    pub enforcement: QuotaEnforcement,
    /// Bucket capacity, as time of quota: a bucket holds `per-task rate × burst` cost units.
    /// Default 1 s ([`DEFAULT_BURST`]). Accepted: more than 0, at most a day.
    #[cfg_attr(feature = "serde", serde(rename = "burst_ms", with = "millis"))]
    pub burst: Duration,
    /// Cap on [`OverQuota::retry_after`](super::OverQuota::retry_after), and the largest debt
    /// (as time of quota) enforced charges may run up. Default 60 s
    /// ([`DEFAULT_MAX_RETRY_AFTER`]). Accepted: more than 0, at most a day.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "max_retry_after_ms", with = "millis")
    )]
    pub max_retry_after: Duration,
    /// Quotas for every customer not listed in `customers`; they all share its buckets. Default:
    /// unlimited, so a book with no quotas configured never refuses anyone.
    pub default_customer: CustomerQuota,
    /// Named customers and their quotas. Names must be non-empty and unique.
    pub customers: Vec<(String, CustomerQuota)>,
    /// Where a fleet's shares of the global quotas are agreed: `redis://host:port/db` or
    /// `rediss://…` (TLS). `None` (default): the static `global / tasks` split. This crate only
    /// carries the setting; the lease client that talks to the store lives with the I/O (the
    /// proxy), and `tasks` remains the split it falls back to.
    pub store: Option<String>,
    /// File holding the store's password (its first line), kept out of the configuration.
    /// Default none.
    pub store_password_file: Option<String>,
    /// How often an instance reports its demand and takes its share. Default 500 ms
    /// ([`DEFAULT_LEASE_INTERVAL`]). Accepted: 50 ..= 10 000 ms.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "lease_interval_ms", with = "millis")
    )]
    pub lease_interval: Duration,
}

impl Default for QuotaConfig {
    fn default() -> Self {
        QuotaConfig {
            tasks: 1,
            enforcement: QuotaEnforcement::default(),
            burst: DEFAULT_BURST,
            max_retry_after: DEFAULT_MAX_RETRY_AFTER,
            default_customer: CustomerQuota::unlimited(),
            customers: Vec::new(),
            store: None,
            store_password_file: None,
            lease_interval: DEFAULT_LEASE_INTERVAL,
        }
    }
}

impl QuotaConfig {
    /// This configuration with `name` added to the customer table.
    pub fn with_customer(mut self, name: impl Into<String>, quota: CustomerQuota) -> Self {
        self.customers.push((name.into(), quota));
        self
    }

    /// Checks every setting; the error names the field (and customer) and what it accepts.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=MAX_TASKS).contains(&self.tasks) {
            return Err(ConfigError::new(
                "quota.tasks",
                self.tasks,
                "an integer in 1 ..= 1000000 (the number of tasks sharing the global quotas)",
            ));
        }
        for (field, d) in [
            ("quota.burst_ms", self.burst),
            ("quota.max_retry_after_ms", self.max_retry_after),
        ] {
            if d.is_zero() || d > MAX_DURATION {
                return Err(ConfigError::new(
                    field,
                    format!("{} ms", d.as_secs_f64() * 1e3),
                    "a duration more than 0 and at most 86400000 ms (one day)",
                ));
            }
        }
        share::validate_store(self)?;
        check_customer("default", &self.default_customer)?;
        let mut seen = std::collections::HashSet::with_capacity(self.customers.len());
        for (name, quota) in &self.customers {
            if name.is_empty() {
                return Err(ConfigError::new(
                    "quota.customers",
                    "\"\"",
                    "a non-empty customer name",
                ));
            }
            if !seen.insert(name.as_str()) {
                return Err(ConfigError::new(
                    "quota.customers",
                    format!("{name:?} (listed twice)"),
                    "each customer name listed once",
                ));
            }
            check_customer(name, quota)?;
        }
        Ok(())
    }
}

fn check_customer(name: &str, q: &CustomerQuota) -> Result<(), ConfigError> {
    for c in Criticality::ALL {
        if let Some(v) = q.per_criticality[c] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(ConfigError::new(
                    "quota.customers.per_criticality",
                    format!("{name}.{c} = {v}"),
                    "a finite global quota >= 0 in cost units per second, or none (unlimited)",
                ));
            }
        }
    }
    Ok(())
}
