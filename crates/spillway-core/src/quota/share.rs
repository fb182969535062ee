//! Leased shares: the book's side of fleet-wide quotas.
//!
//! Why: a static `global / tasks` split is wrong as soon as the fleet autoscales or traffic
//! reaches its instances unevenly (one gateway taking 80% of a customer). Google's Doorman
//! (client-side leases of a global capacity, max-min fair over the clients' wants, a safe
//! fallback capacity when the server is unreachable) fixes that without a round trip per
//! request, unlike Envoy's global rate limit service. The request path must never wait on the
//! network, so the book stays local and lock-free; what a fleet needs from it is only
//!
//! * each shared bucket's demand — the cost offered to it, admitted or refused
//!   ([`QuotaBook::offered`], a cumulative count the lease client differentiates), and
//! * a way to re-rate a bucket with the share the fleet agreed ([`QuotaBook::set_rate`]).
//!
//! The bucket's state is a theoretical arrival time, so a new rate keeps its *fill fraction*
//! (a full bucket stays full, a half-empty one stays half-empty) and rescales its capacity
//! (`rate × burst`) and any debt: nothing is granted or forgiven by the change itself.
//! Unlimited buckets and quotas of 0 are not shared and cannot be re-rated.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{QuotaBook, QuotaConfig, MAX_DURATION};

#[cfg(test)]
#[path = "share_tests.rs"]
mod tests;

#[path = "fair.rs"]
pub mod fair;
use crate::criticality::Criticality;
use crate::error::ConfigError;

/// Default lease interval: 500 ms — a share follows a shift of traffic within about a second,
/// for one store round trip per instance per interval however many requests it serves.
pub const DEFAULT_LEASE_INTERVAL: Duration = Duration::from_millis(500);

/// Shortest accepted lease interval (below it the store's load grows for no visible gain).
const MIN_LEASE: Duration = Duration::from_millis(50);
/// Longest accepted lease interval (beyond it membership takes too long to notice a loss).
const MAX_LEASE: Duration = Duration::from_secs(10);

/// Smallest rate [`QuotaBook::set_rate`] sets, cost units/s: a share of 0 would make the
/// bucket look like a configured quota of 0 (refused with the longest `retry_after`, no
/// account kept); this refuses the same while enforcing and keeps counting demand.
const MIN_RATE: f64 = 1e-6;

/// One bucket a fleet shares: a configured customer's (or the default slot's) criticality with
/// a finite, positive global quota.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SharedBucket<'a> {
    /// The customer, `None` for the default slot shared by every unlisted name.
    pub customer: Option<&'a str>,
    /// The criticality.
    pub criticality: Criticality,
    /// The global quota, cost units per second.
    pub global: f64,
    /// The rate this instance enforces now, cost units per second.
    pub rate: f64,
    /// Position for [`QuotaBook::offered`] and [`QuotaBook::set_rate`] (valid for this book).
    pub index: usize,
}

/// `amount` cost units in millionths, for the offered counter.
#[inline]
pub(super) fn micro_units(amount: f64) -> u64 {
    let m = amount * 1e6;
    if m >= u64::MAX as f64 {
        u64::MAX
    } else if m > 0.0 {
        m as u64
    } else {
        0
    }
}

pub(super) fn validate_store(cfg: &QuotaConfig) -> Result<(), ConfigError> {
    if !(MIN_LEASE..=MAX_LEASE).contains(&cfg.lease_interval) || cfg.lease_interval > MAX_DURATION {
        return Err(ConfigError::new(
            "quota.lease_interval_ms",
            format!("{} ms", cfg.lease_interval.as_secs_f64() * 1e3),
            "a duration in 50 ..= 10000 ms",
        ));
    }
    if let Some(url) = &cfg.store {
        if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            return Err(ConfigError::new(
                "quota.store",
                format!("{url:?}"),
                "a redis://host:port/db or rediss://host:port/db URL",
            ));
        }
    }
    if cfg.store.is_none() && cfg.store_password_file.is_some() {
        return Err(ConfigError::new(
            "quota.store_password_file",
            "set without quota.store",
            "a password file only together with a store",
        ));
    }
    Ok(())
}

impl QuotaBook {
    /// The buckets a fleet shares, in a fixed order (configured customers in configuration
    /// order, then the default slot; criticalities from lowest to highest).
    pub fn shared_buckets(&self) -> Vec<SharedBucket<'_>> {
        let configured = self.slots.len().saturating_sub(1);
        let mut out = Vec::new();
        for (i, slot) in self.slots.iter().enumerate() {
            for c in Criticality::ALL {
                let b = &slot.buckets[c.index()];
                if b.global >= 0.0 {
                    out.push(SharedBucket {
                        customer: (i < configured).then_some(&*slot.name),
                        criticality: c,
                        global: b.global,
                        rate: 1e9 / b.ns_per_unit(),
                        index: i * Criticality::COUNT + c.index(),
                    });
                }
            }
        }
        out
    }

    /// Cost units offered to the shared bucket `index` since the book was built, admitted or
    /// refused (0 for an index that is not a shared bucket). Monotonic.
    pub fn offered(&self, index: usize) -> f64 {
        match self.shared(index) {
            Some(b) => b.offered.load(Ordering::Relaxed) as f64 / 1e6,
            None => 0.0,
        }
    }

    /// Re-rates the shared bucket `index` to `per_sec` cost units per second (this instance's
    /// share; at least a millionth). Keeps the bucket's fill fraction (see the module docs).
    /// Returns false, changing nothing, for an index that is not a shared bucket.
    pub fn set_rate(&self, index: usize, per_sec: f64) -> bool {
        let Some(b) = self.shared(index) else {
            return false;
        };
        let rate = if per_sec.is_finite() {
            per_sec.max(MIN_RATE)
        } else if per_sec > 0.0 {
            b.global.max(MIN_RATE) // +inf: the whole quota
        } else {
            MIN_RATE
        };
        b.ns_per_unit
            .store((1e9 / rate).to_bits(), Ordering::Relaxed);
        true
    }

    /// The static per-task rate of the shared bucket `index` (`global / tasks`): the fallback
    /// when no share can be had.
    pub fn static_rate(&self, index: usize) -> Option<f64> {
        self.shared(index).map(|b| b.global / f64::from(self.tasks))
    }

    fn shared(&self, index: usize) -> Option<&super::Bucket> {
        let slot = self.slots.get(index / Criticality::COUNT)?;
        let b = &slot.buckets[index % Criticality::COUNT];
        (b.global >= 0.0).then_some(b)
    }
}
