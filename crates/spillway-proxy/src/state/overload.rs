//! When the proxy last refused a request for its own overload: written by the forwarding path,
//! read by the client connections' idle timers (`crate::progress::pressure` says why a refusal
//! shortens them).
//!
//! Why in the state: one flag for every data-plane thread, owned by the process's state as the
//! other shared counters are, below both the listener that reads it and the path that sets it.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// How long before a connection went idle a refusal for overload still counts for it.
pub const OVERLOAD_RECENT: Duration = Duration::from_secs(1);

/// When the proxy last refused a request for its own overload, shared by the data-plane
/// threads: written at such a refusal (at most once per millisecond: the same line is not
/// written again by every refusal of a burst), read by the connections' timers.
#[derive(Debug)]
pub struct Overloaded {
    base: Instant,
    /// Milliseconds after `base`, plus one, of the last refusal; 0 for never.
    last_ms: AtomicU64,
}

impl Default for Overloaded {
    fn default() -> Self {
        Overloaded {
            base: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }
}

impl Overloaded {
    fn ms(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.base).as_millis()).unwrap_or(u64::MAX - 1)
            + 1
    }

    /// A request was refused for overload at `now`.
    pub fn note(&self, now: Instant) {
        let ms = self.ms(now);
        if self.last_ms.load(Relaxed) < ms {
            self.last_ms.store(ms, Relaxed);
        }
    }

    /// Whether a request was refused for overload since `idle_from` (when a connection went
    /// idle), or within [`OVERLOAD_RECENT`] before it.
    pub fn during(&self, idle_from: Instant) -> bool {
        let last = self.last_ms.load(Relaxed);
        let from = idle_from
            .checked_sub(OVERLOAD_RECENT)
            .map_or(1, |t| self.ms(t));
        last != 0 && last >= from
    }
}
