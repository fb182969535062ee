//! A sliding-window counter whose sum costs O(1): a running total, corrected as buckets expire.
//!
//! Why: the adaptive throttle (SRE book ch. 21, "Client-side throttling") reads its two
//! two-minute counts on *every* request. Summing 120 one-second buckets per read made that sum
//! most of a throttle decision, and at fleet scale (the simulator's 10⁴ tasks, each a client of
//! the layer below) it was the largest single cost. Here the sum is kept as it goes: an add
//! adds to the total; a bucket leaving the window is subtracted from it once, when a reader
//! first sees time pass its slice ("sweeping"). A read is then a load, a compare and a load;
//! a read that crosses a slice boundary also retires the slices that left the window — at most
//! one per slice elapsed, at most one per bucket, so O(1) amortised.
//!
//! Lock-free, like [`WindowedCounter`] underneath: every bucket change is one compare-exchange
//! that also yields the exact change of that bucket's count, and the total follows by the same
//! amount with one atomic add. Each event therefore enters the total once and leaves it once —
//! whoever empties its bucket (a sweeping reader, or a writer reusing the bucket for a newer
//! round) is the one that subtracts it, and the compare-exchange makes that a single party.
//! Between a bucket change and the matching total update a concurrent reader may see the total
//! a few events off; it is never read below 0 and is exact once writers are done.
//!
//! Time, as the throttle uses it, only moves forward; what happens when it does not:
//! - a reader whose `now` is behind the newest one seen gets the newest window's total (its
//!   events expire, at most, as much earlier as its clock lags);
//! - a writer whose `now` is behind the newest read counts its events in the newest read's slice,
//!   so they are never added to a bucket already swept (they stay a little longer instead). Only
//!   a writer stalled for a whole window between two instructions could still put events in a
//!   swept bucket; they then stay counted until that bucket is next swept or reused (one window).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::WindowedCounter;

/// Counts events over a sliding window, with an O(1) [`sum`](Self::sum) for callers whose time
/// moves forward. Same window semantics as [`WindowedCounter::sum`] (the current slice and the
/// `buckets − 1` before it) whenever `now` does not go back; see the module docs otherwise.
pub struct WindowedTotal {
    counter: WindowedCounter,
    /// Events in the buckets not yet retired, as a two's-complement `i64` (a reader racing a
    /// writer can see it transiently below the true count, never below 0 after clamping).
    total: AtomicU64,
    /// The newest slice a reader has swept to: every slice older than `swept − (buckets − 1)`
    /// has been retired from `total`.
    swept: AtomicU64,
}

impl WindowedTotal {
    /// A counter over `window`, kept in `buckets` buckets (clamped as [`WindowedCounter::new`]
    /// does), with time measured from `origin`.
    pub fn new(window: Duration, buckets: usize, origin: Instant) -> Self {
        WindowedTotal {
            counter: WindowedCounter::new(window, buckets, origin),
            total: AtomicU64::new(0),
            swept: AtomicU64::new(0),
        }
    }

    /// The window this counter spans, as configured.
    pub fn window(&self) -> Duration {
        self.counter.window()
    }

    /// The number of buckets (after clamping).
    pub fn buckets(&self) -> usize {
        self.counter.buckets()
    }

    /// The length of one bucket's time slice.
    pub fn slice(&self) -> Duration {
        self.counter.slice()
    }

    /// Adds `n` events at `now` (at the newest slice a reader has seen, if `now` is older).
    #[inline]
    pub fn add(&self, now: Instant, n: u64) {
        let slice = self
            .counter
            .slice_at(now)
            .max(self.swept.load(Ordering::SeqCst));
        if let Some((_, delta)) = self.counter.add_at_slice(slice, n) {
            // Two's complement: a negative delta (a stale bucket reset) subtracts.
            self.total.fetch_add(delta as u64, Ordering::SeqCst);
        }
    }

    /// The number of events in the window ending at `now`.
    #[inline]
    pub fn sum(&self, now: Instant) -> u64 {
        let slice = self.counter.slice_at(now);
        let swept = self.swept.load(Ordering::SeqCst);
        if slice > swept {
            self.sweep(swept, slice);
        }
        let total = self.total.load(Ordering::SeqCst) as i64;
        total.max(0) as u64
    }

    /// Retires the slices that left the window between the reads at slices `from` and `to`:
    /// slice `u` leaves when the window reaches `u + buckets`. Only the last `buckets` of them
    /// can still hold anything (each bucket's older rounds are retired with it).
    #[cold]
    fn sweep(&self, from: u64, to: u64) {
        let len = self.counter.len();
        let start = from.max(to.saturating_sub(len)).saturating_add(1).max(len);
        for t in start..=to {
            let expired = t - len;
            // Truncation is the documented wrap of the round tag.
            let removed = self
                .counter
                .retire((expired % len) as usize, (expired / len) as u32);
            if removed > 0 {
                self.total.fetch_sub(u64::from(removed), Ordering::SeqCst);
            }
        }
        self.swept.fetch_max(to, Ordering::SeqCst);
    }

    /// The sum computed the slow way, bucket by bucket ([`WindowedCounter::sum`]); for tests.
    #[cfg(test)]
    pub(crate) fn sum_by_scan(&self, now: Instant) -> u64 {
        self.counter.sum(now)
    }

    /// The running total as kept, unclamped; for tests.
    #[cfg(test)]
    pub(crate) fn raw_total(&self) -> i64 {
        self.total.load(Ordering::SeqCst) as i64
    }
}

impl fmt::Debug for WindowedTotal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WindowedTotal")
            .field("window", &self.window())
            .field("buckets", &self.buckets())
            .field("total", &self.total.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}
