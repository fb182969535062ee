//! The ceiling's memory of a cap: a confirmed cap is probed above by an eighth a window, a cap
//! seen once is not remembered, and the memory ends at twice the cap or when the upstream is
//! re-measured.

use super::*;

const MS: u64 = 1_000_000;

/// A thrashing upstream's evidence at `now_ns`: 20 in flight answer in 50 ms (400/s), 40 in
/// 200 ms (200/s), [`MIN_SAMPLES`] of each.
fn thrashing(c: &mut ThroughputCeiling, now_ns: u64) {
    for _ in 0..MIN_SAMPLES as usize {
        c.record(now_ns, 20, 50 * MS);
        c.record(now_ns, 40, 200 * MS);
    }
}

/// Lets every pool age below [`MIN_SAMPLES`]: a request at a level too low to judge, once per
/// half-life, each halving the groups.
fn age_out(c: &mut ThroughputCeiling, mut now_ns: u64) -> u64 {
    for _ in 0..8 {
        now_ns += HALF_LIFE_NS;
        c.record(now_ns, 1, 50 * MS);
    }
    now_ns
}

/// A ceiling that capped `windows` windows in a row at 20.
fn capped(windows: u32) -> (ThroughputCeiling, u64) {
    let mut c = ThroughputCeiling::new();
    thrashing(&mut c, 0);
    for _ in 0..windows {
        assert_eq!(c.ceiling(40, 40, true), Some(20));
    }
    let now = age_out(&mut c, 0);
    (c, now)
}

#[test]
fn a_confirmed_cap_is_probed_above_by_an_eighth_a_window() {
    let (mut c, _) = capped(CONFIRMED);
    // The evidence has aged out: no fall is seen, yet the limit may not leap.
    assert_eq!(c.ceiling(20, 20, false), Some(22));
    assert_eq!(c.ceiling(22, 22, false), Some(24));
    assert_eq!(c.ceiling(24, 24, true), Some(27));
    // Below the cap the bound is the cap's own next step: a cut is never undone at once.
    assert_eq!(c.ceiling(10, 10, false), Some(22));
}

#[test]
fn a_cap_seen_fewer_windows_than_confirmed_is_forgotten_with_its_evidence() {
    let (mut c, _) = capped(CONFIRMED - 1);
    assert_eq!(c.ceiling(20, 20, false), None);
}

#[test]
fn the_cap_is_forgotten_at_twice_its_level() {
    let (mut c, _) = capped(CONFIRMED);
    assert_eq!(c.ceiling(39, 39, false), Some(43));
    assert_eq!(c.ceiling(40, 40, false), None);
    // And stays forgotten.
    assert_eq!(c.ceiling(20, 20, false), None);
}

#[test]
fn a_remeasured_upstream_is_not_probed_gently() {
    let (mut c, _) = capped(CONFIRMED);
    c.forget();
    assert_eq!(c.ceiling(20, 20, false), None);
}

#[test]
fn a_fall_seen_again_caps_again() {
    let (mut c, now) = capped(CONFIRMED);
    assert_eq!(c.ceiling(20, 20, false), Some(22));
    thrashing(&mut c, now);
    assert_eq!(c.ceiling(22, 22, true), Some(20));
}
