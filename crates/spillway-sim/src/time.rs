//! Simulated time and seeded randomness handed to the core.
//!
//! Why: the core's policies read time only from `now` arguments or an injected `Clock`, and
//! draw randomness only from an injected `RandomSource`, so the simulator can run them at fleet
//! scale on a virtual clock and reproduce every decision from a seed. `SimClock` is an origin
//! `Instant` (taken once, at the start) plus an offset the event loop sets before each event;
//! the real clock is never read afterwards.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use spillway_core::{Clock, RandomSource};

/// The simulated clock: `origin + offset`, the offset set by the event loop.
#[derive(Debug)]
pub struct SimClock {
    origin: Instant,
    nanos: AtomicU64,
}

impl SimClock {
    /// A clock at offset 0 from `origin`.
    pub fn new(origin: Instant) -> Self {
        SimClock {
            origin,
            nanos: AtomicU64::new(0),
        }
    }

    /// Moves the clock to `nanos` after the origin.
    #[inline]
    pub fn set(&self, nanos: u64) {
        self.nanos.store(nanos, Ordering::Relaxed);
    }

    /// The instant `nanos` after the origin.
    #[inline]
    pub fn at(&self, nanos: u64) -> Instant {
        self.origin + Duration::from_nanos(nanos)
    }
}

impl Clock for SimClock {
    #[inline]
    fn now(&self) -> Instant {
        self.at(self.nanos.load(Ordering::Relaxed))
    }
}

/// A seeded wyrand generator behind an atomic, so it is `Sync` without a lock; the simulator is
/// single-threaded, so the load–store pair is never interleaved and the sequence is fixed by
/// the seed (wyrand: Wang Yi, public domain; the generator `fastrand` uses).
#[derive(Debug)]
pub struct SimRandom(AtomicU64);

impl SimRandom {
    /// A generator whose sequence is fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        SimRandom(AtomicU64::new(seed))
    }
}

impl RandomSource for SimRandom {
    #[inline]
    fn uniform(&self) -> f64 {
        let s = self
            .0
            .load(Ordering::Relaxed)
            .wrapping_add(0xa076_1d64_78bd_642f);
        self.0.store(s, Ordering::Relaxed);
        let t = u128::from(s) * u128::from(s ^ 0xe703_7ed1_a0b4_28db);
        let r = ((t >> 64) as u64) ^ (t as u64);
        (r >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_moves_only_when_set() {
        let t0 = Instant::now();
        let c = SimClock::new(t0);
        assert_eq!(c.now(), t0);
        c.set(1_500_000_000);
        assert_eq!(c.now() - t0, Duration::from_millis(1500));
    }

    #[test]
    fn random_is_seeded_and_uniform() {
        let a = SimRandom::new(9);
        let b = SimRandom::new(9);
        let xs: Vec<f64> = (0..1000).map(|_| a.uniform()).collect();
        let ys: Vec<f64> = (0..1000).map(|_| b.uniform()).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().all(|x| (0.0..1.0).contains(x)));
        let mean = xs.iter().sum::<f64>() / 1000.0;
        assert!((mean - 0.5).abs() < 0.05, "{mean}");
    }
}
