//! The one sliding-window counter: `N` counts of events (one or two) over a window of time
//! slices, with O(1) sums, 8 bytes a slice. The adaptive throttle's requests and accepts, the
//! retry budget's requests and retries, and the proxy's per-task requests and errors.
//!
//! Why one type generic over how many counts it keeps: the throttle (SRE book ch. 21,
//! "Client-side throttling") keeps, per client and backend, requests and accepts over the last
//! two minutes in 120 one-second slices, read on every request; the retry budget counts
//! retries against requests, the proxy errors against requests. Each used to have a counter of
//! its own shape (one that summed its buckets when read, one with running totals, and a third,
//! wider one kept as a test reference); they now share this one. One `AtomicU64` holds a
//! slice's round tag and its counts:
//!
//! ```text
//! N = 2: bits 63..48 round tag (16 bits)   bits 47..24 first count   bits 23..0 second count
//! N = 1: bits 63..48 round tag (16 bits)   bits 31..0  the count
//! ```
//!
//! Running totals, corrected when a reader first sees time pass a slice ("sweeping"), and one
//! compare-exchange per bucket change so that each event enters and leaves the totals exactly
//! once; a proptest checks the sums against a brute-force count of every event.
//!
//! Why 16 tag bits are enough: a tag is only ever compared with rounds close to it. Every write
//! lands at most one window ahead of the newest slice swept (a write further ahead sweeps
//! first), and every sweep retires what left the window, so a bucket holding events carries
//! the round of a slice inside `[swept − window, swept + window)`: rounds differ by at most 2.
//! The one comparison that can meet an old tag is a sweep after a silence of more than a
//! window; there a bucket keeps its events only if its tag is the new window's round (or one
//! after it), which a stale tag could match only after a silence of 2¹⁶ windows ± 2. So a
//! sweep after a silence of 2¹⁴ windows or more (22 days at the throttle's 120 s) empties every
//! bucket without comparing: the price is that an event written *concurrently* with that sweep
//! may be forgotten with the rest (the totals stay exact: it leaves them as it leaves its
//! bucket).
//!
//! The saturating rule: each count saturates at [`Windowed::MAX_SLICE_COUNT`] events *per
//! slice* — 2²⁴ − 1 = 16,777,215 for two counts (16.7 M requests per second to one backend at
//! the throttle's default 1 s slices; with long slices, e.g. one bucket for the whole 120 s
//! window, 140 k/s), 2³² − 1 for one. Events past it are not counted in that slice, and the
//! totals follow the buckets exactly (they never drift). For the throttle the requests count
//! saturates first, so the throttle would refuse less, never more.
//!
//! When time goes backwards between calls (threads racing on the clock), all bounded by one
//! window:
//! - a write older than the newest sweep counts at the newest slice swept (it is not lost);
//! - a slice's counts share a word, so a writer reusing a stale bucket resets them all;
//! - a write more than a window ahead of the newest sweep sweeps first, so a reader lagging
//!   behind it reads the newer window's totals;
//! - concurrent writers and sweepers keep the totals exact (a test below).
//!
//! Reservations (the retry budget's requests and retries):
//! [`Windowed::add_landed`] says where its events landed — bucket, round tag and how many
//! counted — and [`Windowed::take_back`] removes them from that bucket and the total, unless the
//! bucket has since been retired or reused (then they already left the total with it). An add
//! is one `SeqCst` compare-exchange on the bucket and then one `SeqCst` add to the total; a
//! take-back the same in reverse. So, in the single order of `SeqCst` operations, a reader's
//! load of a total after its own add to it sees every add to that total before it that was not
//! taken back or retired meanwhile: the retry budget's argument (`retry/budget.rs`).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::Slices;

#[cfg(test)]
mod tests;

/// Where the round tag starts in a slice word: above the counts' 48 bits.
const TAG_SHIFT: u32 = 48;
/// A sweep over a silence of this many windows or more empties every bucket unconditionally:
/// far below the 2¹⁵ rounds at which a 16-bit tag's signed distance would wrap.
const CLEAR_AFTER_WINDOWS: u64 = 1 << 14;

/// A slice word, unpacked: round tag and the `N` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Word<const N: usize> {
    tag: u16,
    counts: [u32; N],
}

impl<const N: usize> Word<N> {
    /// Bits of each count: the 48 below the tag shared out, at most 32 (a `u32`).
    const BITS: u32 = if N == 1 { 32 } else { 48 / N as u32 };
    const MASK: u64 = (1 << Self::BITS) - 1;

    #[inline]
    fn unpack(w: u64) -> Self {
        // Each field fits by construction; the casts drop only bits that are not there.
        Word {
            tag: (w >> TAG_SHIFT) as u16,
            counts: std::array::from_fn(|i| {
                ((w >> (Self::BITS * (N - 1 - i) as u32)) & Self::MASK) as u32
            }),
        }
    }

    #[inline]
    fn pack(self) -> u64 {
        let mut w = u64::from(self.tag) << TAG_SHIFT;
        for (i, c) in self.counts.iter().enumerate() {
            w |= (u64::from(*c) & Self::MASK) << (Self::BITS * (N - 1 - i) as u32);
        }
        w
    }

    #[inline]
    fn is_empty(self) -> bool {
        self.counts == [0; N]
    }

    /// Count `which` (0 or `N − 1`; anything else reads as the last). A select between two
    /// constant indices rather than an index: an indexed array lives on the stack, and reading
    /// the word back whole after two 32-bit writes missed store-to-load forwarding on the hot
    /// path (~4% of a 10⁴-task simulation waited there).
    #[inline]
    fn count(self, which: usize) -> u32 {
        if which == 0 {
            self.counts[0]
        } else {
            self.counts[N - 1]
        }
    }

    /// This word with count `which` (as in [`count`](Self::count)) set to `v`.
    #[inline]
    fn with_count(self, which: usize, v: u32) -> Self {
        let mut counts = self.counts;
        if which == 0 {
            counts[0] = v;
        } else {
            counts[N - 1] = v;
        }
        Word {
            tag: self.tag,
            counts,
        }
    }
}

/// The round tag of `slice` in a window of `len` buckets. Truncation to 16 bits is the
/// documented wrap of the tag (see the module docs for why close rounds are all that matter).
#[inline]
fn round_of(slice: u64, len: u64) -> u16 {
    (slice / len) as u16
}

/// Where a [`Windowed::add_landed`] put its events: bucket index, round tag, and how many
/// were counted (fewer than asked only at [`Windowed::MAX_SLICE_COUNT`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Landed {
    idx: usize,
    tag: u16,
    added: u32,
}

impl Landed {
    /// How many events were counted.
    pub(crate) fn added(&self) -> u32 {
        self.added
    }
}

/// `N` counts (1 or 2) of events over one sliding window, 8 bytes a slice, with O(1) sums.
///
/// The window is the current slice plus the `buckets − 1` before it, so an event is counted
/// for at least `window × (buckets − 1) / buckets` and never once it is `window` old. Time is
/// passed in (`now`) and kept as nanoseconds since the `origin` given at construction. No
/// method takes a lock or allocates after construction; see the module docs for the packing,
/// the saturation and what happens when time goes backwards.
pub struct Windowed<const N: usize> {
    slices: Slices,
    /// Bucket `i` holds slice `i, i + B, …`: round tag and both counts in one word.
    buckets: Box<[AtomicU64]>,
    /// Events in the buckets not yet retired, per count, as two's-complement `i64`s (a reader
    /// racing a writer can see one transiently off; never below 0 after clamping).
    totals: [AtomicU64; N],
    /// The newest slice swept to: every slice older than `swept − (buckets − 1)` has been
    /// retired from the totals.
    swept: AtomicU64,
}

impl<const N: usize> Windowed<N> {
    /// The largest count a slice holds; adds saturate here (see the module docs).
    pub const MAX_SLICE_COUNT: u64 = Word::<N>::MASK;

    /// `N` counts over `window` in `buckets` buckets, with time measured from `origin`.
    ///
    /// This constructor cannot fail: `buckets` is clamped to
    /// `1..=`[`MAX_BUCKETS`](super::MAX_BUCKETS) and each bucket slice to at least 1 ns. The
    /// policies that use it validate their own configuration first and name the field that is
    /// wrong. `N` must be 1 or 2 (checked when compiled).
    pub fn new(window: Duration, buckets: usize, origin: Instant) -> Self {
        const { assert!(N == 1 || N == 2, "a slice word holds one or two counts") };
        let (slices, n) = Slices::new(window, buckets, origin);
        Windowed {
            slices,
            buckets: (0..n).map(|_| AtomicU64::new(0)).collect(),
            totals: std::array::from_fn(|_| AtomicU64::new(0)),
            swept: AtomicU64::new(0),
        }
    }

    /// The window these counts span, as configured (a window beyond `u64::MAX` ns, 584 years, reads as that).
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
    fn len(&self) -> u64 {
        self.buckets.len() as u64
    }

    /// The address of the bucket an event at `now` goes to (for prefetch hints).
    #[cfg(feature = "hints")]
    #[inline]
    pub(crate) fn bucket_addr(&self, now: Instant) -> *const u8 {
        let idx = (self.slices.at(now) % self.len()) as usize;
        self.buckets
            .get(idx)
            .map_or(std::ptr::null(), |b| b as *const AtomicU64 as *const u8)
    }

    /// Adds `n` events to count `which` (below `N`; others are ignored) at `now` — at the
    /// newest slice swept, if `now` is older. Saturates at
    /// [`MAX_SLICE_COUNT`](Self::MAX_SLICE_COUNT) per slice.
    #[inline]
    pub fn add(&self, now: Instant, which: usize, n: u64) {
        let _ = self.add_landed(now, which, n);
    }

    /// [`add`](Self::add), saying where the events landed so that
    /// [`take_back`](Self::take_back) can remove them; `None` if nothing was added (`n == 0`
    /// or `which >= N`).
    #[inline]
    pub(crate) fn add_landed(&self, now: Instant, which: usize, n: u64) -> Option<Landed> {
        if n == 0 || which >= N {
            return None;
        }
        let len = self.len();
        let swept = self.swept.load(Ordering::SeqCst);
        let mut slice = self.slices.at(now);
        if slice >= swept.saturating_add(len) {
            // A window or more ahead of every sweep: sweep first, so that the bucket's tag is
            // compared only with rounds close to it (module docs).
            self.sweep(swept, slice);
        } else {
            slice = slice.max(swept);
        }
        let idx = (slice % len) as usize;
        let bucket = self.buckets.get(idx)?; // always Some: the index is below len
        let round = round_of(slice, len);
        let add = u32::try_from(n.min(Self::MAX_SLICE_COUNT)).unwrap_or(0);
        // Never `Err`: the update always returns a word.
        let prev = bucket
            .fetch_update(Ordering::SeqCst, Ordering::Relaxed, |cur| {
                Some(bumped(Word::<N>::unpack(cur), round, which, add).pack())
            })
            .unwrap_or_else(|prev| prev);
        let old = Word::<N>::unpack(prev);
        let next = bumped(old, round, which, add);
        let kept = if next.tag == old.tag && !old.is_empty() {
            old.count(which)
        } else {
            0
        };
        let delta: [i64; N] =
            std::array::from_fn(|i| i64::from(next.counts[i]) - i64::from(old.counts[i]));
        let landed = Landed {
            idx,
            tag: next.tag,
            added: next.count(which).saturating_sub(kept),
        };
        for (total, d) in self.totals.iter().zip(delta) {
            if d != 0 {
                // Two's complement: a negative delta (a stale bucket reset) subtracts.
                total.fetch_add(d as u64, Ordering::SeqCst);
            }
        }
        Some(landed)
    }

    /// Takes back up to `n` of the events of count `which` that `landed` put in (never more
    /// than it counted), unless their bucket has since been retired or reused for another
    /// round: then they have already left the total, and nothing is taken.
    pub(crate) fn take_back(&self, landed: Landed, which: usize, n: u64) {
        let want = u32::try_from(n).unwrap_or(u32::MAX).min(landed.added);
        let (Some(bucket), true) = (self.buckets.get(landed.idx), which < N) else {
            return;
        };
        let take = |w: Word<N>| {
            let take = want.min(w.count(which));
            (w.tag == landed.tag && take > 0).then_some(take)
        };
        let updated = bucket.fetch_update(Ordering::SeqCst, Ordering::Relaxed, |cur| {
            let w = Word::<N>::unpack(cur);
            Some(w.with_count(which, w.count(which) - take(w)?).pack())
        });
        if let Some(taken) = updated.ok().and_then(|prev| take(Word::<N>::unpack(prev))) {
            self.totals[which].fetch_sub(u64::from(taken), Ordering::SeqCst);
        }
    }

    /// Every count over the window ending at `now`.
    #[inline]
    pub fn sums(&self, now: Instant) -> [u64; N] {
        let slice = self.slices.at(now);
        let swept = self.swept.load(Ordering::SeqCst);
        if slice > swept {
            self.sweep(swept, slice);
        }
        self.totals
            .each_ref()
            .map(|t| (t.load(Ordering::SeqCst) as i64).max(0) as u64)
    }

    /// Every count over the current slice and the one before it, and the time those span (one
    /// slice plus what has passed of the current one; with a single bucket, the current slice
    /// only): the recent rate, beside the window's. Read from the two buckets by their round
    /// tags, without sweeping; a bucket not yet written in its slice reads as empty.
    pub fn recent(&self, now: Instant) -> ([u64; N], Duration) {
        let slice_nanos = self.slices.slice_nanos;
        let elapsed = crate::clock::nanos_since(self.slices.origin, now);
        let (slice, into) = (elapsed / slice_nanos, elapsed % slice_nanos);
        let len = self.len();
        let mut sums = [0u64; N];
        let mut span = into;
        let previous = (len >= 2 && slice > 0).then(|| slice - 1);
        for s in std::iter::once(slice).chain(previous) {
            if s != slice {
                span = span.saturating_add(slice_nanos);
            }
            let Some(bucket) = self.buckets.get((s % len) as usize) else {
                continue;
            };
            let w = Word::<N>::unpack(bucket.load(Ordering::SeqCst));
            if w.tag == round_of(s, len) {
                for (sum, c) in sums.iter_mut().zip(w.counts) {
                    *sum += u64::from(c);
                }
            }
        }
        (sums, Duration::from_nanos(span))
    }

    /// Retires the slices that left the window between the sweeps at slices `from` and `to`:
    /// slice `u` leaves when the window reaches `u + buckets`. Only the last `buckets` of them
    /// can still hold anything; each bucket is visited at most once.
    #[cold]
    fn sweep(&self, from: u64, to: u64) {
        let len = self.len();
        if to.saturating_sub(from) / len >= CLEAR_AFTER_WINDOWS {
            for bucket in self.buckets.iter() {
                self.subtract(Word::<N>::unpack(bucket.swap(0, Ordering::SeqCst)).counts);
            }
            self.swept.fetch_max(to, Ordering::SeqCst);
            return;
        }
        let start = from.max(to.saturating_sub(len)).saturating_add(1).max(len);
        for t in start..=to {
            let expired = t - len;
            let Some(bucket) = self.buckets.get((expired % len) as usize) else {
                continue;
            };
            self.subtract(retire::<N>(bucket, round_of(expired, len)));
        }
        self.swept.fetch_max(to, Ordering::SeqCst);
    }

    /// Takes events that left their buckets out of the totals.
    fn subtract(&self, removed: [u32; N]) {
        for (total, r) in self.totals.iter().zip(removed) {
            if r > 0 {
                total.fetch_sub(u64::from(r), Ordering::SeqCst);
            }
        }
    }

    /// Every count summed bucket by bucket (rounds 0 or 1 ahead of each bucket's expected one,
    /// as a scan that kept no totals would); for tests.
    #[cfg(test)]
    pub(crate) fn sums_by_scan(&self, now: Instant) -> [u64; N] {
        let slice = self.slices.at(now);
        let len = self.len();
        let (round, current) = (round_of(slice, len), slice % len);
        let mut sums = [0u64; N];
        for (i, b) in self.buckets.iter().enumerate() {
            let expected = if i as u64 <= current {
                round
            } else {
                round.wrapping_sub(1)
            };
            let w = Word::<N>::unpack(b.load(Ordering::SeqCst));
            if w.tag.wrapping_sub(expected) <= 1 {
                for (sum, c) in sums.iter_mut().zip(w.counts) {
                    *sum += u64::from(c);
                }
            }
        }
        sums
    }

    /// The running totals as kept, unclamped; for tests.
    #[cfg(test)]
    pub(crate) fn raw_totals(&self) -> [i64; N] {
        self.totals
            .each_ref()
            .map(|t| t.load(Ordering::SeqCst) as i64)
    }
}

/// Empties `bucket` unless it holds the slice that replaced the expired one (round
/// `expired_round + 1`) or a writer's a little ahead of it (`+ 2`): whoever reset it to that
/// round accounted for what it held. Returns the counts it removed.
fn retire<const N: usize>(bucket: &AtomicU64, expired_round: u16) -> [u32; N] {
    bucket
        .fetch_update(Ordering::SeqCst, Ordering::Relaxed, |cur| {
            let w = Word::<N>::unpack(cur);
            let keep = w.is_empty() || matches!(w.tag.wrapping_sub(expired_round), 1 | 2);
            (!keep).then(|| {
                Word {
                    tag: w.tag,
                    counts: [0; N],
                }
                .pack()
            })
        })
        .map_or([0; N], |prev| Word::<N>::unpack(prev).counts)
}

/// `old` with `add` more events of count `which` in round `round`: a word of an older round (or
/// an empty one) starts again at zero under the new tag. Signed distance handles the wrap: ≥ 0
/// is our round or a newer one written by a thread whose clock raced ahead. Saturates at
/// [`Windowed::MAX_SLICE_COUNT`].
#[inline]
fn bumped<const N: usize>(old: Word<N>, round: u16, which: usize, add: u32) -> Word<N> {
    let mut next = old;
    if old.is_empty() || (old.tag.wrapping_sub(round) as i16) < 0 {
        next = Word {
            tag: round,
            counts: [0; N],
        };
    }
    let bumped = (u64::from(next.count(which)) + u64::from(add)).min(Word::<N>::MASK);
    next.with_count(which, bumped as u32)
}

impl<const N: usize> fmt::Debug for Windowed<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let totals = self
            .totals
            .each_ref()
            .map(|t| t.load(Ordering::Relaxed) as i64);
        f.debug_struct("Windowed")
            .field("window", &self.slices.window())
            .field("buckets", &self.buckets.len())
            .field("totals", &totals)
            .finish_non_exhaustive()
    }
}
