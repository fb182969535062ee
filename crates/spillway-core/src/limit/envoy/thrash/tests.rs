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

/// `windows` windows in a row that close at `limit` (read as `queued` or not) and are capped
/// at 20, the capped level answering `answered` times after the first.
fn hold(
    c: &mut ThroughputCeiling,
    now_ns: u64,
    limit: usize,
    queued: bool,
    windows: u32,
    answered: usize,
) {
    for w in 0..windows {
        assert_eq!(c.ceiling(limit, limit, queued), Some(20));
        if w == 0 {
            answers(c, now_ns, 20, answered);
        }
    }
}

/// A ceiling that capped `windows` windows in a row at 20, the capped level answering
/// [`MIN_SAMPLES`] times meanwhile.
fn capped(windows: u32) -> (ThroughputCeiling, u64) {
    let mut c = ThroughputCeiling::new();
    thrashing(&mut c, 0);
    hold(&mut c, 0, 40, true, windows, MIN_SAMPLES as usize);
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
    hold(&mut c, now, 22, false, CONFIRMED, MIN_SAMPLES as usize);
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
fn a_cap_is_remembered_only_once_its_level_answered_under_it() {
    // Four windows, but fewer than [`MIN_SAMPLES`] answers since the first: not remembered.
    let mut c = ThroughputCeiling::new();
    thrashing(&mut c, 0);
    hold(&mut c, 0, 40, true, CONFIRMED, MIN_SAMPLES as usize - 1);
    age_out(&mut c, 0);
    assert_eq!(c.ceiling(20, 20, false), None);
}

#[test]
fn a_fall_the_capped_level_no_longer_shows_is_not_remembered() {
    // 20 in flight answered in 50 ms before the upstream got slower, 40 in 200 ms after: a
    // fall, capped for four windows before the capped level answered again. Held there, 20
    // in flight now answer in 100 ms, and the fall is gone: the cap is dropped, not probed
    // (remembered after four windows alone, it bounded the limit at 22).
    let mut c = ThroughputCeiling::new();
    thrashing(&mut c, 0);
    hold(&mut c, 0, 40, true, CONFIRMED, 0);
    for _ in 0..4 * MIN_SAMPLES as usize {
        c.record(0, 20, 100 * MS);
    }
    assert_eq!(c.ceiling(20, 20, false), None);
    age_out(&mut c, 0);
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

/// `answered` answers in `answer_ms` and `gone` requests given up on after `gone_ms`, all
/// admitted at `level` in flight.
fn level_of(c: &mut ThroughputCeiling, level: usize, answered: (usize, u64), gone: (usize, u64)) {
    for _ in 0..answered.0 {
        c.record(0, level, answered.1 * MS);
    }
    for _ in 0..gone.0 {
        c.given_up(0, level, gone.1 * MS);
    }
}

#[test]
fn a_fifo_whose_long_requests_outlive_their_callers_is_not_read_as_thrashing() {
    // 20 workers, 95 % of requests 25.6 ms, 5 % 512 ms given up at 250 ms: at 20 in flight
    // the answered wait for nothing; at 29 they wait 22 ms behind the full workers. Slots
    // turn over at 20 / 36.8 ms and 29 / 57.7 ms (8 % apart: past the knee a FIFO delivers
    // the same); the answered alone read 20 / 25.6 ms and 29 / 47.6 ms, 22 % apart.
    let mut c = ThroughputCeiling::new();
    level_of(&mut c, 20, (190, 26), (10, 250));
    level_of(&mut c, 29, (190, 48), (10, 250));
    assert_eq!(c.ceiling(29, 29, true), None);
}

#[test]
fn requests_given_up_on_deliver_nothing() {
    // 40 in flight answer in 100 ms — as many per second as 20 in 50 ms — but half of them
    // were given up on after 250 ms: the upstream delivers a quarter of what it did at 20.
    let mut c = ThroughputCeiling::new();
    level_of(&mut c, 20, (200, 50), (0, 0));
    level_of(&mut c, 40, (100, 100), (100, 250));
    assert_eq!(c.ceiling(40, 40, true), Some(20));
    // Answered alone, the two levels deliver alike.
    let mut c = ThroughputCeiling::new();
    level_of(&mut c, 20, (200, 50), (0, 0));
    level_of(&mut c, 40, (100, 100), (0, 0));
    assert_eq!(c.ceiling(40, 40, true), None);
}
