//! The floor: read from the levels a FIFO upstream ran at, bounded by Little's law, never for a
//! level too low to judge or a window whose callers are giving up, and scaled by the share of
//! the limit the window used.

use super::super::thrash::ThroughputCeiling;
use super::*;

const MS: u64 = 1_000_000;

/// `workers` FIFO workers answering in `service_ms` (constant): a request admitted with
/// `level` in flight waits for `level - workers` of them to finish first.
fn fifo_latency_ns(level: usize, workers: usize, service_ms: u64) -> u64 {
    let ahead = level.saturating_sub(workers) as u64;
    service_ms * MS + ahead * service_ms * MS / workers as u64
}

/// Levels recorded at every in-flight count from 1 to `top`, 200 requests each.
fn levels(workers: usize, service_ms: u64, top: usize) -> ThroughputCeiling {
    let mut c = ThroughputCeiling::new();
    for level in 1..=top {
        for _ in 0..200 {
            c.record(0, level, fifo_latency_ns(level, workers, service_ms));
        }
    }
    c
}

#[test]
fn a_fifo_upstream_ran_unqueued_up_to_about_its_workers() {
    let u = levels(20, 50, 40).unqueued().expect("pools hold enough");
    // Pools span a few levels; past 20 each level waits another 2.5 ms (5 % of 50 ms), so the
    // last pool within a tenth of 50 ms sits at 21-22.
    assert!((19.0..=23.0).contains(&u.level), "{u:?}");
    assert!(
        (50.0 * MS as f64..52.0 * MS as f64).contains(&u.base_ns),
        "{u:?}"
    );
    // 20 workers × 1 / 50 ms: 400/s, per ns.
    let per_s = u.best_rate * 1e9;
    assert!((380.0..=420.0).contains(&per_s), "{per_s}");
    // Limit-only traffic (peak = limit): the floor is the level.
    let f = floor(Some(u), 30, 30, 100, 0, 1000);
    assert!((19..=23).contains(&f), "{f}");
}

#[test]
fn no_pool_no_floor() {
    assert_eq!(ThroughputCeiling::new().unqueued(), None);
    assert_eq!(floor(None, 30, 30, 100, 0, 1000), 0);
}

fn evidence(level: f64) -> Unqueued {
    Unqueued {
        level,
        base_ns: 50.0 * MS as f64,
        // 400/s.
        best_rate: 400.0 / 1e9,
    }
}

#[test]
fn the_floor_is_never_growth() {
    // A cut from 15: the floor is at most 15, whatever the levels say.
    assert_eq!(floor(Some(evidence(20.0)), 15, 15, 100, 0, 1000), 15);
    assert_eq!(floor(Some(evidence(20.0)), 30, 30, 100, 0, 18), 18);
}

#[test]
fn little_law_bounds_a_level_read_from_mixed_pools() {
    // Levels claiming 40 ran unqueued at 50 ms, while the best pool delivered 400/s: by
    // Little's law at most 400/s × 50 ms × 1.1 = 22 are ever running.
    assert_eq!(floor(Some(evidence(40.0)), 60, 60, 100, 0, 1000), 22);
}

#[test]
fn levels_below_ten_hold_nothing() {
    assert_eq!(floor(Some(evidence(9.9)), 30, 30, 100, 0, 1000), 0);
    assert_eq!(floor(Some(evidence(10.0)), 30, 30, 100, 0, 1000), 10);
}

#[test]
fn a_window_with_a_tenth_dropped_holds_nothing() {
    assert_eq!(floor(Some(evidence(20.0)), 30, 30, 90, 10, 1000), 0);
    assert_eq!(floor(Some(evidence(20.0)), 30, 30, 91, 9, 1000), 20);
}

#[test]
fn the_level_is_scaled_by_the_share_of_the_limit_the_window_used() {
    // SHEDDABLE alone fills 0.8 of the limit: 24 in flight at 30; reaching 20 takes 25.
    assert_eq!(floor(Some(evidence(20.0)), 30, 24, 100, 0, 1000), 25);
    // Never by more than twice (a window that used little of its limit says little).
    assert_eq!(floor(Some(evidence(20.0)), 60, 5, 100, 0, 1000), 40);
}

#[test]
fn a_queued_level_ends_the_run_even_if_a_higher_one_looks_fast() {
    let mut c = levels(20, 50, 30);
    // 40 in flight answering in 50 ms (say, a burst of cache hits) is past a queued run: not
    // evidence that 40 runs unqueued.
    for _ in 0..200 {
        c.record(0, 40, 50 * MS);
    }
    let u = c.unqueued().expect("pools hold enough");
    assert!(u.level < 30.0, "{u:?}");
}

#[test]
fn the_levels_fade_as_the_ceilings_do() {
    let mut c = levels(20, 50, 40);
    // Every half-life halves the groups; after eight, a request at level 1 is all that counts.
    let mut now = 0;
    for _ in 0..8 {
        now += 2_000_000_000;
        c.record(now, 1, 50 * MS);
    }
    assert_eq!(c.unqueued(), None);
}
