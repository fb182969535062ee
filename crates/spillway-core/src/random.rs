//! Injected randomness, for the probabilistic policies (throttle, shed ramp, jitter).

use std::fmt;
use std::sync::Mutex;

/// A source of uniform draws in `[0, 1)`.
pub trait RandomSource: Send + Sync + fmt::Debug {
    /// A uniform draw in `[0, 1)`.
    fn uniform(&self) -> f64;
}

/// Thread-local fast PRNG (`fastrand`); no lock, no allocation.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadRandom;

impl RandomSource for ThreadRandom {
    #[inline]
    fn uniform(&self) -> f64 {
        fastrand::f64()
    }
}

/// A seeded generator for reproducible tests and simulations.
#[derive(Debug)]
pub struct SeededRandom(Mutex<fastrand::Rng>);

impl SeededRandom {
    /// A generator whose sequence is fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        SeededRandom(Mutex::new(fastrand::Rng::with_seed(seed)))
    }
}

impl RandomSource for SeededRandom {
    fn uniform(&self) -> f64 {
        match self.0.lock() {
            Ok(mut r) => r.f64(),
            Err(poisoned) => poisoned.into_inner().f64(),
        }
    }
}

/// Always returns the same value: pins a probabilistic decision in a unit test.
#[derive(Debug, Clone, Copy)]
pub struct FixedRandom(pub f64);

impl RandomSource for FixedRandom {
    fn uniform(&self) -> f64 {
        self.0
    }
}
