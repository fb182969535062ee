//! Expected service time: an exponentially weighted moving average of recent service times.
//!
//! The queue drops a request that cannot finish by its deadline if it started now; that needs
//! the expected service time. The EWMA gain is 1/8, as TCP's smoothed RTT (RFC 6298 §2, α = 1/8):
//! it follows a shift in a few dozen samples while a single slow request moves it by 1/8.
//! Updated lock-free on every permit release (a compare-and-swap on nanoseconds).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::clock::saturating_nanos;

/// A lock-free EWMA of service times (gain 1/8).
#[derive(Debug, Default)]
pub struct ServiceTimeEstimate {
    /// Smoothed nanoseconds; 0 = no sample yet.
    nanos: AtomicU64,
}

impl ServiceTimeEstimate {
    /// No samples yet: the estimate is zero (no request is dropped as unable to finish).
    pub const fn new() -> Self {
        ServiceTimeEstimate {
            nanos: AtomicU64::new(0),
        }
    }

    /// The current estimate.
    pub fn get(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::Relaxed))
    }

    /// Folds one service time into the average (the first sample is taken as is).
    pub fn record(&self, service: Duration) {
        let x = saturating_nanos(service);
        // fetch_update retries on a concurrent update; the closure never fails.
        let _ = self
            .nanos
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                Some(if old == 0 {
                    x.max(1)
                } else {
                    // old + (x - old)/8 in i128 so neither direction overflows.
                    let next = i128::from(old) + (i128::from(x) - i128::from(old)) / 8;
                    u64::try_from(next.max(1)).unwrap_or(u64::MAX)
                })
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converges_with_gain_one_eighth() {
        let e = ServiceTimeEstimate::new();
        assert_eq!(e.get(), Duration::ZERO);
        e.record(Duration::from_millis(80));
        assert_eq!(e.get(), Duration::from_millis(80));
        e.record(Duration::from_millis(160));
        assert_eq!(e.get(), Duration::from_millis(90));
        for _ in 0..200 {
            e.record(Duration::from_millis(10));
        }
        assert!(e.get() < Duration::from_micros(10_100), "{:?}", e.get());
        e.record(Duration::MAX);
        assert!(e.get() > Duration::from_secs(1));
    }
}
