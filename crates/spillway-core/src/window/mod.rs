//! A lock-free sliding-window counter, the memory behind the adaptive throttle and the retry budget.
//!
//! Why it is built like this: the client-side policies of the SRE book (ch. 21, "Client-side
//! throttling" counts requests and accepts "over the last two minutes"; the retry budget counts
//! retries against requests) are consulted on every request, from many threads at once, so the
//! counter must take no lock and allocate nothing after construction. A sliding window kept in
//! time buckets (as in gRPC-go's adaptive throttler and Envoy's admission-control filter) forgets
//! old traffic gradually instead of in one jump.
//!
//! Two forms: [`WindowedCounter`] sums its buckets when read (a task's error rate, read rarely),
//! and [`WindowedPair`] keeps two counts' running totals in one word a slice, so that a read only
//! corrects for the buckets that expired since the last read (the throttle and the retry budget,
//! read on every request). A third form, `WindowedTotals` (running totals over one word per count),
//! is compiled for tests only: it is the reference the compact pair is checked against.
//!
//! Each bucket is a single `AtomicU64` holding a *round* tag in the high 32 bits and a count in the
//! low 32 bits. Bucket `i` holds the events of the time slices `i, i + B, i + 2B, …` (`B` buckets);
//! the round is `slice / B`. Packing tag and count into one word makes "reset the stale bucket and
//! add" a single compare-exchange, so a reset can never eat a concurrent add, and stale buckets are
//! reset lazily by whoever next writes them — no background thread, no sweep.
//!
//! Writes and the reads in `sum` are `SeqCst`: on x86 that costs nothing over `Relaxed` (loads are
//! plain moves, read-modify-writes are locked either way), and it gives the retry budget's
//! reserve-then-check a single order across buckets, so two callers whose `now` straddle a bucket
//! boundary cannot both miss each other's reservation.
//!
//! Limits of the packing, both far outside realistic use and documented rather than hidden:
//! - a bucket's count saturates at `u32::MAX` (about 4.3 × 10⁹ events per bucket slice);
//! - the round tag wraps after 2³² windows (16 000 years for a 120 s window, 136 years for 1 s);
//!   a bucket left untouched for 2³¹ windows could then be misread as current.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::clock::{nanos_since, saturating_nanos};

mod pair;
#[cfg(test)]
mod total;
pub(crate) use pair::PairLanded;
pub use pair::{WindowedPair, MAX_SLICE_COUNT};
#[cfg(test)]
pub(crate) use total::WindowedTotals;

/// The largest number of buckets a counter keeps (one per second over an hour). More buckets buy
/// nothing measurable and make every [`WindowedCounter::sum`] slower.
pub const MAX_BUCKETS: usize = 3600;

/// Where an [`WindowedCounter::add_landed`] put its events: bucket index and round tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Landed {
    idx: usize,
    tag: u32,
}

const COUNT_BITS: u32 = 32;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

#[inline]
fn pack(round: u32, count: u32) -> u64 {
    (u64::from(round) << COUNT_BITS) | u64::from(count)
}

#[inline]
fn unpack(word: u64) -> (u32, u32) {
    // Both halves fit by construction; the casts only drop bits that are not there.
    ((word >> COUNT_BITS) as u32, (word & COUNT_MASK) as u32)
}

/// Counts events over a sliding window of time, in atomic buckets.
///
/// The window is the current bucket slice plus the `buckets − 1` before it, so an event is counted
/// for at least `window × (buckets − 1) / buckets` and never once it is `window` old. Time is
/// passed in (`now`) and kept as nanoseconds since the `origin` given at construction.
///
/// `add` and `sum` take no lock and never allocate; `add` is one compare-exchange loop on one
/// word. An `add` whose `now` lags a concurrent writer's (two threads read the clock in a race) is
/// never lost: it lands in the newer slice of its bucket.
pub struct WindowedCounter {
    slices: Slices,
    buckets: Box<[AtomicU64]>,
}

/// How a window is cut into time slices, shared by [`WindowedCounter`], `WindowedTotals` and
/// [`WindowedPair`]. 32 bytes: the window is kept in nanoseconds, as the slicing computes it
/// (saturating at `u64::MAX` ns, 584 years), because a client held three of these per backend
/// (throttle, retry budget) and 8 bytes each brought the simulator's per-client policies
/// (`Caller`) to exactly four cache lines.
#[derive(Debug, Clone, Copy)]
struct Slices {
    origin: Instant,
    slice_nanos: u64,
    window_nanos: u64,
}

impl Slices {
    /// The slicing of `window` into `buckets` (clamped to `1..=`[`MAX_BUCKETS`], each slice at
    /// least 1 ns), and the clamped bucket count.
    fn new(window: Duration, buckets: usize, origin: Instant) -> (Slices, usize) {
        let n = buckets.clamp(1, MAX_BUCKETS);
        let window_nanos = saturating_nanos(window);
        let slice_nanos = (window_nanos / n as u64).max(1);
        (
            Slices {
                origin,
                slice_nanos,
                window_nanos,
            },
            n,
        )
    }

    /// The index of the time slice `now` falls in.
    #[inline]
    fn at(&self, now: Instant) -> u64 {
        nanos_since(self.origin, now) / self.slice_nanos
    }

    fn slice(&self) -> Duration {
        Duration::from_nanos(self.slice_nanos)
    }

    /// The window, as configured (up to 584 years: see the type's docs).
    fn window(&self) -> Duration {
        Duration::from_nanos(self.window_nanos)
    }
}

impl WindowedCounter {
    /// A counter over `window`, kept in `buckets` buckets, with time measured from `origin`.
    ///
    /// This constructor cannot fail: `buckets` is clamped to `1..=`[`MAX_BUCKETS`] and each
    /// bucket slice to at least 1 ns. The policies that use it validate their own configuration
    /// first and name the field that is wrong.
    pub fn new(window: Duration, buckets: usize, origin: Instant) -> Self {
        let (slices, n) = Slices::new(window, buckets, origin);
        WindowedCounter {
            slices,
            buckets: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The window this counter spans, as configured (a window beyond `u64::MAX` ns, 584 years, reads as that).
    pub fn window(&self) -> Duration {
        self.slices.window()
    }

    /// The number of buckets (after clamping).
    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }

    /// The length of one bucket's time slice.
    pub fn slice(&self) -> Duration {
        self.slices.slice()
    }

    #[inline]
    fn slice_at(&self, now: Instant) -> u64 {
        self.slices.at(now)
    }

    #[inline]
    fn len(&self) -> u64 {
        self.buckets.len() as u64
    }

    /// Adds `n` events at `now`.
    pub fn add(&self, now: Instant, n: u64) {
        let _ = self.add_at_slice(self.slice_at(now), n);
    }

    /// Adds `n` events at `now` and says which bucket and round they landed in, so that the
    /// caller can take them back with [`WindowedCounter::take_back`]. Test-only since the sixth
    /// round: the retry budget reserves in a [`WindowedPair`] now, and its model (the budget over
    /// two counters, as it was) uses these.
    #[cfg(test)]
    pub(crate) fn add_landed(&self, now: Instant, n: u64) -> Option<Landed> {
        self.add_at_slice(self.slice_at(now), n)
    }

    /// Adds `n` events to time slice `slice`: where they landed.
    #[inline]
    fn add_at_slice(&self, slice: u64, n: u64) -> Option<Landed> {
        if n == 0 {
            return None;
        }
        let idx = (slice % self.len()) as usize;
        // Truncation is the documented wrap of the round tag.
        let round = (slice / self.len()) as u32;
        let bucket = self.buckets.get(idx)?; // always Some: idx < len
        let (tag, _) = bucket_add(bucket, round, n);
        Some(Landed { idx, tag })
    }

    /// Takes back `n` events that [`WindowedCounter::add_landed`] put in, unless their bucket has
    /// since rolled over to another round (then they are already forgotten and nothing is taken).
    /// Used by the retry budget's model (see [`WindowedCounter::add_landed`]).
    #[cfg(test)]
    pub(crate) fn take_back(&self, landed: Landed, n: u64) {
        let take = u32::try_from(n).unwrap_or(u32::MAX);
        let Some(bucket) = self.buckets.get(landed.idx) else {
            return;
        };
        let mut cur = bucket.load(Ordering::Relaxed);
        loop {
            let (tag, count) = unpack(cur);
            if tag != landed.tag {
                return;
            }
            let next = pack(tag, count.saturating_sub(take));
            match bucket.compare_exchange_weak(cur, next, Ordering::SeqCst, Ordering::Relaxed) {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    /// The number of events in the window ending at `now`.
    pub fn sum(&self, now: Instant) -> u64 {
        let slice = self.slice_at(now);
        let len = self.len();
        // Bucket `current` holds `now`'s slice. Bucket i's most recent slice not after `now` is
        // in this round for i <= current and in the previous one for i > current; early in the
        // counter's life (round 0) the previous round is −1, which only a raced-ahead write
        // (round 0) can match. Working that out once, instead of per bucket, keeps the loop free
        // of divisions — two 64-bit divisions per bucket were most of a throttle decision.
        // Truncation is the documented wrap of the round tag.
        let round = (slice / len) as u32;
        let current = (slice % len) as usize;
        let (this_round, previous_round) =
            self.buckets.split_at((current + 1).min(self.buckets.len()));
        sum_round(this_round, round) + sum_round(previous_round, round.wrapping_sub(1))
    }
}

/// Adds `n` events of round `round` to `bucket` (resetting it first if it holds an older round;
/// adding to the newer round if a writer whose clock raced ahead already moved it on). Returns
/// the round the events landed in and by how much the bucket's count changed: less than `n`,
/// even negative, when a stale count was reset on the way. One compare-exchange loop.
#[inline]
fn bucket_add(bucket: &AtomicU64, round: u32, n: u64) -> (u32, i64) {
    let add = u32::try_from(n).unwrap_or(u32::MAX);
    let mut cur = bucket.load(Ordering::Relaxed);
    loop {
        let (tag, count) = unpack(cur);
        // Signed distance handles the wrap of the tag: >= 0 means the bucket holds our round
        // or a newer one written by a thread whose clock read raced ahead of ours.
        let (tag, next, delta) = if tag.wrapping_sub(round) as i32 >= 0 {
            let sum = count.saturating_add(add);
            (tag, pack(tag, sum), i64::from(sum - count))
        } else {
            (round, pack(round, add), i64::from(add) - i64::from(count))
        };
        match bucket.compare_exchange_weak(cur, next, Ordering::SeqCst, Ordering::Relaxed) {
            Ok(_) => return (tag, delta),
            Err(actual) => cur = actual,
        }
    }
}

/// Empties `bucket` if it still holds round `round` or an older one (its events have left the
/// window); returns how many events it removed. A bucket already reset to a newer round is left
/// alone: whoever reset it accounted for what it held. (Used by the test-only reference.)
#[cfg(test)]
fn bucket_retire(bucket: &AtomicU64, round: u32) -> u32 {
    let mut cur = bucket.load(Ordering::Relaxed);
    loop {
        let (tag, count) = unpack(cur);
        if count == 0 || (round.wrapping_sub(tag) as i32) < 0 {
            return 0;
        }
        let next = pack(tag, 0);
        match bucket.compare_exchange_weak(cur, next, Ordering::SeqCst, Ordering::Relaxed) {
            Ok(_) => return count,
            Err(actual) => cur = actual,
        }
    }
}

/// The counts of `buckets` whose round is `expected` or one ahead of it: 0 means the bucket's
/// slice is inside the window, 1 that a concurrent writer's `now` was a little ahead of ours —
/// its events are the newest there are, so they count. Cannot overflow: at most
/// [`MAX_BUCKETS`] counts of at most `u32::MAX` each.
#[inline]
fn sum_round(buckets: &[AtomicU64], expected: u32) -> u64 {
    let mut total: u64 = 0;
    for bucket in buckets {
        let (tag, count) = unpack(bucket.load(Ordering::SeqCst));
        if tag.wrapping_sub(expected) <= 1 {
            total += u64::from(count);
        }
    }
    total
}

impl fmt::Debug for WindowedCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WindowedCounter")
            .field("window", &self.slices.window())
            .field("buckets", &self.buckets.len())
            .finish_non_exhaustive()
    }
}

/// Serde helper: a `Duration` as plain (fractional) seconds, e.g. `window = 120` or `0.5`.
///
/// Used with `#[serde(with = "crate::window::serde_secs")]` by the client-side configs.
#[cfg(feature = "serde")]
pub(crate) mod serde_secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(d)?;
        Duration::try_from_secs_f64(secs).map_err(|_| {
            serde::de::Error::custom(format!(
                "invalid duration {secs}: expected a finite, non-negative number of seconds"
            ))
        })
    }
}

#[cfg(test)]
mod tests;
