//! The backend's utilisation as an ORCA load report would measure it: busy worker-time over the
//! last second or two, not the instantaneous count.
//!
//! Why: an instantaneous "busy workers / c" read at a response is at least `1/c` and flips
//! between a few values, so a proxy shedding on it (SRE book ch. 21, "utilization signals")
//! sheds at half load; CPU utilisation, the chapter's default signal, is likewise a rate over
//! an interval. Workers sitting out a capacity drop count as busy: that capacity is not
//! available, and the report should say the backend is full.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Window length: the report covers the previous window and the current one (1–2 s).
const WINDOW: Duration = Duration::from_secs(1);

#[derive(Debug)]
struct State {
    busy: usize,
    last: Instant,
    current_start: Instant,
    current: f64,
    previous: f64,
    previous_len: f64,
}

/// Integrates the number of busy workers over time.
#[derive(Debug)]
pub(crate) struct Utilisation {
    workers: usize,
    state: Mutex<State>,
}

impl State {
    fn advance(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.current += self.busy as f64 * dt;
        self.last = now;
        let age = now.saturating_duration_since(self.current_start);
        if age >= WINDOW {
            self.previous = self.current;
            self.previous_len = age.as_secs_f64();
            self.current = 0.0;
            self.current_start = now;
        }
    }
}

impl Utilisation {
    pub(crate) fn new(workers: usize, now: Instant) -> Self {
        Utilisation {
            workers: workers.max(1),
            state: Mutex::new(State {
                busy: 0,
                last: now,
                current_start: now,
                current: 0.0,
                previous: 0.0,
                previous_len: 0.0,
            }),
        }
    }

    /// One more (`true`) or one fewer (`false`) worker busy from `now`.
    pub(crate) fn change(&self, now: Instant, busier: bool) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.advance(now);
        s.busy = if busier {
            s.busy + 1
        } else {
            s.busy.saturating_sub(1)
        };
    }

    /// Busy worker-seconds / (workers × seconds) over the last one to two seconds, in `[0, 1]`.
    pub(crate) fn value(&self, now: Instant) -> f64 {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.advance(now);
        let len = s.previous_len + now.saturating_duration_since(s.current_start).as_secs_f64();
        if len <= 0.0 {
            return (s.busy as f64 / self.workers as f64).min(1.0);
        }
        ((s.previous + s.current) / (self.workers as f64 * len)).clamp(0.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_busy_reads_half() {
        let t0 = Instant::now();
        let u = Utilisation::new(2, t0);
        // One of two workers busy for the whole time.
        u.change(t0, true);
        let v = u.value(t0 + Duration::from_millis(1500));
        assert!((v - 0.5).abs() < 1e-9, "{v}");
        // Both busy from 1.5 s to 3 s: the last window(s) read fuller.
        u.change(t0 + Duration::from_millis(1500), true);
        let v = u.value(t0 + Duration::from_millis(3000));
        assert!(v > 0.7 && v <= 1.0, "{v}");
        // Idle for 3 s: the report decays to 0.
        u.change(t0 + Duration::from_millis(3000), false);
        u.change(t0 + Duration::from_millis(3000), false);
        u.value(t0 + Duration::from_millis(4500));
        let v = u.value(t0 + Duration::from_millis(6000));
        assert!(v < 1e-9, "{v}");
        // Never above 1 or below 0, even with more changes than workers.
        for _ in 0..5 {
            u.change(t0 + Duration::from_millis(6000), true);
        }
        assert_eq!(u.value(t0 + Duration::from_millis(8000)), 1.0);
    }
}
