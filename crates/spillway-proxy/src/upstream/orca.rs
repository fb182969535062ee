//! The tasks' ORCA reports (`endpoint-load-metrics`) as one load signal: the mean utilisation
//! of the tasks with a fresh report, recomputed at most once per [`REFRESH`].
//!
//! Why cached: the admission controller reads every signal on every decision, and the mean is
//! a pass over all the tasks — for a gateway in front of a thousand tasks, a thousand loads per
//! request, where the reports themselves are good for `signals.orca_max_age_ms` (one second
//! by default). Read at most a millisecond late, the mean costs a clock comparison per request
//! whatever the pool's size (`cargo bench -p spillway-proxy --bench gateway`, BENCHMARKS.md).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Weak;
use std::time::{Duration, Instant};

use spillway_core::clock::{nanos_since, saturating_nanos};
use spillway_core::signal::LoadSignal;

use super::Pool;

/// The longest a report waits to enter the mean (less when `orca_max_age_ms` is under 8 ms:
/// an eighth of it).
pub const REFRESH: Duration = Duration::from_millis(1);

/// The least time between two reports of one task that are read: an eighth of the mean's
/// refresh period (so 125 µs at most).
///
/// Why not every report: a task reports on every response, and reading one (the text parsed,
/// three numbers) was ~800 instructions of a forwarded request's ~23,000 (callgrind,
/// bench/results/proxy-forwarding.md "Eighteenth round"), while the mean reads each task's
/// last report at most once per refresh period: at 30,000 answers a second from one task, 29
/// reports in 30 were overwritten before the mean read one. Taking one per eighth of the period
/// delays what the mean sees by at most that eighth.
pub fn read_every(max_age: Duration) -> Duration {
    REFRESH.min(max_age / 8) / 8
}

/// The signal; built by [`Pool::orca_signal`](super::Pool::orca_signal).
#[derive(Debug)]
pub(super) struct OrcaSignal {
    pool: Weak<Pool>,
    origin: Instant,
    refresh_ns: u64,
    /// When the mean was last computed, in ns since `origin` (`u64::MAX`: never).
    at_ns: AtomicU64,
    /// The mean, as `f64` bits.
    mean: AtomicU64,
}

impl OrcaSignal {
    pub(super) fn new(pool: Weak<Pool>, origin: Instant, max_age: Duration) -> Self {
        OrcaSignal {
            pool,
            origin,
            refresh_ns: saturating_nanos(REFRESH.min(max_age / 8)),
            at_ns: AtomicU64::new(u64::MAX),
            mean: AtomicU64::new(0f64.to_bits()),
        }
    }
}

impl LoadSignal for OrcaSignal {
    fn name(&self) -> &str {
        "upstream_orca"
    }

    fn utilisation(&self, now: Instant) -> f64 {
        let now_ns = nanos_since(self.origin, now);
        let at = self.at_ns.load(Relaxed);
        let cached = f64::from_bits(self.mean.load(Relaxed));
        // (A reader whose clock is behind the last computation's sees it as fresh.)
        if at != u64::MAX && now_ns.saturating_sub(at) < self.refresh_ns {
            return cached;
        }
        // One reader recomputes; the others keep the last mean meanwhile.
        if self
            .at_ns
            .compare_exchange(at, now_ns, Relaxed, Relaxed)
            .is_err()
        {
            return cached;
        }
        let mean = self.pool.upgrade().map_or(0.0, |p| p.orca_mean(now));
        self.mean.store(mean.to_bits(), Relaxed);
        mean
    }
}
