//! Callers who give up past minRTT but within tolerance (`on_abandoned`): a window most of
//! whose requests went unanswered is censored and cuts the limit, while give-ups before minRTT
//! and a minority of give-ups do not (issue 28's sweep: 1-worker services whose callers allow
//! 5 service times, served nothing in time behind a limit that never moved).

use super::*;

fn cfg() -> EnvoyGradientConfig {
    EnvoyGradientConfig {
        live_min_rtt: true,
        min_concurrency: 5,
        min_concurrency_limit: Some(1),
        request_count: 25,
        jitter: 0.0,
        interval: Duration::from_secs(10),
        buffer: 0.5,
        initial_limit: Some(20),
        exact_cuts: true,
        ..EnvoyGradientConfig::default()
    }
}

fn limit(t0: Instant) -> EnvoyGradientLimit {
    EnvoyGradientLimit::new(&cfg(), t0, Box::new(FixedRandom(0.0))).expect("valid config")
}

/// Window `w` (100 ms each, from 100 ms): ten requests with 20 in flight, the first
/// `answered` of them answered in `answer_ms`, the rest given up on by their callers at
/// `give_up_ms`. Returns the limit after each window.
fn windows(
    l: &mut EnvoyGradientLimit,
    t0: Instant,
    n: u64,
    answered: u64,
    answer_ms: u64,
    give_up_ms: u64,
) -> Vec<usize> {
    let mut limits = Vec::new();
    for w in 1..=n {
        for i in 0..10u64 {
            let now = at(t0, 100 * w + give_up_ms.max(answer_ms) + i * 5);
            if i < answered {
                l.on_sample(&sample(now, Duration::from_millis(answer_ms), 20, false));
            } else {
                l.on_abandoned(&sample(now, Duration::from_millis(give_up_ms), 20, false));
            }
        }
        limits.push(l.limit());
    }
    limits
}

/// One request ran alone in 37 ms: the provisional minRTT of a service whose mean is far
/// lower, tolerating 55.5 ms.
fn after_one_slow_answer(t0: Instant) -> EnvoyGradientLimit {
    let mut l = limit(t0);
    l.on_sample(&sample(at(t0, 37), 37 * MS, 1, false));
    assert!((l.min_rtt_nanos() - 37e6).abs() <= 0.05 * 37e6);
    l
}

#[test]
fn windows_given_up_on_past_min_rtt_halve_the_limit() {
    let t0 = Instant::now();
    let mut l = after_one_slow_answer(t0);
    // Callers allow 50 ms, within the tolerance: no answer is ever "slow", none comes at all.
    // The first window to close holds the 37 ms answer (grown to 35); each after it, only
    // give-ups.
    let limits = windows(&mut l, t0, 6, 0, 0, 50);
    assert_eq!(limits, vec![35, 17, 8, 4, 2, 1], "halved window by window");
}

#[test]
fn a_minority_given_up_on_does_not_cut() {
    let t0 = Instant::now();
    let mut l = after_one_slow_answer(t0);
    // Six in ten answered within minRTT, four given up on at 50 ms: a service at its usual
    // speed whose slower requests outlive some callers.
    let limits = windows(&mut l, t0, 6, 6, 30, 50);
    assert!(limits.iter().all(|&n| n >= 20), "{limits:?}");
}

#[test]
fn give_ups_before_min_rtt_say_nothing() {
    let t0 = Instant::now();
    let mut l = after_one_slow_answer(t0);
    // Callers allowing 20 ms in front of a 37 ms service: nothing is answered, and nothing
    // says the limit is the cause.
    let limits = windows(&mut l, t0, 6, 0, 0, 20);
    assert!(limits.iter().all(|&n| n == 20), "{limits:?}");
}

#[test]
fn no_answer_at_all_measures_at_low_concurrency() {
    let t0 = Instant::now();
    let mut l = limit(t0);
    // The very first request outlived its caller, and every one after it: no minRTT, so
    // nothing to compare with — but five windows of give-ups at 20 in flight are as stale as
    // five windows of answers at it, and the limit drops to `min_concurrency`.
    let limits = windows(&mut l, t0, 6, 0, 0, 50);
    assert_eq!(l.min_rtt_nanos(), 0.0);
    assert_eq!(limits[..4], [20, 20, 20, 20]);
    assert_eq!(l.limit(), 5, "{limits:?}");
}

#[test]
fn sparse_give_ups_are_judged_together() {
    let t0 = Instant::now();
    let mut l = after_one_slow_answer(t0);
    // One request a window (a service answering a few a second): one give-up is a coin toss
    // at an unqueued upstream, so windows are judged together once five requests are in.
    let mut limits = Vec::new();
    for w in 1..=6u64 {
        l.on_abandoned(&sample(
            at(t0, 100 * w + 50),
            Duration::from_millis(50),
            2,
            false,
        ));
        limits.push(l.limit());
    }
    // The first give-up closes the window of the 37 ms answer (grown to 35). That answer and
    // the next four give-ups are five requests, four unanswered: the verdict comes when the
    // fifth give-up closes the fourth's window, and the tally starts afresh.
    assert_eq!(limits, vec![35, 35, 35, 35, 17, 17], "{limits:?}");
}

#[test]
fn three_in_five_unanswered_is_no_verdict() {
    let t0 = Instant::now();
    let mut l = after_one_slow_answer(t0);
    // Two of five answered in 30 ms, three given up on at 50 ms, window after window: more
    // than half, as a service's slower half outliving callers near its median may be.
    let mut lowest = usize::MAX;
    for w in 1..=6u64 {
        for i in 0..5u64 {
            let now = at(t0, 100 * w + 50 + i);
            if i < 2 {
                l.on_sample(&sample(now, Duration::from_millis(30), 20, false));
            } else {
                l.on_abandoned(&sample(now, Duration::from_millis(50), 20, false));
            }
        }
        lowest = lowest.min(l.limit());
    }
    assert!(lowest >= 20, "{lowest}");
}
