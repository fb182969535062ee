//! Per-customer quotas, kept per criticality, in cost units per second.
//!
//! Why: a backend shared by many customers must stop one customer's bug or surge from degrading
//! everyone. The SRE book (ch. 21, "Per-customer limits") gives each customer a *global* quota,
//! agreed in advance, divided among the backend's tasks, and rejects the excess of a customer over
//! its quota while the backend is overloaded, so customers within quota are unaffected. Three
//! consequences shape this module:
//!
//! * **Cost, not queries.** Quotas are rates of *cost units* per second; the default unit is
//!   CPU-seconds per second, because "a query is not a unit of work" (SRE ch. 21, "The Pitfalls
//!   of Queries per Second"). A request is charged an *estimate* on admission and
//!   [`QuotaBook::settle`] corrects it with the measured cost afterwards: the difference is
//!   refunded, or charged extra — the bucket may go into debt, which delays later admissions.
//! * **Per task.** Each task enforces `global / tasks` ([`QuotaConfig::tasks`]); quotas may sum
//!   to more than capacity (ch. 21: they are a bet that customers will not all peak at once).
//!   A fleet that shares a store ([`QuotaConfig::store`]) replaces that static split with
//!   leased shares: every bucket counts the cost offered to it, and a lease client elsewhere
//!   (the proxy's; this crate does no I/O) reads those counts and re-rates the buckets with
//!   [`QuotaBook::set_rate`] (see `share.rs`).
//! * **Per criticality.** A customer's CRITICAL and SHEDDABLE allowances are separate buckets
//!   (ch. 21, "Criticality"), so low-value traffic cannot eat the high-value allowance.
//!
//! Enforcement ([`QuotaEnforcement`]) is either only while the task is overloaded (the book's
//! behaviour and the default) or always. When not enforcing, usage is still charged — so the
//! bucket reflects recent use when overload begins — but nothing is refused, and such charges
//! never take the bucket below **−burst** (a bounded debt: calm-period use delays a customer by
//! at most two bursts' worth of refill once overload begins).
//!
//! # The bucket
//!
//! One token bucket per customer × criticality, refilling at the per-task rate `r` up to a
//! capacity `B = r × burst` (default burst 1 s of quota: enough for a burst of one second of the
//! customer's rate, short enough that a customer cannot save up a minute of quota and spend it
//! at once). It is stored in the equivalent "virtual scheduling" form of the Generic Cell Rate
//! Algorithm (ITU-T I.371; the form used by e.g. the `governor` crate): a single `AtomicU64` per
//! bucket holding the *theoretical arrival time* `tat` in nanoseconds since the book's origin.
//! The balance at time `now` is `r × (now + burst − tat)` capped at `B`, so refill is lazy
//! (computed from `now`), balance and time change together in one compare-exchange (a separate
//! token count and refill timestamp would race), and the arithmetic is integer nanoseconds — a
//! fixed-point form of the token count with one nanosecond of refill as its resolution.
//!
//! While enforcing, a request with estimate `e` is admitted when the balance is at least `e`, or
//! when the bucket is full (so a request larger than the whole burst is not starved forever: it
//! runs from a full bucket and leaves debt). A refusal carries `retry_after`: the time until the
//! balance can pay `e` (until full, for such oversized requests), at most
//! [`QuotaConfig::max_retry_after`]. Debt from enforced charges is floored at
//! `max_retry_after` of quota below zero, so a mis-measured cost delays a customer boundedly.
//!
//! # Example
//!
//! ```
//! use std::time::{Duration, Instant};
//! use spillway_core::quota::{CustomerQuota, QuotaBook, QuotaConfig};
//! use spillway_core::Criticality;
//!
//! let t0 = Instant::now();
//! // 10 CPU-seconds/s for "search" across 5 tasks: 2 per task; everyone else shares 5 (1 here).
//! let cfg = QuotaConfig {
//!     tasks: 5,
//!     default_customer: CustomerQuota::uniform(5.0),
//!     ..Default::default()
//! }
//! .with_customer("search", CustomerQuota::uniform(10.0));
//! let book = QuotaBook::new(cfg, t0)?;
//! let overloaded = true;
//! let c = Criticality::Critical;
//! let charge = book.try_charge(t0, "search", c, 1.5, overloaded).unwrap();
//! // ... serve it; it really cost 0.5 CPU-seconds: 1 is refunded.
//! book.settle(t0 + Duration::from_millis(20), charge, 0.5);
//! assert!(book.try_charge(t0, "search", c, 1.5, overloaded).is_ok()); // 0.5 left
//! // Unknown names share the default slot: "batch" empties it, so "other" must wait.
//! assert!(book.try_charge(t0, "batch", c, 1.0, overloaded).is_ok());
//! let refused = book.try_charge(t0, "other", c, 0.5, overloaded).unwrap_err();
//! assert_eq!(refused.retry_after, Duration::from_millis(500)); // 0.5 cu short at 1 cu/s
//! # Ok::<(), spillway_core::ConfigError>(())
//! ```
//!
//! # Memory
//!
//! The customer table is fixed at construction: a `HashMap<Box<str>, usize>` index into a `Vec`
//! of slots, looked up with `&str` (no allocation per charge; SipHash keeps hostile customer names
//! from degrading lookups; tables of up to 8 names are scanned instead, which is cheaper than one
//! hash and just as bounded). **Unknown customers all share one default slot**, and that sharing is
//! what bounds memory: however many distinct names arrive, the book holds
//! `(size_of::<Slot>() + 2 × name length + one map entry) × (customers configured + 1)` bytes —
//! about 220 bytes plus twice the name per customer on 64-bit targets (a slot is 4 buckets × 32
//! bytes of bucket state plus the boxed name).

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::clock::{nanos_since, saturating_nanos};
use crate::criticality::{Criticality, PerCriticality};
use crate::error::ConfigError;

mod share;
#[cfg(test)]
mod tests;
mod units;

pub use share::{fair, SharedBucket, DEFAULT_LEASE_INTERVAL};

#[cfg(feature = "serde")]
use units::millis;
use units::{sanitize, to_ns};

/// Default burst: one second of quota (see the module docs for why).
pub const DEFAULT_BURST: Duration = Duration::from_secs(1);

/// Default cap on `retry_after`, and the debt floor while enforcing: one minute, long enough for
/// any sane per-request cost, short enough that a client told to wait is not parked for hours.
pub const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Up to this many configured customers a charge finds its slot by comparing names (length
/// first, then bytes) instead of hashing: eight comparisons cost about one SipHash of a short
/// name, and they are bounded whatever name arrives.
const SCAN_MAX_CUSTOMERS: usize = 8;

/// Largest accepted `tasks`: beyond this a per-task share is numerically meaningless.
const MAX_TASKS: u32 = 1_000_000;

/// Largest accepted `burst` / `max_retry_after`: one day. More is certainly a unit mistake.
const MAX_DURATION: Duration = Duration::from_secs(86_400);

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
    /// Cap on [`OverQuota::retry_after`], and the largest debt (as time of quota) enforced
    /// charges may run up. Default 60 s ([`DEFAULT_MAX_RETRY_AFTER`]). Accepted: more than 0, at
    /// most a day.
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

/// A customer is over its quota for this criticality.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("over quota: retry after {} ms", retry_after.as_millis())]
pub struct OverQuota {
    /// Time until the bucket can pay this request's estimate at its refill rate (until it is
    /// full, for an estimate above the whole burst), at most [`QuotaConfig::max_retry_after`].
    pub retry_after: Duration,
}

/// Proof of a charge, to hand back to [`QuotaBook::settle`] once the real cost is known.
///
/// Small and `Copy`: a slot index, the criticality, whether the charge was enforced, and the
/// amount charged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuotaCharge {
    slot: usize,
    criticality: Criticality,
    enforced: bool,
    amount: f64,
}

impl QuotaCharge {
    /// The criticality whose bucket was charged.
    pub fn criticality(&self) -> Criticality {
        self.criticality
    }

    /// Cost units charged (0 for an unlimited bucket, which keeps no account).
    pub fn amount(&self) -> f64 {
        self.amount
    }

    /// Whether the quota was being enforced when this was charged.
    pub fn enforced(&self) -> bool {
        self.enforced
    }
}

/// One bucket's state as a status page shows it.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct BucketUsage {
    /// This task's refill rate, cost units per second (global quota / tasks).
    pub rate: f64,
    /// Capacity in cost units (rate × burst).
    pub capacity: f64,
    /// Cost units available now; negative = debt still to be repaid.
    pub balance: f64,
}

/// One customer × criticality bucket (see the module docs for the GCRA form).
#[derive(Debug)]
struct Bucket {
    /// Theoretical arrival time, ns since the book's origin; `tat <= now` means full.
    tat: AtomicU64,
    /// Nanoseconds of refill per cost unit (1e9 / per-task rate), as `f64` bits: atomic so a
    /// lease can re-rate the bucket ([`QuotaBook::set_rate`]). 0 = unlimited, +inf = no quota.
    ns_per_unit: AtomicU64,
    /// Cost offered to this bucket since the book was built (admitted or refused), in
    /// millionths of a cost unit: the demand a lease client reports.
    offered: AtomicU64,
    /// The global quota, cost units/s; negative when the bucket is unlimited or its quota is 0
    /// (neither is shared out among a fleet).
    global: f64,
}

impl Bucket {
    #[inline]
    fn ns_per_unit(&self) -> f64 {
        f64::from_bits(self.ns_per_unit.load(Ordering::Relaxed))
    }
}

/// One customer: a bucket per criticality, and the name for listings.
#[derive(Debug)]
struct Slot {
    name: Box<str>,
    buckets: [Bucket; Criticality::COUNT],
}

/// The quota accounts of one task: a fixed customer table plus one shared default slot.
///
/// `Send + Sync`; every method takes `&self` and is lock-free.
///
/// Fields in declaration order (`repr(C)`): what `try_charge` reads for a book without quotas
/// comes first (see the admission controller's layout note).
#[repr(C)]
pub struct QuotaBook {
    /// No customer table and an unlimited default customer (the default configuration): every
    /// charge is the default slot's free one, so `try_charge` can answer without looking.
    unlimited: bool,
    enforcement: QuotaEnforcement,
    tasks: u32,
    /// Configured customers in configuration order, then the default slot last.
    slots: Vec<Slot>,
    origin: Instant,
    /// Burst as ns of refill.
    burst_ns: u64,
    /// Cap on retry_after and debt floor while enforcing, ns.
    max_retry_ns: u64,
    index: HashMap<Box<str>, usize>,
}

impl fmt::Debug for QuotaBook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuotaBook")
            .field("enforcement", &self.enforcement)
            .field("tasks", &self.tasks)
            .field("customers", &(self.slots.len() - 1))
            .finish_non_exhaustive()
    }
}

impl QuotaBook {
    /// Builds the book; every bucket starts full. `origin` is the zero of its internal clock and
    /// should be no later than any `now` passed afterwards (earlier times count as `origin`).
    pub fn new(cfg: QuotaConfig, origin: Instant) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let tasks = f64::from(cfg.tasks);
        let slot = |name: Box<str>, q: &CustomerQuota| Slot {
            name,
            buckets: Criticality::ALL.map(|c| {
                let ns_per_unit = match q.per_criticality[c] {
                    None => 0.0,
                    Some(global) => {
                        let per_task = global / tasks;
                        if per_task > 0.0 {
                            1e9 / per_task // may be +inf for subnormal rates: treated as 0
                        } else {
                            f64::INFINITY
                        }
                    }
                };
                Bucket {
                    tat: AtomicU64::new(0),
                    ns_per_unit: AtomicU64::new(ns_per_unit.to_bits()),
                    offered: AtomicU64::new(0),
                    global: match q.per_criticality[c] {
                        Some(g) if ns_per_unit.is_finite() && ns_per_unit > 0.0 => g,
                        _ => -1.0,
                    },
                }
            }),
        };
        let mut index = HashMap::with_capacity(cfg.customers.len());
        let mut slots = Vec::with_capacity(cfg.customers.len() + 1);
        for (i, (name, q)) in cfg.customers.iter().enumerate() {
            index.insert(Box::<str>::from(name.as_str()), i);
            slots.push(slot(name.as_str().into(), q));
        }
        slots.push(slot("".into(), &cfg.default_customer));
        let unlimited =
            cfg.customers.is_empty() && cfg.default_customer == CustomerQuota::unlimited();
        Ok(QuotaBook {
            origin,
            enforcement: cfg.enforcement,
            tasks: cfg.tasks,
            burst_ns: saturating_nanos(cfg.burst),
            max_retry_ns: saturating_nanos(cfg.max_retry_after),
            index,
            slots,
            unlimited,
        })
    }

    /// Charges `estimate` cost units to `customer`'s bucket for criticality `c`.
    ///
    /// Refuses only while enforcing (always, or while `overloaded` under
    /// [`QuotaEnforcement::WhenOverloaded`]) and the bucket cannot pay the estimate. Unknown
    /// customers are charged to the shared default slot. A negative or NaN estimate counts as 0;
    /// an infinite one can only run from a full bucket. Lock-free, no allocation.
    #[inline]
    pub fn try_charge(
        &self,
        now: Instant,
        customer: &str,
        c: Criticality,
        estimate: f64,
        overloaded: bool,
    ) -> Result<QuotaCharge, OverQuota> {
        let enforced = match self.enforcement {
            QuotaEnforcement::Always => true,
            QuotaEnforcement::WhenOverloaded => overloaded,
        };
        if self.unlimited {
            // The same free charge of the default slot that the lookup in `charge_bucket` would
            // come to. This book runs in every admission even when no quotas are configured, so
            // this part is inlined and such a book costs the caller a branch, not a call.
            return Ok(QuotaCharge {
                slot: self.slots.len().saturating_sub(1),
                criticality: c,
                enforced,
                amount: 0.0,
            });
        }
        self.charge_bucket(now, customer, c, estimate, enforced)
    }

    /// [`try_charge`](Self::try_charge) for a book that keeps accounts.
    fn charge_bucket(
        &self,
        now: Instant,
        customer: &str,
        c: Criticality,
        estimate: f64,
        enforced: bool,
    ) -> Result<QuotaCharge, OverQuota> {
        let slot = self.slot_index(customer);
        let amount = sanitize(estimate);
        let charge = |amount| QuotaCharge {
            slot,
            criticality: c,
            enforced,
            amount,
        };
        let Some(bucket) = self.slots.get(slot).map(|s| &s.buckets[c.index()]) else {
            return Ok(charge(0.0)); // unreachable: slot_index is always in range
        };
        let ns_per_unit = bucket.ns_per_unit();
        if ns_per_unit == 0.0 {
            return Ok(charge(0.0)); // unlimited: keeps no account
        }
        if bucket.global >= 0.0 {
            // Demand for a fleet's lease client: refused cost counts too (it is what this
            // instance would spend with a larger share). Saturating in practice: 2^64 µcu.
            bucket
                .offered
                .fetch_add(share::micro_units(amount), Ordering::Relaxed);
        }
        if ns_per_unit.is_infinite() {
            // A quota of 0: nothing may be spent while enforcing, and there is nothing to track.
            return if enforced && amount > 0.0 {
                Err(OverQuota {
                    retry_after: Duration::from_nanos(self.max_retry_ns),
                })
            } else {
                Ok(charge(0.0))
            };
        }
        let cost = to_ns(amount, ns_per_unit);
        if cost == 0 {
            return Ok(charge(amount));
        }
        let now_ns = nanos_since(self.origin, now);
        let limit = now_ns.saturating_add(self.burst_ns);
        // Largest tat allowed: the balance's floor (−burst calm, −max_retry_after enforcing).
        let debt_cap = limit.saturating_add(if enforced {
            self.max_retry_ns
        } else {
            self.burst_ns
        });
        let mut tat = bucket.tat.load(Ordering::Acquire);
        loop {
            let base = tat.max(now_ns);
            let wanted = base.saturating_add(cost);
            if enforced && wanted > limit && tat > now_ns {
                let wait = if cost <= self.burst_ns {
                    wanted - limit // until the balance reaches the estimate
                } else {
                    tat - now_ns // oversized: until the bucket is full
                };
                return Err(OverQuota {
                    retry_after: Duration::from_nanos(wait.min(self.max_retry_ns)),
                });
            }
            // Debt floor; never forgive debt the bucket already holds.
            let next = wanted.min(debt_cap).max(tat);
            match bucket
                .tat
                .compare_exchange_weak(tat, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(charge(amount)),
                Err(current) => tat = current,
            }
        }
    }

    /// Corrects `charge` with the request's `actual` cost: refunds the difference (the balance
    /// is capped at the bucket's capacity) or charges the excess, possibly into debt (floored as
    /// for the original charge). A negative actual counts as 0; NaN leaves the estimate standing.
    /// A refund returns the whole difference even if the original charge was cut by the debt
    /// floor: a bounded over-credit, since the balance never exceeds the capacity.
    /// Lock-free, no allocation; a charge from another book is ignored.
    pub fn settle(&self, now: Instant, charge: QuotaCharge, actual: f64) {
        if actual.is_nan() {
            return;
        }
        let Some(bucket) = self
            .slots
            .get(charge.slot)
            .map(|s| &s.buckets[charge.criticality.index()])
        else {
            return;
        };
        let ns_per_unit = bucket.ns_per_unit();
        if ns_per_unit == 0.0 || ns_per_unit.is_infinite() {
            return; // unlimited, or zero quota: no account kept
        }
        // Both sides through the same rounding, so estimate == actual is an exact no-op. (A
        // lease that re-rated the bucket since the charge makes this a correction at the new
        // rate: the bucket's state is time, and the rate is what time is worth now.)
        let charged = to_ns(charge.amount, ns_per_unit);
        let used = to_ns(sanitize(actual), ns_per_unit);
        if charged == used {
            return;
        }
        let now_ns = nanos_since(self.origin, now);
        let debt_cap = now_ns
            .saturating_add(self.burst_ns)
            .saturating_add(if charge.enforced {
                self.max_retry_ns
            } else {
                self.burst_ns
            });
        let _ = bucket
            .tat
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |tat| {
                Some(if used < charged {
                    // Refund: a full bucket (tat <= now) stays full.
                    if tat <= now_ns {
                        tat
                    } else {
                        tat.saturating_sub(charged - used).max(now_ns)
                    }
                } else {
                    tat.max(now_ns)
                        .saturating_add(used - charged)
                        .min(debt_cap)
                        .max(tat)
                })
            });
    }

    /// The buckets of `customer` (the default slot's for unknown names) as of `now`; `None` for
    /// an unlimited criticality. For status pages.
    pub fn usage(&self, now: Instant, customer: &str) -> PerCriticality<Option<BucketUsage>> {
        let now_ns = nanos_since(self.origin, now);
        let burst_s = self.burst_ns as f64 / 1e9;
        match self.slots.get(self.slot_index(customer)) {
            None => PerCriticality([None; Criticality::COUNT]),
            Some(slot) => PerCriticality::from_fn(|c| {
                let b = &slot.buckets[c.index()];
                let ns_per_unit = b.ns_per_unit();
                if ns_per_unit == 0.0 {
                    return None;
                }
                let rate = if ns_per_unit.is_infinite() {
                    0.0
                } else {
                    1e9 / ns_per_unit
                };
                let tat = b.tat.load(Ordering::Acquire);
                let ahead = tat.saturating_sub(now_ns) as f64 / 1e9; // seconds of refill owed
                let capacity = rate * burst_s;
                Some(BucketUsage {
                    rate,
                    capacity,
                    balance: capacity - rate * ahead,
                })
            }),
        }
    }

    /// The configured customers, in configuration order (the default slot is not listed).
    pub fn customers(&self) -> impl Iterator<Item = &str> + '_ {
        let configured = self.slots.len().saturating_sub(1);
        self.slots[..configured].iter().map(|s| &*s.name)
    }

    /// Whether `customer` has its own slot (otherwise it shares the default one).
    pub fn is_configured(&self, customer: &str) -> bool {
        self.index.contains_key(customer)
    }

    /// The enforcement mode.
    pub fn enforcement(&self) -> QuotaEnforcement {
        self.enforcement
    }

    /// Number of tasks the global quotas are divided among.
    pub fn tasks(&self) -> u32 {
        self.tasks
    }

    fn slot_index(&self, customer: &str) -> usize {
        let configured = self.slots.len().saturating_sub(1);
        if configured <= SCAN_MAX_CUSTOMERS {
            // Names are unique (validated), so the first match is the slot the map would give.
            let found = self.slots[..configured]
                .iter()
                .position(|s| *s.name == *customer);
            return found.unwrap_or(configured);
        }
        match self.index.get(customer) {
            Some(&i) => i,
            None => configured,
        }
    }
}
