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
