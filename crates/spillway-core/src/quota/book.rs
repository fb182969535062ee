//! The book: one lock-free token bucket per customer × criticality (the GCRA form described in
//! the module docs), charged on admission and settled with the measured cost.
//!
//! Why apart from the settings: this is the request path, every line of it on the hot path of
//! each admission, and it is easier to keep allocation-free and lock-free where nothing else is.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::clock::{nanos_since, saturating_nanos};
use crate::criticality::{Criticality, PerCriticality};
use crate::error::ConfigError;

use super::config::{CustomerQuota, QuotaConfig, QuotaEnforcement};
use super::share;
use super::units::{sanitize, to_ns};

/// Up to this many configured customers a charge finds its slot by comparing names (length
/// first, then bytes) instead of hashing: eight comparisons cost about one SipHash of a short
/// name, and they are bounded whatever name arrives.
pub(super) const SCAN_MAX_CUSTOMERS: usize = 8;

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
pub(super) struct Bucket {
    /// Theoretical arrival time, ns since the book's origin; `tat <= now` means full.
    pub(super) tat: AtomicU64,
    /// Nanoseconds of refill per cost unit (1e9 / per-task rate), as `f64` bits: atomic so a
    /// lease can re-rate the bucket ([`QuotaBook::set_rate`]). 0 = unlimited, +inf = no quota.
    pub(super) ns_per_unit: AtomicU64,
    /// Cost offered to this bucket since the book was built (admitted or refused), in
    /// millionths of a cost unit: the demand a lease client reports.
    pub(super) offered: AtomicU64,
    /// Requests offered to this bucket since the book was built (admitted or refused): with
    /// `offered`, it tells a lease client how many arrivals a reading rests on, and so whether
    /// a change is noise or a shift (`share.rs`, [`super::DemandEstimate`]).
    pub(super) arrivals: AtomicU64,
    /// The global quota, cost units/s; negative when the bucket is unlimited or its quota is 0
    /// (neither is shared out among a fleet).
    pub(super) global: f64,
}

impl Bucket {
    #[inline]
    pub(super) fn ns_per_unit(&self) -> f64 {
        f64::from_bits(self.ns_per_unit.load(Ordering::Relaxed))
    }
}

/// One customer: a bucket per criticality, and the name for listings.
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) name: Box<str>,
    pub(super) buckets: [Bucket; Criticality::COUNT],
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
    pub(super) unlimited: bool,
    enforcement: QuotaEnforcement,
    pub(super) tasks: u32,
    /// Configured customers in configuration order, then the default slot last.
    pub(super) slots: Vec<Slot>,
    pub(super) origin: Instant,
    /// Burst as ns of refill.
    burst_ns: u64,
    /// Cap on retry_after and debt floor while enforcing, ns.
    max_retry_ns: u64,
    pub(super) index: HashMap<Box<str>, usize>,
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
                    arrivals: AtomicU64::new(0),
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
            bucket.arrivals.fetch_add(1, Ordering::Relaxed);
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

    pub(super) fn slot_index(&self, customer: &str) -> usize {
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
