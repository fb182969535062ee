//! The ceiling's memory of a cap: a confirmed cap is probed above by an eighth a step, each
//! step once the last has its answers, a failed probe backs off, a cap seen once is not
//! remembered, and the memory ends at twice the cap, when the upstream is re-measured, or when
//! the fall is refuted.

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

/// `n` answers, 50 ms each, from requests admitted at `level` in flight.
fn answers(c: &mut ThroughputCeiling, now_ns: u64, level: usize, n: usize) {
    for _ in 0..n {
        c.record(now_ns, level, 50 * MS);
    }
}

#[test]
fn a_confirmed_cap_is_probed_above_by_an_eighth_a_step() {
    let (mut c, now) = capped(CONFIRMED);
    // The evidence has aged out: no fall is seen, yet the limit may not leap.
    assert_eq!(c.ceiling(20, 20, false), Some(22));
    answers(&mut c, now, 21, MIN_SAMPLES as usize);
    assert_eq!(c.ceiling(22, 22, false), Some(24));
    answers(&mut c, now, 23, MIN_SAMPLES as usize);
    assert_eq!(c.ceiling(24, 24, true), Some(27));
}

#[test]
fn each_step_waits_for_answers_from_above_the_last_steps_peak() {
    let (mut c, now) = capped(CONFIRMED);
    assert_eq!(c.ceiling(20, 20, false), Some(22));
    // Answers at the level the step was taken from do not judge the one it opened.
    answers(&mut c, now, 20, 3 * MIN_SAMPLES as usize);
    answers(&mut c, now, 21, MIN_SAMPLES as usize - 1);
    assert_eq!(c.ceiling(22, 22, false), Some(22));
    assert_eq!(c.ceiling(22, 22, false), Some(22));
    answers(&mut c, now, 22, 1);
    assert_eq!(c.ceiling(22, 22, false), Some(24));
}

#[test]
fn after_a_cut_below_the_step_the_peak_since_judges_it() {
    let (mut c, now) = capped(CONFIRMED);
    assert_eq!(c.ceiling(20, 20, false), Some(22));
    // The gradient cut below the step: the bound is the cap, never undone at once, and in
    // flight no longer reaches the level the step opened (21) — answers from the peak since
    // judge it, or the probe would wait for ever.
    assert_eq!(c.ceiling(18, 17, false), Some(20));
    answers(&mut c, now, 17, MIN_SAMPLES as usize - 1);
    assert_eq!(c.ceiling(20, 17, false), Some(20));
    answers(&mut c, now, 17, 1);
    assert_eq!(c.ceiling(20, 17, false), Some(22));
}

#[test]
fn a_probe_that_finds_the_fall_again_waits_twice_as_long_for_its_next_step() {
    let (mut c, now) = capped(CONFIRMED);
    assert_eq!(c.ceiling(20, 20, false), Some(22));
    thrashing(&mut c, now);
    for _ in 0..CONFIRMED {
        assert_eq!(c.ceiling(22, 22, false), Some(20));
    }
    let now = age_out(&mut c, now);
    // Re-confirmed: no step at once this time; twice [`MIN_SAMPLES`] answers first.
    assert_eq!(c.ceiling(20, 20, false), Some(20));
    answers(&mut c, now, 20, 2 * MIN_SAMPLES as usize - 9);
    assert_eq!(c.ceiling(20, 20, false), Some(20));
    answers(&mut c, now, 20, 1);
    assert_eq!(c.ceiling(20, 20, false), Some(22));
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

#[test]
fn during_a_probe_a_fall_caps_in_a_window_not_read_as_queued() {
    let (mut c, now) = capped(CONFIRMED);
    assert_eq!(c.ceiling(20, 20, false), Some(22));
    thrashing(&mut c, now);
    assert_eq!(c.ceiling(22, 22, false), Some(20));
    // Without a remembered cap the same window is left to the gradient.
    let mut fresh = ThroughputCeiling::new();
    thrashing(&mut fresh, now);
    assert_eq!(fresh.ceiling(40, 40, false), None);
}

#[test]
fn a_fall_refuted_at_its_own_level_forgets_the_cap() {
    let (mut c, now) = capped(CONFIRMED);
    // The level that fell (40) delivers as much as the cap's level again: 20 in flight now
    // answer in 100 ms, 40 in 200 ms (200/s each) — the upstream got slower, not thrashed.
    for _ in 0..MIN_SAMPLES as usize {
        c.record(now, 20, 100 * MS);
        c.record(now, 40, 200 * MS);
    }
    assert_eq!(c.ceiling(20, 20, false), None);
    // And stays gone: a remembered cap would bound a limit of 25 (evidence that only faded is
    // probed, the first test).
    assert_eq!(c.ceiling(25, 25, false), None);
}

/// A 4-worker upstream's evidence: 4 in flight answer in `fast_ms`, 8 in `slow_ms`.
fn small(c: &mut ThroughputCeiling, fast_ms: u64, slow_ms: u64) {
    for _ in 0..MIN_SAMPLES as usize {
        c.record(0, 4, fast_ms * MS);
        c.record(0, 8, slow_ms * MS);
    }
}

#[test]
fn a_small_upstream_that_thrashes_past_its_workers_is_capped_at_them() {
    // 400/s at 4 in flight, 200/s at 8: past its workers it delivers half.
    let mut c = ThroughputCeiling::new();
    small(&mut c, 10, 40);
    assert_eq!(c.ceiling(8, 8, true), Some(4));
}

#[test]
fn below_ten_in_flight_a_fall_a_long_request_explains_is_not_thrashing() {
    // 400/s at 4 in flight, 300/s at 8: a long request holding one worker of four takes as
    // much, and moves level and latency together (`CONFOUNDED_BELOW`).
    let mut c = ThroughputCeiling::new();
    small(&mut c, 10, 27);
    assert_eq!(c.ceiling(8, 8, true), None);
    // The same fall at 20 and 40 in flight is thrashing.
    let mut c = ThroughputCeiling::new();
    for _ in 0..MIN_SAMPLES as usize {
        c.record(0, 20, 50 * MS);
        c.record(0, 40, 135 * MS);
    }
    assert_eq!(c.ceiling(40, 40, true), Some(20));
}
