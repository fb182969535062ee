//! Host CPU utilisation from `/proc/stat`, sampled in the background, as a load signal.
//!
//! Why host and not only this process: a sidecar shares its host (or pod) with the service it
//! protects, and the service's CPU is what saturates; the proxy's own CPU (`process_cpu`) is a
//! small part of it. Why sampled: the controller reads its signals on every admission, and a
//! file read per request would cost more than the decision; a reading every 250 ms is plenty
//! for a signal that drives shedding thresholds.

use std::sync::{Arc, Weak};
use std::time::Duration;

use spillway_core::signal::ManualSignal;

/// How often `/proc/stat` is read.
pub const PERIOD: Duration = Duration::from_millis(250);

/// `(busy, total)` jiffies from the aggregate `cpu` line of `/proc/stat`: busy is everything
/// but `idle` and `iowait` (proc(5): user nice system idle iowait irq softirq steal …; guest
/// time is already included in user/nice).
pub fn parse_proc_stat(s: &str) -> Option<(u64, u64)> {
    let line = s.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    if v.len() < 4 {
        return None;
    }
    let total: u64 = v.iter().try_fold(0u64, |a, &x| a.checked_add(x))?;
    let idle = v[3].saturating_add(v.get(4).copied().unwrap_or(0));
    Some((total.saturating_sub(idle), total))
}

/// Utilisation between two readings (0 when no time passed).
pub fn utilisation(before: (u64, u64), after: (u64, u64)) -> f64 {
    let busy = after.0.saturating_sub(before.0) as f64;
    let total = after.1.saturating_sub(before.1) as f64;
    if total > 0.0 {
        (busy / total).clamp(0.0, 1.0)
    } else {
        0.0
    }
}

/// A `host_cpu` signal kept up to date by a background task; `None` without a readable
/// `/proc/stat`. Outside a tokio runtime (e.g. `--check`) the signal is returned but not
/// sampled. The task stops when the signal is dropped.
pub fn start() -> Option<Arc<ManualSignal>> {
    let first = parse_proc_stat(&std::fs::read_to_string("/proc/stat").ok()?)?;
    let signal = Arc::new(ManualSignal::new("host_cpu"));
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return Some(signal);
    };
    let weak: Weak<ManualSignal> = Arc::downgrade(&signal);
    handle.spawn(async move {
        let mut last = first;
        loop {
            tokio::time::sleep(PERIOD).await;
            let Some(s) = weak.upgrade() else { return };
            let Some(now) = std::fs::read_to_string("/proc/stat")
                .ok()
                .and_then(|t| parse_proc_stat(&t))
            else {
                continue;
            };
            s.set(utilisation(last, now));
            last = now;
        }
    });
    Some(signal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_aggregate_line() {
        let s = "cpu  100 5 50 800 40 3 2 0 0 0\ncpu0 50 2 25 400 20 1 1 0 0 0\nintr 1\n";
        assert_eq!(parse_proc_stat(s), Some((160, 1000)));
        assert_eq!(parse_proc_stat("cpu0 1 2 3 4\n"), None);
        assert_eq!(parse_proc_stat("cpu  x y z\n"), None);
        assert_eq!(utilisation((160, 1000), (460, 1400)), 0.75);
        assert_eq!(utilisation((160, 1000), (160, 1000)), 0.0);
    }
}
