//! `exact_cuts`, `rtt_windows` and live minRTT without timed-out requests: the limit comes
//! down to what a 1-worker service can take, and fast enough (issue 28's sweep, 1 worker).

use super::*;

fn cfg() -> EnvoyGradientConfig {
    EnvoyGradientConfig {
        live_min_rtt: true,
        min_concurrency: 1,
        min_concurrency_limit: Some(1),
        request_count: 5,
        jitter: 0.0,
        interval: Duration::from_secs(10),
        buffer: 0.5,
        ..EnvoyGradientConfig::default()
    }
}

fn limit(cfg: &EnvoyGradientConfig, t0: Instant) -> EnvoyGradientLimit {
    EnvoyGradientLimit::new(cfg, t0, Box::new(FixedRandom(0.0))).expect("valid config")
}

/// One worker taking 1 ms: a request admitted with `n` in flight answers in `n` ms. Returns
/// the lowest limit reached over 40 windows, starting from 5.
fn lowest_on_one_worker(exact_cuts: bool) -> usize {
    let t0 = Instant::now();
    let cfg = EnvoyGradientConfig {
        initial_limit: Some(5),
        exact_cuts,
        ..cfg()
    };
    let mut l = limit(&cfg, t0);
    for i in 0..5u64 {
        l.on_sample(&sample(at(t0, 1 + i), MS, 1, false));
    }
    assert!((l.min_rtt_nanos() - 1e6).abs() <= 0.05e6);
    let mut lowest = l.limit();
    for w in 1..=40u64 {
        let n = l.limit();
        envoy_window_at(&mut l, t0, 100 * w, n as u64, n);
        lowest = lowest.min(l.limit());
    }
    lowest
}

#[test]
fn exact_cuts_reach_one_where_the_headroom_holds_two() {
    // Envoy's √limit: from 2 at a gradient of 0.75, 1.5 + 1.2 → 2 again, for ever.
    assert_eq!(lowest_on_one_worker(false), 2);
    assert_eq!(lowest_on_one_worker(true), 1);
}

#[test]
fn a_window_mostly_timed_out_halves_the_limit() {
    let t0 = Instant::now();
    // minRTT 4 ms, callers give up at 5 ms: the latency seen can never exceed 5 ms, within
    // 1.5 × 4 ms, however long the queue behind is.
    let run = |exact_cuts: bool| {
        let cfg = EnvoyGradientConfig {
            initial_limit: Some(20),
            exact_cuts,
            ..cfg()
        };
        let mut l = limit(&cfg, t0);
        for i in 0..5u64 {
            l.on_sample(&sample(at(t0, 4 + i), 4 * MS, 1, false));
        }
        for i in 0..10u64 {
            l.on_sample(&sample(at(t0, 100 + i * 10), 5 * MS, 20, true));
        }
        l.on_sample(&sample(at(t0, 205), 5 * MS, 20, true));
        l.limit()
    };
    // The first window (the 4 ms answers) grows the limit to 20·1.5 + √30 = 35; the next one
    // holds only timed-out requests.
    assert!(run(false) >= 35, "5 ms against 6 ms tolerated: not cut");
    assert_eq!(run(true), 17, "censored: 35 halved");
}

#[test]
fn timed_out_requests_do_not_measure_min_rtt() {
    let t0 = Instant::now();
    let mut l = limit(&cfg(), t0);
    // Alone, but given up on at 50 ms: says nothing about the service's own latency.
    for i in 0..5u64 {
        l.on_sample(&sample(at(t0, 50 + i), 50 * MS, 1, true));
    }
    assert_eq!(l.min_rtt_nanos(), 0.0);
    l.on_sample(&sample(at(t0, 60), 2 * MS, 1, false));
    assert!((l.min_rtt_nanos() - 2e6).abs() <= 0.05 * 2e6);
}

#[test]
fn rtt_windows_decide_once_a_round_trip_not_once_per_100_ms() {
    let t0 = Instant::now();
    let run = |rtt_windows: bool| {
        let cfg = EnvoyGradientConfig {
            initial_limit: Some(20),
            rtt_windows,
            ..cfg()
        };
        let mut l = limit(&cfg, t0);
        for i in 0..5u64 {
            l.on_sample(&sample(at(t0, 1 + i), MS, 1, false));
        }
        // Then 10 ms at 20 in flight, one answer a millisecond, for 40 ms.
        let mut peak = l.limit();
        for i in 0..40u64 {
            l.on_sample(&sample(at(t0, 10 + i), 10 * MS, 20, false));
            peak = peak.max(l.limit());
        }
        (peak, l.limit())
    };
    assert_eq!(run(false), (20, 20), "no 100 ms window has closed yet");
    let (peak, now) = run(true);
    assert!(now < peak, "cut within 40 ms: peak {peak}, now {now}");
}

#[test]
fn a_provisional_min_rtt_is_not_cut_on_unless_clearly_exceeded() {
    let t0 = Instant::now();
    // Five requests ran alone in 10 ms: a provisional minRTT (25 make a measurement), the
    // median of a handful — of an exponential service it may be half the true one.
    let run = |rtt_ms: u64| {
        let cfg = EnvoyGradientConfig {
            initial_limit: Some(20),
            min_concurrency: 5,
            request_count: 25,
            ..cfg()
        };
        let mut l = limit(&cfg, t0);
        for i in 0..5u64 {
            l.on_sample(&sample(at(t0, 10 + i), 10 * MS, 1, false));
        }
        let mut lowest = l.limit();
        for w in 1..10u64 {
            let n = l.limit();
            envoy_window_at(&mut l, t0, 100 * w, rtt_ms, n);
            lowest = lowest.min(l.limit());
        }
        lowest
    };
    assert_eq!(
        run(20),
        20,
        "20 ms: above the 15 ms tolerated, within twice it: held"
    );
    assert!(run(40) < 20, "40 ms: more than twice the tolerance, cut");
}

#[test]
fn a_small_limit_used_to_its_share_may_grow_by_one() {
    let t0 = Instant::now();
    // At a limit of 2 the lowest criticality may use 1 slot (the headroom ladder), so a
    // window's peak is 1 and "at most twice the peak" is 2: a limit cut to 2 stayed there.
    let cfg = EnvoyGradientConfig {
        fixed_min_rtt: Some(10 * MS),
        min_concurrency: 1,
        min_concurrency_limit: Some(1),
        initial_limit: Some(2),
        app_limited_growth: Some(2.0),
        ..EnvoyGradientConfig::default()
    };
    let mut l = limit(&cfg, t0);
    for w in 1..=5u64 {
        envoy_window_at(&mut l, t0, 100 * w, 10, 1);
    }
    assert_eq!(
        l.limit(),
        3,
        "one more; then 1 in flight of 3 is app-limited"
    );
}

#[test]
fn abandoned_requests_count_only_past_tolerance() {
    let t0 = Instant::now();
    // minRTT measured at `min_rtt_ms`; then a window of requests whose callers gave up at 5 ms
    // with 20 in flight, released as abandoned (issue 28 requirement 6), never as drops.
    let run = |min_rtt_ms: u64| {
        let cfg = EnvoyGradientConfig {
            initial_limit: Some(20),
            exact_cuts: true,
            ..cfg()
        };
        let mut l = limit(&cfg, t0);
        for i in 0..5u64 {
            l.on_sample(&sample(
                at(t0, min_rtt_ms + i),
                Duration::from_millis(min_rtt_ms),
                1,
                false,
            ));
        }
        let grown = l.limit();
        for i in 0..10u64 {
            l.on_abandoned(&sample(at(t0, 100 + i * 10), 5 * MS, 20, false));
        }
        l.on_abandoned(&sample(at(t0, 205), 5 * MS, 20, false));
        (grown, l.limit())
    };
    // A 1 ms service: "at least 5 ms" is past 1.5 ms tolerated — queueing: the window of
    // abandoned requests halves the limit (to 17, as a window of timed-out ones does).
    let (grown, after) = run(1);
    assert!(after < grown, "cut: {grown} -> {after}");
    assert_eq!(after, 17);
    // A 100 ms service behind callers who give up at 5 ms: the bound says nothing; no cut.
    let (grown, after) = run(100);
    assert!(after >= grown, "held: {grown} -> {after}");
}
