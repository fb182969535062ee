//! `flat.rs` through the zero-config limit: an upstream that gets slower at every level
//! raises the baseline instead of having its limit cut; a queue of ours, whose latency rises
//! with the level, is cut as before.

use super::*;

fn zero_config(t0: Instant) -> EnvoyGradientLimit {
    let cfg = zero_config_envoy();
    EnvoyGradientLimit::new(&cfg, t0, Box::new(FixedRandom(0.0))).expect("valid")
}

/// 40–60 ms, varying with `i` but not with the level.
fn noisy(i: u64) -> Duration {
    Duration::from_millis(40 + (i * 7919) % 21)
}

/// A measured minRTT of about 50 ms from answers at one to five in flight, then three seconds
/// of answers at levels 6–18 taking `rtt(level, i)`, one every 5 ms. Returns the limit's
/// lowest value over those seconds.
fn run(l: &mut EnvoyGradientLimit, t0: Instant, rtt: impl Fn(u64, u64) -> Duration) -> usize {
    run_from(l, t0, |_, i| noisy(i), rtt)
}

/// [`run`] with the answers at one to five in flight taking `low(level, i)`.
fn run_from(
    l: &mut EnvoyGradientLimit,
    t0: Instant,
    low: impl Fn(u64, u64) -> Duration,
    rtt: impl Fn(u64, u64) -> Duration,
) -> usize {
    let mut t = 0;
    answers(l, t0, &mut t, (40, 2), |i| 1 + i % 5, low);
    assert!(l.min_rtt_nanos() > 0.0);
    answers(l, t0, &mut t, (600, 5), |i| 6 + i % 13, rtt)
}

/// `count` answers `every` ms apart from `*t` ms on, the `i`th admitted at `level(i)` and
/// taking `rtt(level, i)`. Advances `*t`; returns the limit's lowest value meanwhile.
fn answers(
    l: &mut EnvoyGradientLimit,
    t0: Instant,
    t: &mut u64,
    (count, every): (u64, u64),
    level: impl Fn(u64) -> u64,
    rtt: impl Fn(u64, u64) -> Duration,
) -> usize {
    let mut lowest = usize::MAX;
    for i in 0..count {
        *t += every;
        let k = level(i);
        l.on_sample(&sample(at(t0, *t), rtt(k, i), k as usize, false));
        lowest = lowest.min(l.limit());
    }
    lowest
}

#[test]
fn an_upstream_slower_at_every_level_raises_the_baseline() {
    let t0 = Instant::now();
    let mut l = zero_config(t0);
    let lowest = run(&mut l, t0, |_, i| 2 * noisy(i));
    assert!(l.min_rtt_nanos() >= 90e6, "{}", l.min_rtt_nanos());
    assert!(l.measured_min_rtt_nanos() < 60e6, "measured at about 50 ms");
    // The first windows cut while the rule gathers its 40 samples (from 20 to 16 here); then
    // the limit grows back past the levels in use, where the gradient alone went on cutting.
    assert!(lowest >= 12, "lowest {lowest}");
    assert!(l.limit() >= 18, "final {}", l.limit());
}

#[test]
fn a_queue_of_ours_is_still_cut() {
    let t0 = Instant::now();
    let mut l = zero_config(t0);
    // A 4-worker upstream: a request admitted at level k waits for k − 4 ahead of it.
    let lowest = run(&mut l, t0, |k, i| noisy(i) * (k.max(4) as u32) / 4);
    assert!(l.min_rtt_nanos() < 60e6, "{}", l.min_rtt_nanos());
    assert!(lowest < 12, "lowest {lowest}");
}

#[test]
fn an_upstream_whose_low_levels_queue_is_not_rebaselined() {
    let t0 = Instant::now();
    let mut l = zero_config(t0);
    // A 2-worker upstream: latency rises from the third request in flight on, and the levels
    // above say nothing about what else waits in it.
    run_from(
        &mut l,
        t0,
        |k, i| noisy(i) * (k.max(2) as u32) / 2,
        |_, i| 3 * noisy(i),
    );
    assert!(
        l.min_rtt_nanos() <= l.measured_min_rtt_nanos(),
        "{} > {}",
        l.min_rtt_nanos(),
        l.measured_min_rtt_nanos()
    );
}

#[test]
fn an_upstream_busy_from_its_start_is_rebaselined_on_a_provisional_min_rtt() {
    let t0 = Instant::now();
    let mut l = zero_config(t0);
    // Three answers at one to three in flight, then never fewer than six: the live minRTT
    // stays the provisional one of those three (it completes at 25), and no answer at a low
    // level says whether the low levels queue.
    let mut t = 0;
    for level in 1..=3 {
        t += 2;
        l.on_sample(&sample(at(t0, t), noisy(level), level as usize, false));
    }
    let mut i = 0;
    let mut phase = |l: &mut EnvoyGradientLimit, ms: u64, rtt: &dyn Fn(u64) -> Duration| {
        let mut lowest = usize::MAX;
        for _ in 0..ms / 5 {
            t += 5;
            i += 1;
            let level = 6 + i % 13;
            l.on_sample(&sample(at(t0, t), rtt(i), level as usize, false));
            lowest = lowest.min(l.limit());
        }
        lowest
    };
    // A second at the upstream's own speed, then the slowdown's onset (a queue built while
    // it set in: twice the tolerance, which ends slow start), then the upstream at half speed
    // at every level.
    phase(&mut l, 1000, &noisy);
    phase(&mut l, 150, &|i| noisy(i) * 7 / 2);
    let lowest = phase(&mut l, 3000, &|i| 2 * noisy(i));
    assert!(
        l.measured_min_rtt_nanos() < 60e6,
        "still the provisional minRTT"
    );
    // Doubled: the most one raise moves it.
    assert!(
        l.min_rtt_nanos() >= 1.9 * l.measured_min_rtt_nanos(),
        "baseline {} from {}",
        l.min_rtt_nanos(),
        l.measured_min_rtt_nanos()
    );
    assert!(lowest >= 12, "lowest {lowest}");
    assert!(l.limit() >= 18, "final {}", l.limit());
}

/// A measured minRTT of about 50 ms, two seconds of answers at levels `12..=18` taking
/// 40–60 ms (the limit not the constraint), then a second of answers at `levels` taking
/// `rtt(level, i)`, one every 5 ms. Returns the limit's lowest value over that second.
fn calm_then(
    l: &mut EnvoyGradientLimit,
    t0: Instant,
    levels: std::ops::RangeInclusive<u64>,
    rtt: impl Fn(u64, u64) -> Duration,
) -> usize {
    let mut t = 0;
    answers(l, t0, &mut t, (40, 2), |i| 1 + i % 5, |_, i| noisy(i));
    answers(l, t0, &mut t, (400, 5), |i| 12 + i % 7, |_, i| noisy(i));
    let (lo, n) = (*levels.start(), levels.end() - levels.start() + 1);
    answers(l, t0, &mut t, (200, 5), |i| lo + i % n, rtt)
}

#[test]
fn a_step_at_levels_that_ran_calm_raises_the_baseline_at_once() {
    let t0 = Instant::now();
    let mut l = zero_config(t0);
    // The upstream at half speed at the same levels (12–18: too narrow a span for the rank
    // test), as when it loses half its capacity at half its load.
    let lowest = calm_then(&mut l, t0, 12..=18, |_, i| 2 * noisy(i));
    assert!(l.min_rtt_nanos() >= 90e6, "{}", l.min_rtt_nanos());
    assert!(l.measured_min_rtt_nanos() < 60e6, "measured at about 50 ms");
    // Raised on the first window past tolerance: never cut below what was in use.
    assert!(lowest >= 18, "lowest {lowest}");
}

#[test]
fn a_rise_past_the_calm_levels_is_still_cut() {
    let t0 = Instant::now();
    let mut l = zero_config(t0);
    // Latency past tolerance only at levels above those that ran calm, rising with them: a
    // 12-worker upstream's queue of ours.
    calm_then(&mut l, t0, 24..=36, |k, i| noisy(i) * (k as u32) / 12);
    assert!(l.min_rtt_nanos() < 60e6, "{}", l.min_rtt_nanos());
}

#[test]
fn slow_start_is_never_read_as_a_slower_upstream() {
    let t0 = Instant::now();
    let mut l = zero_config(t0);
    // Three answers at one to three in flight (a provisional minRTT of about 50 ms), then a
    // second of answers at levels 6–18 at 1.7 × that, flat across the levels: within twice the
    // provisional minRTT's tolerance, so slow start goes on, held. At a start that flatness is
    // the ramp's: the level follows the time, and a window sees the latest levels' fast answers
    // only (a 100-worker, 1 ms upstream at 10 × its capacity: raised, then held at 430 in
    // flight, a 3.3 ms queue for callers allowing 5 ms).
    let mut t = 0;
    answers(&mut l, t0, &mut t, (3, 2), |i| 1 + i, |_, i| noisy(i));
    answers(
        &mut l,
        t0,
        &mut t,
        (200, 5),
        |i| 6 + i % 13,
        |_, i| noisy(i) * 17 / 10,
    );
    assert!(
        l.measured_min_rtt_nanos() < 60e6,
        "still the provisional minRTT"
    );
    assert!(
        l.min_rtt_nanos() <= l.measured_min_rtt_nanos(),
        "raised to {} from {}",
        l.min_rtt_nanos(),
        l.measured_min_rtt_nanos()
    );
}

#[test]
fn a_held_level_that_slows_raises_the_baseline() {
    let t0 = Instant::now();
    let mut l = zero_config(t0);
    let mut t = 0;
    answers(&mut l, t0, &mut t, (40, 2), |i| 1 + i % 5, |_, i| noisy(i));
    // Eight seconds at levels 22–28 (a span too narrow for the rank test) taking 1.8 × the
    // measured minRTT at every one: past tolerance, the gradient cuts until the levels' own
    // pools hold the limit (`floor.rs`), as a closed loop's is held at its upstream's workers.
    answers(
        &mut l,
        t0,
        &mut t,
        (1600, 5),
        |i| 22 + i % 7,
        |_, i| noisy(i) * 9 / 5,
    );
    let held = l.limit();
    assert!(
        l.min_rtt_nanos() < 60e6,
        "not raised yet: {}",
        l.min_rtt_nanos()
    );
    // Then twice as slow at the same levels: a queue of ours is the same at the same level, so
    // that is the upstream's. Raised, by as much as the held level slowed (at most twice).
    let lowest = answers(
        &mut l,
        t0,
        &mut t,
        (600, 5),
        |i| 22 + i % 7,
        |_, i| noisy(1600 + i) * 18 / 5,
    );
    assert!(
        l.min_rtt_nanos() >= 1.5 * l.measured_min_rtt_nanos(),
        "baseline {} from {}",
        l.min_rtt_nanos(),
        l.measured_min_rtt_nanos()
    );
    assert!(l.measured_min_rtt_nanos() < 60e6, "measured at about 50 ms");
    assert!(lowest + 1 >= held, "held {held}, lowest {lowest}");
    // Then quicker again, yet past the measured minRTT's tolerance: the raise stands, and
    // within its tolerance the gradient would grow the limit — not past where it was held,
    // since the queue there was ours.
    let mut highest = 0;
    for i in 0..400 {
        t += 5;
        let k = 22 + i % 7;
        l.on_sample(&sample(
            at(t0, t),
            noisy(2200 + i) * 8 / 5,
            k as usize,
            false,
        ));
        highest = highest.max(l.limit());
    }
    assert!(
        l.min_rtt_nanos() > l.measured_min_rtt_nanos(),
        "the raise stands"
    );
    assert!(highest <= held, "held {held}, highest {highest}");
}
