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
//! about 250 bytes plus twice the name per customer on 64-bit targets (a slot is 4 buckets × 40
//! bytes of bucket state plus the boxed name).

mod book;
mod config;
mod share;
#[cfg(test)]
mod tests;
mod units;

pub use book::{BucketUsage, OverQuota, QuotaBook, QuotaCharge};
pub use config::{
    CustomerQuota, QuotaConfig, QuotaEnforcement, DEFAULT_BURST, DEFAULT_MAX_RETRY_AFTER,
};
pub use share::{fair, DemandEstimate, SharedBucket, DEFAULT_LEASE_INTERVAL, DEMAND_SMOOTHING};

use book::Bucket;
use config::MAX_DURATION;
