//! Injected time.
//!
//! Every policy takes time as an argument (`now: Instant`) or reads it from a [`Clock`], so tests
//! and the simulator can drive seconds of behaviour without sleeping. Components that must keep
//! time in atomics store it as nanoseconds since an origin `Instant` they were built with.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A source of monotonic time.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// The process's monotonic clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that moves only when told to; cheap to clone (clones share the time).
#[derive(Debug, Clone)]
pub struct ManualClock {
    origin: Instant,
    offset_nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock standing at an arbitrary fixed origin.
    pub fn new() -> Self {
        ManualClock {
            origin: Instant::now(),
            offset_nanos: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Moves time forward by `d`.
    pub fn advance(&self, d: Duration) {
        self.offset_nanos
            .fetch_add(saturating_nanos(d), Ordering::SeqCst);
    }

    /// Time elapsed since the clock was created.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.offset_nanos.load(Ordering::SeqCst))
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.origin + self.elapsed()
    }
}

/// `d` in nanoseconds, saturating at `u64::MAX` (about 584 years).
#[inline]
pub fn saturating_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Nanoseconds from `origin` to `now`, or 0 if `now` is earlier.
#[inline]
pub fn nanos_since(origin: Instant, now: Instant) -> u64 {
    saturating_nanos(now.saturating_duration_since(origin))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_advanced() {
        let c = ManualClock::new();
        let t0 = c.now();
        assert_eq!(c.now(), t0);
        let c2 = c.clone();
        c2.advance(Duration::from_millis(1500));
        assert_eq!(c.now() - t0, Duration::from_millis(1500));
        assert_eq!(nanos_since(t0, c.now()), 1_500_000_000);
        assert_eq!(nanos_since(c.now(), t0), 0);
    }
}
