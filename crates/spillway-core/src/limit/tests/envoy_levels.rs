//! `live_min_rtt` at an upstream with fewer workers than `min_concurrency`: minRTT is the
//! latency at one in flight, not the median of a queue (`envoy/levels.rs`).

use super::*;

fn cfg() -> EnvoyGradientConfig {
    EnvoyGradientConfig {
        live_min_rtt: true,
        initial_limit: Some(5),
        min_concurrency: 5,
        min_concurrency_limit: Some(1),
        request_count: 25,
        jitter: 0.0,
        interval: Duration::from_secs(30),
        buffer: 0.5,
        exact_cuts: true,
        ..EnvoyGradientConfig::default()
    }
}

/// One worker taking 10 ms: a request admitted with `k` in flight is answered at `t_ms`
/// after `k` × 10 ms (it waited for the `k − 1` ahead of it).
fn one_worker_answer(l: &mut EnvoyGradientLimit, t0: Instant, t_ms: u64, k: u64) {
    l.on_sample(&sample(
        at(t0, t_ms),
        Duration::from_millis(10 * k),
        k as usize,
        false,
    ));
}

#[test]
fn one_worker_min_rtt_is_the_latency_alone_and_the_limit_comes_down() {
    let t0 = Instant::now();
    let mut l = EnvoyGradientLimit::new(&cfg(), t0, Box::new(FixedRandom(0.0))).expect("valid");
    // One worker taking 10 ms, the limit at 5: admitted with k in flight, an answer takes
    // k × 10 ms. The median of these low-concurrency samples is 30 ms; alone, 10 ms.
    let mut t = 0u64;
    for i in 0..25u64 {
        let k = 1 + i % 5;
        t += 10;
        one_worker_answer(&mut l, t0, t, k);
    }
    let m = l.min_rtt_nanos();
    assert!((m - 10e6).abs() <= 1e6, "minRTT {m}");
    // Windows whose answers were admitted with 1 to `limit` in flight, each taking 10 ms per
    // request at or ahead of it: past 1.5 × 10 ms at every limit above one. Cut, down to what
    // the worker can run, and minRTT stays the latency alone.
    for w in 0..20u64 {
        let n = l.limit() as u64;
        for i in 0..10u64 {
            let k = 1 + i % n;
            t = 1000 + 200 * w + 10 * i + 10 * k;
            one_worker_answer(&mut l, t0, t, k);
        }
        let m = l.min_rtt_nanos();
        assert!((m - 10e6).abs() <= 1e6, "window {w}: minRTT {m}");
    }
    assert!(l.limit() <= 2, "limit {}", l.limit());
}

#[test]
fn many_workers_keep_the_median() {
    let t0 = Instant::now();
    let mut l = EnvoyGradientLimit::new(&cfg(), t0, Box::new(FixedRandom(0.0))).expect("valid");
    // Twenty workers: every low level runs unqueued; latencies spread 5–15 ms whatever the
    // level, so minRTT is their median as before.
    let mut t = 0u64;
    for i in 0..25u64 {
        t += 10;
        let rtt = 5_000 + (i * 7919 % 101) * 100;
        l.on_sample(&sample(
            at(t0, t),
            Duration::from_micros(rtt),
            1 + (i % 5) as usize,
            false,
        ));
    }
    let m = l.min_rtt_nanos();
    assert!(m > 9e6 && m < 11e6, "minRTT {m}");
}

#[test]
fn callers_with_room_for_the_queue_still_get_one_in_flight() {
    // The same 1-worker answers (10 ms alone, median 30 ms), callers told to allow 50 ms
    // or 200 ms: either way the low levels' median is a queue in the upstream, where CRITICAL
    // work would wait behind SHEDDABLE work, so minRTT is the latency at one in flight.
    let run = |budget_ms: u64| {
        let t0 = Instant::now();
        let mut l = EnvoyGradientLimit::new(&cfg(), t0, Box::new(FixedRandom(0.0))).expect("valid");
        l.set_latency_budget(Duration::from_millis(budget_ms));
        for i in 0..25u64 {
            one_worker_answer(&mut l, t0, 10 * (i + 1), 1 + i % 5);
        }
        l.min_rtt_nanos()
    };
    for budget_ms in [50, 200] {
        let m = run(budget_ms);
        assert!(
            (m - 10e6).abs() <= 1e6,
            "{budget_ms} ms callers: minRTT {m}"
        );
    }
}

/// One worker taking 10 ms with a spread of 0.3–1.9 × its mean: the low levels' latency rises
/// with the level (Kendall's `z` about 3.7), too noisily for the fit at one in flight that a
/// measurement takes (`z` ≥ 4). Returns minRTT after the measurement and after two seconds of
/// windows at 6 in flight (above the low levels), overloaded or not.
fn noisy_one_worker(overloaded: bool) -> (f64, f64) {
    let t0 = Instant::now();
    let mut l = EnvoyGradientLimit::new(&cfg(), t0, Box::new(FixedRandom(0.0))).expect("valid");
    for i in 0..25u64 {
        let k = 1 + i % 5;
        let spread = 0.3 + 1.6 * ((i as f64 * 0.618_033_988_7) % 1.0);
        let rtt = Duration::from_micros((10_000.0 * k as f64 * spread) as u64);
        l.on_sample(&sample(at(t0, 10 * (i + 1)), rtt, k as usize, false));
    }
    let measured = l.min_rtt_nanos();
    l.set_overloaded(overloaded);
    for i in 0..200u64 {
        l.on_sample(&sample(
            at(t0, 300 + 10 * i),
            Duration::from_millis(60),
            6,
            false,
        ));
    }
    (measured, l.min_rtt_nanos())
}

#[test]
fn under_sustained_overload_a_noisy_queue_at_the_low_levels_gives_way_to_the_fit_at_one() {
    // The measurement's median is a queue at the worker (about 29 ms against 10 ms alone).
    let (measured, after) = noisy_one_worker(true);
    assert!(measured > 20e6, "measured minRTT {measured}");
    // Overloaded, the fit at one in flight (about 7 ms: the line's intercept, noisy) replaces
    // it.
    assert!(after < measured / 1.5, "minRTT {after} after {measured}");
    assert!(after > 2e6, "minRTT {after}");
}

#[test]
fn without_overload_the_noisy_queue_keeps_the_median() {
    // A rank test at `z` 3.7 is not enough to replace a measurement while no level's overload
    // is sustained: at 3, a 20-worker service's troughs read as a slope (`levels.rs`).
    let (measured, after) = noisy_one_worker(false);
    assert!(measured > 20e6, "measured minRTT {measured}");
    assert_eq!(after, measured);
}

/// A service's spread (deterministic): 0.95–1.05 ×, one answer in eight at half (at odd and
/// even indices alike). One with no fast answers answers no faster than the lowest level
/// seen, and the fit never goes below the fastest answer; a wide spread hides the levels'
/// rise from the rank test.
fn spread(i: u64) -> f64 {
    if i % 16 == 3 || i % 16 == 8 {
        0.5
    } else {
        0.95 + 0.1 * ((i as f64 * 0.618_033_988_7) % 1.0)
    }
}

/// Windows of 10 answers each at an upstream answering `latency_ms(k)` ([`spread`]) for a request
/// admitted with `k` in flight, every answer admitted at the limit or one below it (a
/// saturating load), overloaded; from `t_ms` on. Returns the limit after each window.
fn saturated_windows(
    l: &mut EnvoyGradientLimit,
    t0: Instant,
    mut t_ms: u64,
    windows: u64,
    latency_ms: impl Fn(u64) -> u64,
) -> Vec<usize> {
    l.set_overloaded(true);
    let mut limits = Vec::new();
    for w in 0..windows {
        let n = l.limit() as u64;
        for i in 0..10u64 {
            let k = (n - i % 2).max(1);
            t_ms += 12;
            let rtt = latency_ms(k) as f64 * 1e3 * spread(w * 10 + i);
            l.on_sample(&sample(
                at(t0, t_ms),
                Duration::from_micros(rtt as u64),
                k as usize,
                false,
            ));
        }
        limits.push(l.limit());
    }
    limits
}

/// The limit held at 5 at most, as a load that keeps it there does.
fn at_most_five() -> EnvoyGradientConfig {
    EnvoyGradientConfig {
        max_concurrency_limit: 5,
        ..cfg()
    }
}

/// A measurement from answers at 4 and 5 in flight only, 40 and 50 ms ([`spread`]): what 4
/// workers × 40 ms and 1 worker × 10 ms both give there.
fn measured_at_four_and_five(l: &mut EnvoyGradientLimit, t0: Instant) -> u64 {
    let mut t = 0u64;
    for i in 0..64u64 {
        let k = 4 + i % 2;
        t += 12;
        let rtt = k as f64 * 10e3 * spread(i);
        l.on_sample(&sample(
            at(t0, t),
            Duration::from_micros(rtt as u64),
            k as usize,
            false,
        ));
    }
    t
}

#[test]
fn a_min_rtt_extrapolated_below_the_levels_seen_cuts_one_level_at_a_time() {
    // Four workers × 40 ms: a request admitted past four waits for one.
    let four_workers = |k: u64| 40 + 10 * k.saturating_sub(4);
    let t0 = Instant::now();
    let mut l =
        EnvoyGradientLimit::new(&at_most_five(), t0, Box::new(FixedRandom(0.0))).expect("valid");
    let t = measured_at_four_and_five(&mut l, t0);
    // The straight line's reading at one in flight (floored at the fastest answer, 20 ms):
    // the same as a 1-worker, 10 ms service's.
    let m = l.min_rtt_nanos();
    assert!(m < 25e6, "minRTT {m}");
    // The gradient may cut to 3 and no further; the answers there (40 ms, as at 4) put
    // minRTT back where the workers are. Once they have left the samples the fit keeps (64,
    // about six windows) the same probe repeats: never below 3, back at 5 within three windows.
    let limits = saturated_windows(&mut l, t0, t, 30, four_workers);
    assert!(
        limits.iter().all(|&n| n >= 3),
        "the limit fell below 3 with 4 workers: {limits:?}"
    );
    assert!(
        limits.windows(4).all(|w| w.contains(&5)),
        "the limit stayed below the workers: {limits:?}"
    );
}

#[test]
fn a_one_worker_upstream_seen_only_at_four_and_five_still_comes_down_to_one() {
    let one_worker = |k: u64| 10 * k;
    let t0 = Instant::now();
    let mut l =
        EnvoyGradientLimit::new(&at_most_five(), t0, Box::new(FixedRandom(0.0))).expect("valid");
    let t = measured_at_four_and_five(&mut l, t0);
    // A level per measurement: from 4 down to the worker's one in flight.
    saturated_windows(&mut l, t0, t, 60, one_worker);
    assert!(l.limit() <= 2, "limit {}", l.limit());
    assert!(l.min_rtt_nanos() <= 12e6, "minRTT {}", l.min_rtt_nanos());
}
