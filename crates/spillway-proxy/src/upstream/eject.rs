//! Passive outlier ejection: a task that keeps failing is taken out of rotation for a while.
//!
//! Why: a task that answers every request with a fast 503 or a connection reset would look
//! *less* loaded than its healthy peers to least-loaded balancing (it finishes requests
//! quickly) and attract more traffic. Counting refusals and failures as errors and ejecting
//! after N in a row (Envoy outlier detection, `consecutive_5xx`, default 5; ejection time
//! doubles with each repeat, capped; at most a fraction of the fleet ejected so that a
//! fleet-wide problem does not eject everyone) keeps traffic on tasks that can serve it.

use std::time::{Duration, Instant};

use crate::config::EjectionConfig;

/// One task's ejection state (behind the task's mutex; touched once per response).
#[derive(Debug, Default, Clone)]
pub struct Ejection {
    consecutive: u32,
    until: Option<Instant>,
    times: u32,
}

impl Ejection {
    /// Whether the task is out of rotation at `now`.
    pub fn is_ejected(&self, now: Instant) -> bool {
        self.until.is_some_and(|u| now < u)
    }

    /// Consecutive failures so far.
    pub fn consecutive(&self) -> u32 {
        self.consecutive
    }

    /// Times ejected since start.
    pub fn times(&self) -> u32 {
        self.times
    }

    /// Remaining ejection at `now`.
    pub fn remaining(&self, now: Instant) -> Option<Duration> {
        self.until
            .filter(|&u| now < u)
            .map(|u| u.saturating_duration_since(now))
    }

    /// A success resets the run of failures.
    pub fn success(&mut self) {
        self.consecutive = 0;
    }

    /// Records a failure; returns true if it ejects the task now. `may_eject` says false when
    /// ejecting would exceed the configured fraction of the fleet; it is asked only when the
    /// failure would eject (it counts the fleet's ejected tasks, and most failures — every
    /// overload refusal counts as one — do not reach the threshold).
    pub fn failure(
        &mut self,
        now: Instant,
        cfg: &EjectionConfig,
        may_eject: impl FnOnce() -> bool,
    ) -> bool {
        self.consecutive = self.consecutive.saturating_add(1);
        if cfg.consecutive_failures == 0
            || self.consecutive < cfg.consecutive_failures
            || self.is_ejected(now)
            || !may_eject()
        {
            return false;
        }
        let factor = 1u64 << self.times.min(16);
        let ms = cfg.base_ms.saturating_mul(factor).min(cfg.max_ms);
        self.until = Some(now + Duration::from_millis(ms));
        self.times = self.times.saturating_add(1);
        self.consecutive = 0;
        true
    }

    /// Ends an ejection early (an active health check passed).
    pub fn readmit(&mut self) {
        self.until = None;
        self.consecutive = 0;
    }
}

/// How many of `tasks` may be ejected at once: `floor(tasks × fraction)`, but at least one
/// when there are two or more tasks and the fraction is positive (never the last task).
pub fn max_ejected(tasks: usize, fraction: f64) -> usize {
    if tasks < 2 || fraction <= 0.0 {
        return 0;
    }
    ((tasks as f64 * fraction).floor() as usize).clamp(1, tasks - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ejects_after_n_and_backs_off() {
        let cfg = EjectionConfig {
            consecutive_failures: 3,
            base_ms: 100,
            max_ms: 250,
            max_fraction: 0.5,
        };
        let t0 = Instant::now();
        let mut e = Ejection::default();
        assert!(!e.failure(t0, &cfg, || true));
        assert!(!e.failure(t0, &cfg, || true));
        assert!(e.failure(t0, &cfg, || true));
        assert!(e.is_ejected(t0 + Duration::from_millis(99)));
        assert!(!e.is_ejected(t0 + Duration::from_millis(100)));
        let t1 = t0 + Duration::from_millis(200);
        for _ in 0..2 {
            assert!(!e.failure(t1, &cfg, || true));
        }
        assert!(e.failure(t1, &cfg, || true));
        assert_eq!(e.remaining(t1), Some(Duration::from_millis(200)));
        let t2 = t1 + Duration::from_secs(1);
        for _ in 0..2 {
            e.failure(t2, &cfg, || true);
        }
        assert!(e.failure(t2, &cfg, || true));
        assert_eq!(e.remaining(t2), Some(Duration::from_millis(250)), "capped");
    }

    #[test]
    fn success_resets_and_cap_blocks() {
        let cfg = EjectionConfig {
            consecutive_failures: 2,
            ..EjectionConfig::default()
        };
        let t = Instant::now();
        let mut e = Ejection::default();
        e.failure(t, &cfg, || true);
        e.success();
        // The fleet is counted only for a failure that would eject.
        assert!(!e.failure(t, &cfg, || unreachable!("asked below the threshold")));
        assert!(!e.failure(t, &cfg, || false), "fleet cap reached");
        assert!(!e.is_ejected(t));
        assert_eq!(max_ejected(1, 0.5), 0);
        assert_eq!(max_ejected(2, 0.5), 1);
        assert_eq!(max_ejected(3, 0.1), 1);
        assert_eq!(max_ejected(10, 0.5), 5);
        assert_eq!(max_ejected(4, 1.0), 3);
    }
}
