//! The zero-config policy (`preset.rs`) on services it was never tuned for: deterministic runs
//! with the manual clock, no timing involved.

use std::collections::VecDeque;

use super::*;

/// A service with `workers` workers and a constant `service` time (never more than `workers`
/// in flight in these runs, so latency stays at minRTT), offered `per_ms` requests each
/// millisecond for `ms` milliseconds, SHEDDABLE each `sheddable_every`-th, the rest CRITICAL.
/// Returns how many were not admitted at once in the second half, and the final limit.
fn steady(per_ms: usize, sheddable_every: usize, service_ms: u64, ms: u64) -> (usize, usize) {
    let (ctl, clock) = controller(AdmissionConfig::zero_config());
    let mut running: VecDeque<(u64, Permit)> = VecDeque::new();
    let mut not_at_once = 0;
    let mut n = 0usize;
    for t in 0..ms {
        while running.front().is_some_and(|(end, _)| *end <= t) {
            let (_, mut p) = running.pop_front().expect("front exists");
            p.set_outcome(Outcome::Success);
        }
        for _ in 0..per_ms {
            n += 1;
            let c = if n % sheddable_every == 0 {
                Sheddable
            } else {
                Critical
            };
            match ctl.admit(&req(c)) {
                Admission::Admitted(p) => running.push_back((t + service_ms, p)),
                _ => {
                    if t >= ms / 2 {
                        not_at_once += 1;
                    }
                }
            }
        }
        clock.advance(MS);
    }
    (not_at_once, ctl.snapshot().limit)
}

#[test]
fn a_thousand_worker_service_at_0_9_of_capacity_is_not_held_back() {
    // 1000 workers × 10 ms at 0.9 of capacity (90 per ms: 900 in flight), a third SHEDDABLE.
    // SHEDDABLE may use 0.8 of the limit, so it needs a limit of at least 1125; Envoy's ceiling
    // of 1000 held it to 800 in flight and refused about a third of it for good (issue 28's
    // sweep: -11 to -15 pp at 1000 workers, 0.9 ×, whatever the service time).
    let (not_at_once, limit) = steady(90, 3, 10, 3000);
    assert!(limit >= 1125, "limit {limit}");
    assert_eq!(not_at_once, 0, "limit {limit}");
}
