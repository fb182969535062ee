//! A lock-free sliding-window counter, the memory behind the adaptive throttle and the retry budget.
//!
//! Why it is built like this: the client-side policies of the SRE book (ch. 21, "Client-side
//! throttling" counts requests and accepts "over the last two minutes"; the retry budget counts
//! retries against requests) are consulted on every request, from many threads at once, so the
//! counter must take no lock and allocate nothing after construction. A sliding window kept in
//! time buckets (as in gRPC-go's adaptive throttler and Envoy's admission-control filter) forgets
//! old traffic gradually instead of in one jump.
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
    origin: Instant,
    slice_nanos: u64,
    window: Duration,
    buckets: Box<[AtomicU64]>,
}

impl WindowedCounter {
    /// A counter over `window`, kept in `buckets` buckets, with time measured from `origin`.
    ///
    /// This constructor cannot fail: `buckets` is clamped to `1..=`[`MAX_BUCKETS`] and each
    /// bucket slice to at least 1 ns. The policies that use it validate their own configuration
    /// first and name the field that is wrong.
    pub fn new(window: Duration, buckets: usize, origin: Instant) -> Self {
        let n = buckets.clamp(1, MAX_BUCKETS);
        let slice_nanos = (saturating_nanos(window) / n as u64).max(1);
        WindowedCounter {
            origin,
            slice_nanos,
            window,
            buckets: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The window this counter spans, as configured.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The number of buckets (after clamping).
    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }

    /// The length of one bucket's time slice.
    pub fn slice(&self) -> Duration {
        Duration::from_nanos(self.slice_nanos)
    }

    /// The index of the time slice `now` falls in.
    #[inline]
    fn slice_at(&self, now: Instant) -> u64 {
        nanos_since(self.origin, now) / self.slice_nanos
    }

    #[inline]
    fn len(&self) -> u64 {
        self.buckets.len() as u64
    }

    /// Adds `n` events at `now`.
    pub fn add(&self, now: Instant, n: u64) {
        let _ = self.add_landed(now, n);
    }

    /// Adds `n` events at `now` and says which bucket and round they landed in, so that the
    /// caller can take them back with [`WindowedCounter::take_back`].
    pub(crate) fn add_landed(&self, now: Instant, n: u64) -> Option<Landed> {
        if n == 0 {
            return None;
        }
        let slice = self.slice_at(now);
        let idx = (slice % self.len()) as usize;
        // Truncation is the documented wrap of the round tag.
        let round = (slice / self.len()) as u32;
        let add = u32::try_from(n).unwrap_or(u32::MAX);
        let bucket = self.buckets.get(idx)?; // always Some: idx < len
        let mut cur = bucket.load(Ordering::Relaxed);
        loop {
            let (tag, count) = unpack(cur);
            // Signed distance handles the wrap of the tag: >= 0 means the bucket holds our round
            // or a newer one written by a thread whose clock read raced ahead of ours.
            let (tag, next) = if tag.wrapping_sub(round) as i32 >= 0 {
                (tag, pack(tag, count.saturating_add(add)))
            } else {
                (round, pack(round, add))
            };
            match bucket.compare_exchange_weak(cur, next, Ordering::SeqCst, Ordering::Relaxed) {
                Ok(_) => return Some(Landed { idx, tag }),
                Err(actual) => cur = actual,
            }
        }
    }

    /// Takes back `n` events that [`WindowedCounter::add_landed`] put in, unless their bucket has
    /// since rolled over to another round (then they are already forgotten and nothing is taken).
    /// Used by the retry budget to release a reservation it did not spend.
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

    /// `(self.sum(now), other.sum(now))` in one pass over both counters' buckets when they
    /// share a geometry (origin, slice, bucket count), as the throttle's two counters do: the
    /// loop bookkeeping is paid once per bucket pair rather than once per bucket. The result
    /// is the same as two calls to [`sum`](Self::sum); counters of different geometry are
    /// simply summed one after the other.
    pub(crate) fn sum_pair(&self, other: &WindowedCounter, now: Instant) -> (u64, u64) {
        let same_geometry = self.origin == other.origin
            && self.slice_nanos == other.slice_nanos
            && self.buckets.len() == other.buckets.len();
        if !same_geometry {
            return (self.sum(now), other.sum(now));
        }
        let slice = self.slice_at(now);
        let len = self.len();
        let round = (slice / len) as u32; // as in `sum`
        let split = ((slice % len) as usize + 1).min(self.buckets.len());
        let (a_this, a_previous) = self.buckets.split_at(split);
        let (b_this, b_previous) = other.buckets.split_at(split);
        let (a1, b1) = sum_round_pair(a_this, b_this, round);
        let (a2, b2) = sum_round_pair(a_previous, b_previous, round.wrapping_sub(1));
        (a1 + a2, b1 + b2)
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

/// [`sum_round`] of two bucket slices of the same length, side by side.
#[inline]
fn sum_round_pair(a: &[AtomicU64], b: &[AtomicU64], expected: u32) -> (u64, u64) {
    let (mut total_a, mut total_b) = (0u64, 0u64);
    for (bucket_a, bucket_b) in a.iter().zip(b) {
        let (tag, count) = unpack(bucket_a.load(Ordering::SeqCst));
        if tag.wrapping_sub(expected) <= 1 {
            total_a += u64::from(count);
        }
        let (tag, count) = unpack(bucket_b.load(Ordering::SeqCst));
        if tag.wrapping_sub(expected) <= 1 {
            total_b += u64::from(count);
        }
    }
    (total_a, total_b)
}

impl fmt::Debug for WindowedCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WindowedCounter")
            .field("window", &self.window)
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
mod tests {
    use super::*;
    use std::sync::Arc;

    const S: Duration = Duration::from_secs(1);

    fn counter(window_secs: u64, buckets: usize) -> (WindowedCounter, Instant) {
        let t0 = Instant::now();
        (
            WindowedCounter::new(Duration::from_secs(window_secs), buckets, t0),
            t0,
        )
    }

    #[test]
    fn counts_within_the_window() {
        let (c, t0) = counter(10, 10);
        c.add(t0, 3);
        assert_eq!(c.sum(t0), 3);
        c.add(t0 + S * 4, 2);
        assert_eq!(c.sum(t0 + S * 4), 5);
        assert_eq!(c.sum(t0 + S * 9), 5);
    }

    #[test]
    fn bucket_expires_exactly_one_window_later() {
        let (c, t0) = counter(10, 10);
        c.add(t0 + Duration::from_millis(500), 7); // slice 0
        assert_eq!(c.sum(t0 + Duration::from_millis(9_999)), 7); // slice 9: still inside
        assert_eq!(c.sum(t0 + S * 10), 0); // slice 10 reuses bucket 0: forgotten
    }

    #[test]
    fn roll_over_resets_the_reused_bucket_lazily() {
        let (c, t0) = counter(10, 10);
        c.add(t0 + S * 3, 4); // slice 3, round 0
        c.add(t0 + S * 5, 1); // slice 5
        c.add(t0 + S * 13, 2); // slice 13: same bucket as slice 3, round 1 — the 4 must go
        assert_eq!(c.sum(t0 + S * 13), 1 + 2);
        assert_eq!(c.sum(t0 + S * 15), 2); // slice 5 has left the window too
        assert_eq!(c.sum(t0 + S * 23), 0);
    }

    #[test]
    fn forgets_everything_after_a_long_silence() {
        let (c, t0) = counter(120, 120);
        for s in 0..120 {
            c.add(t0 + S * s, 1);
        }
        assert_eq!(c.sum(t0 + S * 119), 120);
        // Exactly the same bucket indices, many rounds later: every tag is stale.
        assert_eq!(c.sum(t0 + S * (120 * 1000 + 119)), 0);
        c.add(t0 + S * (120 * 1000 + 5), 1);
        assert_eq!(c.sum(t0 + S * (120 * 1000 + 119)), 1);
    }

    #[test]
    fn a_write_from_a_lagging_clock_is_not_lost() {
        let (c, t0) = counter(10, 10);
        c.add(t0 + S * 12, 1); // bucket 2, round 1
        c.add(t0 + S * 2, 1); // a thread whose `now` is a whole window behind: lands in round 1
        assert_eq!(c.sum(t0 + S * 12), 2);
        // And a reader a little behind the writers still sees the raced-ahead events.
        let (c, t0) = counter(10, 10);
        c.add(t0 + S * 5, 1);
        assert_eq!(c.sum(t0 + S * 4), 1);
    }

    #[test]
    fn take_back_only_touches_the_round_it_added_to() {
        let (c, t0) = counter(10, 10);
        let landed = c.add_landed(t0, 3).expect("n > 0 lands");
        c.take_back(landed, 1);
        assert_eq!(c.sum(t0), 2);
        c.take_back(landed, 5); // saturates, never wraps
        assert_eq!(c.sum(t0), 0);
        assert_eq!(c.add_landed(t0, 0), None);
        let old = c.add_landed(t0, 1).expect("lands");
        c.add(t0 + S * 10, 4); // bucket 0, round 1: the round-0 event is gone
        c.take_back(old, 1); // must not eat a round-1 event
        assert_eq!(c.sum(t0 + S * 10), 4);
    }

    #[test]
    fn degenerate_construction_is_clamped_not_panicking() {
        let t0 = Instant::now();
        let c = WindowedCounter::new(Duration::ZERO, 0, t0);
        assert_eq!(c.buckets(), 1);
        assert_eq!(c.slice(), Duration::from_nanos(1));
        c.add(t0, 1);
        assert_eq!(c.sum(t0), 1);
        assert_eq!(c.sum(t0 + Duration::from_nanos(1)), 0);
        let c = WindowedCounter::new(Duration::MAX, usize::MAX, t0);
        assert_eq!(c.buckets(), MAX_BUCKETS);
        c.add(t0, u64::MAX); // saturates the bucket at u32::MAX
        assert_eq!(c.sum(t0), u64::from(u32::MAX));
        // `now` before the origin counts as the origin's slice.
        let c = WindowedCounter::new(Duration::from_secs(10), 10, t0 + S);
        c.add(t0, 1);
        assert_eq!(c.sum(t0 + S), 1);
    }

    #[test]
    fn concurrent_adds_are_exact() {
        let (c, t0) = counter(10, 10);
        let c = Arc::new(c);
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let c = Arc::clone(&c);
                std::thread::spawn(move || {
                    for i in 0..50_000u64 {
                        // Spread over several buckets, all inside one window.
                        c.add(t0 + Duration::from_millis((i + t) % 9_000), 1);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("adder thread panicked");
        }
        assert_eq!(c.sum(t0 + S * 9), 200_000);
    }

    /// The per-bucket formula `sum` used before it was hoisted out of the loop: the most recent
    /// slice ≡ i (mod len) not after `now`, its round, and a match on 0 or 1 round ahead.
    fn reference_sum(c: &WindowedCounter, now: Instant) -> u64 {
        let slice = c.slice_at(now);
        let len = c.len();
        let mut total = 0u64;
        for (i, bucket) in c.buckets.iter().enumerate() {
            let i = i as u64;
            let expected: i64 = if slice >= i {
                ((slice - (slice - i) % len) / len) as i64
            } else {
                -1
            };
            let (tag, count) = unpack(bucket.load(Ordering::SeqCst));
            let ahead = tag.wrapping_sub(expected as u32) as i32;
            if ahead == 0 || ahead == 1 {
                total += u64::from(count);
            }
        }
        total
    }

    proptest::proptest! {
        /// `sum` and `sum_pair` agree with the reference formula at any `now`, after adds at
        /// any times (lagging and raced-ahead writers included) and take-backs.
        #[test]
        fn sums_match_the_per_bucket_formula(
            buckets in 1usize..14,
            adds in proptest::collection::vec((0u64..40_000, 0u64..4, proptest::bool::ANY), 0..60),
            reads in proptest::collection::vec(0u64..45_000, 1..12),
        ) {
            let t0 = Instant::now();
            let ms = Duration::from_millis;
            let a = WindowedCounter::new(Duration::from_secs(10), buckets, t0);
            let b = WindowedCounter::new(Duration::from_secs(10), buckets, t0);
            for (at, n, other) in adds {
                let c = if other { &b } else { &a };
                if let Some(landed) = c.add_landed(t0 + ms(at), n) {
                    if at % 3 == 0 {
                        c.take_back(landed, 1);
                    }
                }
            }
            for at in reads {
                let now = t0 + ms(at);
                proptest::prop_assert_eq!(a.sum(now), reference_sum(&a, now));
                proptest::prop_assert_eq!(b.sum(now), reference_sum(&b, now));
                proptest::prop_assert_eq!(a.sum_pair(&b, now), (a.sum(now), b.sum(now)));
            }
            // Counters of different geometry fall back to two plain sums.
            let c = WindowedCounter::new(Duration::from_secs(7), buckets, t0);
            c.add(t0, 2);
            proptest::prop_assert_eq!(a.sum_pair(&c, t0), (a.sum(t0), c.sum(t0)));
        }
    }

    #[test]
    fn is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<WindowedCounter>();
    }
}
