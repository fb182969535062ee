//! The flat-levels test: latency that does not rise with the level is flat; a queue's rise,
//! too few samples, too narrow a span or too many dropped requests are not.

use super::*;

const MS: u64 = 1_000_000;
/// The samples kept (the level fit's ring).
const KEPT: usize = 64;

/// `n` samples cycling over levels `lo..=hi`, latency `rtt(level, i)`, all completed at 0.
fn fed(lo: usize, hi: usize, n: usize, rtt: impl Fn(usize, usize) -> u64) -> WindowLevels {
    let mut w = WindowLevels::default();
    for i in 0..n {
        let level = lo + i % (hi - lo + 1);
        w.count(0, false);
        w.record(level, rtt(level, i));
    }
    w
}

/// A service time that varies with `i` but not with the level: 40–60 ms.
fn noisy(i: usize) -> u64 {
    (40 + (i * 7919) % 21) as u64 * MS
}

#[test]
fn a_slower_upstream_is_flat_across_levels() {
    let mut w = fed(6, 18, MIN_POINTS, |_, i| 2 * noisy(i));
    assert!(w.flat());
}

#[test]
fn a_queue_of_ours_rises_with_the_level() {
    // A 4-worker upstream: a request admitted at level k waits for k − 4 ahead of it.
    let mut w = fed(6, 18, KEPT, |k, i| noisy(i) * (k as u64).max(4) / 4);
    assert!(!w.flat());
}

#[test]
fn too_few_samples_or_too_narrow_a_span_say_nothing() {
    assert!(!fed(6, 18, MIN_POINTS - 1, |_, i| noisy(i)).flat());
    assert!(!fed(10, 19, KEPT, |_, i| noisy(i)).flat());
}

#[test]
fn many_dropped_requests_turn_it_off() {
    let mut w = fed(6, 18, MIN_POINTS, |_, i| 2 * noisy(i));
    // One in five dropped: the upstream may still run their work.
    for _ in 0..MIN_POINTS / 4 {
        w.dropped(0);
    }
    assert!(!w.flat());
    // Two periods later those drops are forgotten.
    let mut later = fed(6, 18, MIN_POINTS, |_, i| 2 * noisy(i));
    later.count(0, true);
    later.count(2 * PERIOD_NS + 1, false);
    assert!(later.flat());
}

#[test]
fn clear_forgets_the_samples() {
    let mut w = fed(6, 18, MIN_POINTS, |_, i| 2 * noisy(i));
    w.clear();
    assert!(!w.flat());
}

/// `n` calm windows of 50 ms at levels up to `peak`, one every 100 ms from 0.
fn calm(n: u32, peak: usize) -> WindowLevels {
    let mut w = WindowLevels::default();
    for k in 0..n {
        w.count(u64::from(k) * 100 * MS, false);
        w.calm_window(u64::from(k) * 100 * MS, (50 * MS) as f64, peak);
    }
    w
}

#[test]
fn a_step_at_calm_levels_is_the_upstreams() {
    let w = calm(5, 18);
    // Twice the calm latency at no higher a level: a queue of ours cannot have made it.
    assert!(w.stepped(500 * MS, (100 * MS) as f64, 18, 1.5));
    // Within the buffer of the calm latency, it is not a step.
    assert!(!w.stepped(500 * MS, (70 * MS) as f64, 18, 1.5));
}

#[test]
fn a_step_at_higher_levels_may_be_our_queue() {
    let w = calm(5, 18);
    assert!(!w.stepped(500 * MS, (100 * MS) as f64, 19, 1.5));
}

#[test]
fn a_short_calm_says_nothing() {
    // Two windows: too few.
    assert!(!calm(2, 18).stepped(500 * MS, (100 * MS) as f64, 18, 1.5));
    // Three, but spanning less than four times their latency (200 ms < 4 × 50 ms is not
    // reached until 200 ms after the first).
    assert!(!calm(3, 18).stepped(150 * MS, (100 * MS) as f64, 18, 1.5));
    assert!(calm(3, 18).stepped(200 * MS, (100 * MS) as f64, 18, 1.5));
}

#[test]
fn the_calm_ends_with_a_window_that_was_not() {
    let mut w = calm(5, 18);
    w.end_calm();
    assert!(!w.stepped(500 * MS, (100 * MS) as f64, 18, 1.5));
}

#[test]
fn many_dropped_requests_turn_the_step_off() {
    let mut w = calm(5, 18);
    for _ in 0..5 {
        w.dropped(400 * MS);
    }
    assert!(!w.stepped(500 * MS, (100 * MS) as f64, 18, 1.5));
}

/// `n` windows above tolerance at an unchanged limit, medians cycling 40–60 ms (`noisy`), at
/// levels up to `peak`, one every 100 ms from 0; none of them a step.
fn held(n: u32, peak: usize) -> WindowLevels {
    let mut w = WindowLevels::default();
    let medians: Vec<u64> = (0..n as usize).map(|k| noisy(k) / MS).collect();
    assert!(after(&mut w, 0, &medians, peak).iter().all(|&step| !step));
    w
}

/// Feeds windows of `latency_ms` at level `peak` from `from_ms`, one every 100 ms, each
/// leaving the limit where it was; returns what each `held_step` said.
fn after(w: &mut WindowLevels, from_ms: u64, latencies_ms: &[u64], peak: usize) -> Vec<bool> {
    let mut said = Vec::new();
    for (k, &ms) in latencies_ms.iter().enumerate() {
        let now = (from_ms + 100 * k as u64) * MS;
        w.count(now, false);
        said.push(w.held_step(now, (ms * MS) as f64, peak, 1.5).is_some());
        w.held_window(now, (ms * MS) as f64, peak, true);
    }
    said
}

#[test]
fn a_held_level_that_slows_for_three_windows_is_the_upstream() {
    let mut w = held(10, 28);
    // The run's medians cycle 40–60 ms around 50: three windows past 1.5 × that, at the levels
    // the run held, are a step; the reference comes back with it.
    let mut fourth = held(10, 28);
    assert_eq!(
        after(&mut w, 1_000, &[90, 95, 92], 28),
        [false, false, true]
    );
    assert_eq!(after(&mut fourth, 1_000, &[90, 95], 28), [false, false]);
    let reference = fourth.held_step(1_200 * MS, (92 * MS) as f64, 28, 1.5);
    assert!(reference.is_some_and(|r| (40.0 * MS as f64..=60.0 * MS as f64).contains(&r)));
}

#[test]
fn a_held_level_that_slows_for_a_window_or_two_is_noise() {
    let mut w = held(10, 28);
    // Two past, one back within: the count starts again, and the window back joins the run.
    assert_eq!(
        after(&mut w, 1_000, &[90, 95, 50, 90, 95], 28),
        [false, false, false, false, false]
    );
}

#[test]
fn the_steps_do_not_raise_the_held_latency() {
    // Medians 40, 42, 44 ms: the run's is 42, and 64 ms is past 1.5 × it.
    let mut w = held(3, 28);
    // Step candidates neither join the run nor end it: had the first joined, the run's
    // median would have been 44 ms, and the second not past 1.5 × it (66 ms).
    assert_eq!(after(&mut w, 300, &[64, 64, 64], 28), [false, false, true]);
}

#[test]
fn a_held_step_at_higher_levels_may_be_our_queue() {
    let mut w = held(10, 28);
    assert_eq!(
        after(&mut w, 1_000, &[90, 95, 92], 29),
        [false, false, false]
    );
}

#[test]
fn a_short_held_run_says_nothing() {
    // Two windows: too few.
    let mut w = held(2, 28);
    assert_eq!(after(&mut w, 200, &[90, 95, 92], 28), [false, false, false]);
}

#[test]
fn a_window_that_changed_the_limit_ends_the_held_run() {
    let mut w = held(10, 28);
    w.held_window(1_000 * MS, (50 * MS) as f64, 28, false);
    // A run starts again with the next held window, too short to judge by.
    assert_eq!(
        after(&mut w, 1_100, &[90, 95, 92], 28),
        [false, false, false]
    );
}

#[test]
fn a_request_given_up_on_turns_the_held_step_off() {
    let mut w = held(10, 28);
    // One in 20: few enough for the other two signatures, but its work is still upstream.
    w.dropped(950 * MS);
    assert_eq!(
        after(&mut w, 1_000, &[90, 95, 92], 28),
        [false, false, false]
    );
    // Two periods later it is forgotten.
    let mut later = held(10, 28);
    later.dropped(950 * MS);
    assert_eq!(
        after(&mut later, 3_000, &[90, 95, 92], 28),
        [false, false, true]
    );
}

#[test]
fn growth_is_capped_at_the_held_limit_while_the_raise_stands() {
    let mut w = held(10, 28);
    assert_eq!(w.growth_cap(true), None, "no raise by a held step yet");
    w.end_held(Some(29));
    assert_eq!(w.growth_cap(true), Some(29));
    // Back at the measured minRTT: no cap, and none after.
    assert_eq!(w.growth_cap(false), None);
    assert_eq!(w.growth_cap(true), None);
    // A raise by another signature sets none.
    w.end_held(None);
    assert_eq!(w.growth_cap(true), None);
}
