//! The per-client retry budget: retries at most a fixed fraction of requests, over a sliding window.
//!
//! Why a budget and not only an attempt limit: three attempts per request still triples the load
//! on a backend that is refusing everything; a budget of 10 % of requests caps the amplification
//! at about 1.1× however badly the backend is doing (SRE book ch. 21, "Handling Overload Errors":
//! "retries at most 10 percent of requests"). The floor of retries per second is Finagle's
//! `RetryBudget(ttl, minRetriesPerSec, percentCanRetry)` idea (defaults there: 10 s, 10/s, 20 %):
//! a client that sends a handful of requests would otherwise never be allowed a single retry.
//!
//! Both counts — original requests and retries — live in one [`Windowed<2>`]: a slice's two
//! counts share one 8-byte word, and the sums are running totals (one load each). Per client
//! that is one 80-byte bucket array instead of two, ~120 bytes less (sixth round: 10⁶ simulated
//! clients hold one each). The price is the pair's per-slice ceiling,
//! [`Windowed::MAX_SLICE_COUNT`] (16.7 M requests a slice — 16.7 M/s at the default 1 s
//! slices): requests past it are not counted (the allowance grows no further
//! in that slice) and a retry past it is refused.
//!
//! Spending is exact under concurrency, without a lock: a caller first *reserves* its retry
//! (adds 1 to the retries: the bucket, then the running total), then reads the total — which,
//! all of these being `SeqCst` operations, includes every reservation whose add to the total
//! came before its own and was not taken back — and takes the reservation back if the total is
//! over the allowance. So the committed reservation whose add came last saw every other
//! committed one, even in another bucket: committed retries never exceed the allowance (the
//! argument as it was over two separate counters, whose sums scanned the buckets;
//! `window/windowed.rs` gives the ordering). (The one slack left is clock skew between threads: a
//! reservation a thread with a later `now` has already rolled out of the window is not seen by
//! one with an earlier `now` — it is out of the window a bucket later anyway.) The price is the
//! opposite race: two callers reserving at the very edge can both back off, so the budget may
//! under-spend by at most the number of concurrent callers at that instant (never over-spend).

use std::fmt;
use std::time::Instant;

use crate::window::{Landed, Windowed};

#[cfg(test)]
#[path = "tests/budget_model.rs"]
mod model_tests;

use super::RetryConfig;

/// Slack for float rounding in `ratio × requests` (e.g. `0.1 × 30` is `3.0000000000000004`):
/// far below one retry, so it can never admit a retry the exact arithmetic would not.
const ROUNDING_SLACK: f64 = 1e-9;

/// The pair's count of original requests.
const REQUESTS: usize = 0;
/// The pair's count of retries spent (reserved and kept).
const RETRIES: usize = 1;

/// Retries against requests over a sliding window; see the module docs. `Send + Sync`.
pub struct RetryBudget {
    /// Count [`REQUESTS`] and count [`RETRIES`] over the window.
    counts: Windowed<2>,
    ratio: f64,
    /// `min_retries_per_sec × window`, in retries.
    floor: f64,
}

impl RetryBudget {
    /// A budget with `cfg`'s ratio, floor and window. `cfg` should have been validated.
    pub(crate) fn new(cfg: &RetryConfig, origin: Instant) -> Self {
        RetryBudget {
            counts: Windowed::new(cfg.window, cfg.buckets, origin),
            ratio: cfg.budget_ratio,
            floor: cfg.min_retries_per_sec * cfg.window.as_secs_f64(),
        }
    }

    /// The address of the request bucket `now` falls in (for prefetch hints).
    #[cfg(feature = "hints")]
    #[inline]
    pub(crate) fn requests_bucket_addr(&self, now: Instant) -> *const u8 {
        self.counts.bucket_addr(now)
    }

    /// Counts one original request (a first attempt; retries are not requests here).
    pub fn record_request(&self, now: Instant) {
        self.counts.add(now, REQUESTS, 1);
    }

    /// How many retries the window ending at `now` may hold:
    /// `budget_ratio × requests + min_retries_per_sec × window`.
    pub fn allowance(&self, now: Instant) -> f64 {
        self.allowance_for(self.counts.sums(now)[REQUESTS])
    }

    /// The allowance for a given number of requests in the window.
    pub fn allowance_for(&self, requests: u64) -> f64 {
        self.ratio * requests as f64 + self.floor
    }

    /// `(requests, retries)` in the window ending at `now`.
    pub fn counts(&self, now: Instant) -> (u64, u64) {
        let sums = self.counts.sums(now);
        (sums[REQUESTS], sums[RETRIES])
    }

    /// Spends one retry if `retries_in_window + 1 <= allowance`; says whether it did.
    pub fn try_spend(&self, now: Instant) -> bool {
        // Reserve first, check second: see the module docs for why this never over-spends.
        let Some(landed) = self.reserve(now) else {
            return false;
        };
        let sums = self.counts.sums(now);
        if sums[RETRIES] as f64 <= self.allowance_for(sums[REQUESTS]) + ROUNDING_SLACK {
            true
        } else {
            self.counts.take_back(landed, RETRIES, 1);
            false
        }
    }

    /// Adds one retry; `None` (nothing added) if its slice already holds
    /// [`Windowed::MAX_SLICE_COUNT`].
    fn reserve(&self, now: Instant) -> Option<Landed> {
        let landed = self.counts.add_landed(now, RETRIES, 1)?;
        (landed.added() == 1).then_some(landed)
    }
}

impl fmt::Debug for RetryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryBudget")
            .field("window", &self.counts.window())
            .field("ratio", &self.ratio)
            .field("floor", &self.floor)
            .finish_non_exhaustive()
    }
}
