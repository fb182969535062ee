//! Sliding-window counters whose sums cost O(1): running totals, corrected as buckets expire.
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
//! Several counts kept over the same window (the throttle's requests and accepts) share one
//! clock reading, one sweep, and their buckets sit side by side (16 bytes a slice for two).
//!
//! Lock-free, like [`WindowedCounter`](super::WindowedCounter): every bucket change is one compare-exchange
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

use super::{bucket_add, bucket_retire, Slices};

/// `N` counts of events over one sliding window, each with an O(1) sum for callers whose time
/// moves forward. Same window semantics as [`WindowedCounter::sum`](super::WindowedCounter::sum)
/// (the current slice and the `buckets − 1` before it) whenever `now` does not go back; see the
/// module docs otherwise.
pub struct WindowedTotals<const N: usize> {
    slices: Slices,
    /// Bucket `i` holds slice `i, i + B, …` of every count: packed round tag and count, as in
    /// [`WindowedCounter`](super::WindowedCounter).
    buckets: Box<[[AtomicU64; N]]>,
    /// Events in the buckets not yet retired, per count, as two's-complement `i64`s (a reader
    /// racing a writer can see one transiently below the true count; never below 0 after
    /// clamping).
    totals: [AtomicU64; N],
    /// The newest slice a reader has swept to: every slice older than `swept − (buckets − 1)`
    /// has been retired from the totals.
    swept: AtomicU64,
}

impl<const N: usize> WindowedTotals<N> {
    /// Counters over `window`, kept in `buckets` buckets (clamped to `1..=`[`MAX_BUCKETS`](super::MAX_BUCKETS), each
    /// slice at least 1 ns, as [`WindowedCounter::new`](super::WindowedCounter::new) does), with
    /// time measured from `origin`.
    pub fn new(window: Duration, buckets: usize, origin: Instant) -> Self {
        let (slices, n) = Slices::new(window, buckets, origin);
        WindowedTotals {
            slices,
            buckets: (0..n)
                .map(|_| std::array::from_fn(|_| AtomicU64::new(0)))
                .collect(),
            totals: std::array::from_fn(|_| AtomicU64::new(0)),
            swept: AtomicU64::new(0),
        }
    }

    /// The length of one bucket's time slice.
    pub fn slice(&self) -> Duration {
        self.slices.slice()
    }

    #[inline]
    fn slice_at(&self, now: Instant) -> u64 {
        self.slices.at(now)
    }

    /// Adds `n` events to count `which` (`< N`; others are ignored) at `now` — at the newest
    /// slice a reader has seen, if `now` is older.
    #[inline]
    pub fn add(&self, now: Instant, which: usize, n: u64) {
        if n == 0 || which >= N {
            return;
        }
        let slice = self.slice_at(now).max(self.swept.load(Ordering::SeqCst));
        let len = self.buckets.len() as u64;
        let Some(bucket) = self.buckets.get((slice % len) as usize) else {
            return; // never: the index is below len
        };
        // Truncation is the documented wrap of the round tag.
        let (_, delta) = bucket_add(&bucket[which], (slice / len) as u32, n);
        // Two's complement: a negative delta (a stale bucket reset) subtracts.
        self.totals[which].fetch_add(delta as u64, Ordering::SeqCst);
    }

    /// Every count over the window ending at `now`.
    #[inline]
    pub fn sums(&self, now: Instant) -> [u64; N] {
        let slice = self.slice_at(now);
        let swept = self.swept.load(Ordering::SeqCst);
        if slice > swept {
            self.sweep(swept, slice);
        }
        std::array::from_fn(|i| (self.totals[i].load(Ordering::SeqCst) as i64).max(0) as u64)
    }

    /// Retires the slices that left the window between the reads at slices `from` and `to`:
    /// slice `u` leaves when the window reaches `u + buckets`. Only the last `buckets` of them
    /// can still hold anything (each bucket's older rounds are retired with it).
    #[cold]
    fn sweep(&self, from: u64, to: u64) {
        let len = self.buckets.len() as u64;
        let start = from.max(to.saturating_sub(len)).saturating_add(1).max(len);
        for t in start..=to {
            let expired = t - len;
            let Some(bucket) = self.buckets.get((expired % len) as usize) else {
                continue;
            };
            for (word, total) in bucket.iter().zip(&self.totals) {
                // Truncation is the documented wrap of the round tag.
                let removed = bucket_retire(word, (expired / len) as u32);
                if removed > 0 {
                    total.fetch_sub(u64::from(removed), Ordering::SeqCst);
                }
            }
        }
        self.swept.fetch_max(to, Ordering::SeqCst);
    }

    /// Count `which` summed bucket by bucket, as [`WindowedCounter::sum`] does (rounds 0 or 1
    /// ahead of each bucket's expected one); for tests.
    #[cfg(test)]
    pub(crate) fn sum_by_scan(&self, now: Instant, which: usize) -> u64 {
        let slice = self.slice_at(now);
        let len = self.buckets.len() as u64;
        let (round, current) = ((slice / len) as u32, slice % len);
        self.buckets
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let expected = if i as u64 <= current {
                    round
                } else {
                    round.wrapping_sub(1)
                };
                let (tag, count) = super::unpack(b[which].load(Ordering::SeqCst));
                if tag.wrapping_sub(expected) <= 1 {
                    u64::from(count)
                } else {
                    0
                }
            })
            .sum()
    }

    /// The running totals as kept, unclamped; for tests.
    #[cfg(test)]
    pub(crate) fn raw_totals(&self) -> [i64; N] {
        std::array::from_fn(|i| self.totals[i].load(Ordering::SeqCst) as i64)
    }
}

impl<const N: usize> fmt::Debug for WindowedTotals<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let totals: [i64; N] =
            std::array::from_fn(|i| self.totals[i].load(Ordering::Relaxed) as i64);
        f.debug_struct("WindowedTotals")
            .field("window", &self.slices.window())
            .field("buckets", &self.buckets.len())
            .field("totals", &totals)
            .finish_non_exhaustive()
    }
}
