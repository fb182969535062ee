//! Lock-free sliding-window counts, the memory behind the adaptive throttle, the retry budget
//! and the proxy's per-task error rate.
//!
//! Why it is built like this: the client-side policies of the SRE book (ch. 21, "Client-side
//! throttling" counts requests and accepts "over the last two minutes"; the retry budget counts
//! retries against requests) are consulted on every request, from many threads at once, so the
//! counter must take no lock and allocate nothing after construction. A sliding window kept in
//! time buckets (as in gRPC-go's adaptive throttler and Envoy's admission-control filter) forgets
//! old traffic gradually instead of in one jump.
//!
//! One type, [`Windowed`], generic over how many counts a slice holds (one or two, in one
//! word): running totals corrected as slices leave the window, so a read costs the same
//! whatever the number of buckets (`windowed.rs` says how).
//!
//! Writes and reads are `SeqCst`: on x86 that costs nothing over `Relaxed` (loads are plain
//! moves, read-modify-writes are locked either way), and it gives the retry budget's
//! reserve-then-check a single order, so two callers whose `now` straddle a bucket boundary
//! cannot both miss each other's reservation.

use std::time::{Duration, Instant};

use crate::clock::{nanos_since, saturating_nanos};

mod windowed;
pub(crate) use windowed::Landed;
pub use windowed::Windowed;

/// The largest number of buckets a counter keeps (one per second over an hour). More buckets buy
/// nothing measurable and make a sweep after a long silence slower.
pub const MAX_BUCKETS: usize = 3600;

/// How a window is cut into time slices. 32 bytes: the window is kept in nanoseconds, as the
/// slicing computes it (saturating at `u64::MAX` ns, 584 years), because a client held three
/// of these per backend (throttle, retry budget) and 8 bytes each brought the simulator's
/// per-client policies (`Caller`) to exactly four cache lines.
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
