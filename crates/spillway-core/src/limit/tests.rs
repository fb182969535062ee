//! Deterministic tests on simulated sample streams (injected `Instant`s, no sleeps).

use std::time::{Duration, Instant};

use super::*;
use crate::random::{FixedRandom, SeededRandom};

const MS: Duration = Duration::from_millis(1);

fn at(t0: Instant, ms: u64) -> Instant {
    t0 + Duration::from_millis(ms)
}

fn sample(now: Instant, rtt: Duration, in_flight: usize, dropped: bool) -> Sample {
    Sample {
        rtt,
        in_flight,
        dropped,
        now,
    }
}

// ---------------------------------------------------------------- fixed

#[test]
fn fixed_never_moves() {
    let t0 = Instant::now();
    let mut l = LimitConfig::Fixed(FixedConfig { limit: 42 }).build(t0);
    assert_eq!(l.name(), "fixed");
    for i in 0..100u64 {
        let rtt = [Duration::ZERO, Duration::MAX, 10 * MS][(i % 3) as usize];
        l.on_sample(&sample(at(t0, i), rtt, (i * 7) as usize, i % 2 == 0));
        assert_eq!(l.limit(), 42);
    }
}

// ---------------------------------------------------------------- aimd

fn aimd(initial: usize, min: usize, max: usize) -> AimdLimit {
    AimdLimit::new(&AimdConfig {
        initial_limit: initial,
        min_limit: min,
        max_limit: max,
        ..AimdConfig::default()
    })
    .expect("valid config")
}

#[test]
fn aimd_grows_by_one_per_sample_when_saturated() {
    let t0 = Instant::now();
    let mut l = aimd(10, 1, 100);
    for i in 0..10u64 {
        let limit = l.limit();
        l.on_sample(&sample(at(t0, i), 10 * MS, limit, false));
        assert_eq!(l.limit(), limit + 1);
    }
    assert_eq!(l.limit(), 20);
}

#[test]
fn aimd_holds_when_app_limited() {
    let t0 = Instant::now();
    let mut l = aimd(10, 1, 100);
    // in_flight * 2 < limit: the limit is not what constrains throughput.
    for i in 0..50u64 {
        l.on_sample(&sample(at(t0, i), 10 * MS, 4, false));
    }
    assert_eq!(l.limit(), 10);
    // Half-used counts as used (Netflix: in_flight * 2 >= limit).
    l.on_sample(&sample(at(t0, 60), 10 * MS, 5, false));
    assert_eq!(l.limit(), 11);
}

#[test]
fn aimd_backs_off_by_ratio_on_drop_and_timeout() {
    let t0 = Instant::now();
    let mut l = aimd(100, 1, 200);
    l.on_sample(&sample(t0, 10 * MS, 100, true));
    assert_eq!(l.limit(), 90);
    l.on_sample(&sample(t0, 10 * MS, 90, true));
    assert_eq!(l.limit(), 81);
    // An rtt above the 5 s timeout is a drop even when not flagged.
    l.on_sample(&sample(t0, Duration::from_secs(6), 1, false));
    assert_eq!(l.limit(), 72);
    // Exactly the timeout is not.
    l.on_sample(&sample(t0, Duration::from_secs(5), 72, false));
    assert_eq!(l.limit(), 73);
}

#[test]
fn aimd_small_limits_still_back_off_and_respect_bounds() {
    let t0 = Instant::now();
    let mut l = aimd(5, 2, 6);
    l.on_sample(&sample(t0, MS, 0, true)); // floor(4.5) = 4
    assert_eq!(l.limit(), 4);
    l.on_sample(&sample(t0, MS, 0, true)); // floor(3.6) = 3
    assert_eq!(l.limit(), 3);
    for _ in 0..5 {
        l.on_sample(&sample(t0, MS, 0, true));
    }
    assert_eq!(l.limit(), 2, "clamped at min_limit");
    for _ in 0..10 {
        let limit = l.limit();
        l.on_sample(&sample(t0, MS, limit, false));
    }
    assert_eq!(l.limit(), 6, "clamped at max_limit");
}

// ---------------------------------------------------------------- gradient2

fn g2(min: usize, initial: usize, max: usize) -> Gradient2Limit {
    Gradient2Limit::new(&Gradient2Config {
        initial_limit: initial,
        min_limit: min,
        max_limit: max,
        ..Gradient2Config::default()
    })
    .expect("valid config")
}

/// Feeds `n` saturated samples (in_flight = limit) of a constant rtt; returns the limit path.
fn feed_saturated(l: &mut Gradient2Limit, t: &mut Instant, n: usize, rtt: Duration) -> Vec<usize> {
    (0..n)
        .map(|_| {
            *t += MS;
            let in_flight = l.limit();
            l.on_sample(&sample(*t, rtt, in_flight, false));
            l.limit()
        })
        .collect()
}

#[test]
fn gradient2_grows_to_max_at_steady_latency_under_load() {
    let mut t = Instant::now();
    let mut l = g2(20, 20, 200);
    let path = feed_saturated(&mut l, &mut t, 400, 10 * MS);
    // Gradient 1: +queue_size·smoothing = +0.8 per sample.
    assert!(path.windows(2).all(|w| w[1] >= w[0]), "monotone");
    assert_eq!(l.limit(), 200);
}

#[test]
fn gradient2_shrinks_when_rtt_doubles_and_recovers_at_baseline() {
    let mut t = Instant::now();
    let mut l = g2(10, 100, 200);
    feed_saturated(&mut l, &mut t, 1000, 10 * MS);
    assert_eq!(l.limit(), 200);

    // Latency doubles: 1.5 · long/short ≈ 0.75 → shrink. The long average then catches up
    // with the new latency (that is Gradient2's design: a sustained shift becomes the new
    // baseline), so the fall is monotone only until the gradient returns to ~1.
    let down = feed_saturated(&mut l, &mut t, 100, 20 * MS);
    assert!(
        down[..60].windows(2).all(|w| w[1] <= w[0]),
        "shrinks monotonically: {down:?}"
    );
    let bottom = down.iter().copied().min().unwrap_or(200);
    assert!(bottom < 50, "bottom {bottom} should be far below 200");
    assert!(bottom >= 10);
    assert!(l.limit() < 60, "limit {} still well below 200", l.limit());

    // Back at baseline: gradient 1 again, the limit grows back.
    let low = l.limit();
    let up = feed_saturated(&mut l, &mut t, 100, 10 * MS);
    assert!(up.windows(2).all(|w| w[1] >= w[0]), "grows monotonically");
    assert!(l.limit() >= low + 60, "grew from {low} to {}", l.limit());
    assert!(l.limit() <= 200);
}

#[test]
fn gradient2_app_limited_samples_do_not_move_the_limit() {
    let t0 = Instant::now();
    let mut l = g2(20, 100, 200);
    for i in 0..200u64 {
        // 49 < 100 / 2: app-limited, even though latency is terrible.
        l.on_sample(&sample(at(t0, i), Duration::from_secs(1 + i), 49, false));
    }
    assert_eq!(l.limit(), 100);
}

#[test]
fn gradient2_long_rtt_decays_toward_short_after_overload() {
    let mut t = Instant::now();
    let mut l = g2(20, 20, 200);
    feed_saturated(&mut l, &mut t, 2000, 100 * MS);
    let long_before = l.long_rtt_nanos();
    assert!((long_before - 100e6).abs() < 1e6);
    feed_saturated(&mut l, &mut t, 60, 10 * MS);
    // A plain EMA over 600 samples would still be above 90 ms; the ×0.95 drift rule
    // (while long/short > 2) brings it within 2× of the short rtt.
    assert!(
        l.long_rtt_nanos() <= 2.0 * 10e6 + 1.0,
        "long rtt {} ns",
        l.long_rtt_nanos()
    );
}

/// `n` latencies spread as an exponential service's quantiles (`mean` × −ln(1 − u), u at the
/// middle of each n-th; median ≈ 0.69 × mean), shuffled by a fixed stride so that their order
/// (by level or by arrival) is no ramp.
pub(in crate::limit) fn exponential_quantiles(n: usize, mean: f64) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let u = ((i * 37) % n) as f64 / n as f64 + 0.5 / n as f64;
            -(1.0 - u).ln() * mean
        })
        .collect()
}

// ---------------------------------------------------------------- envoy gradient

/// The Envoy gradient of the zero-config policy (`AdmissionConfig::zero_config`).
fn zero_config_envoy() -> EnvoyGradientConfig {
    match crate::controller::AdmissionConfig::zero_config().limit {
        LimitConfig::EnvoyGradient(c) => c,
        other => panic!("zero_config is the Envoy gradient, not {other:?}"),
    }
}

fn envoy_cfg() -> EnvoyGradientConfig {
    EnvoyGradientConfig {
        interval: Duration::from_secs(1),
        request_count: 5,
        jitter: 0.0,
        min_concurrency: 3,
        update_interval: Duration::from_millis(100),
        ..EnvoyGradientConfig::default()
    }
}

/// Feeds one 100 ms sampling window starting at `start_ms`: 10 samples of `rtt`, each started
/// after `start_ms` (so none is discarded as predating a minRTT window).
fn envoy_window(l: &mut EnvoyGradientLimit, t0: Instant, start_ms: u64, rtt_ms: u64) {
    for i in 0..10u64 {
        let now = start_ms + rtt_ms + i * 10;
        l.on_sample(&sample(
            at(t0, now),
            Duration::from_millis(rtt_ms),
            l.limit(),
            false,
        ));
    }
}

fn envoy_measured(
    t0: Instant,
    cfg: &EnvoyGradientConfig,
    rng: Box<dyn RandomSource>,
) -> EnvoyGradientLimit {
    let mut l = EnvoyGradientLimit::new(cfg, t0, rng).expect("valid config");
    assert!(l.measuring_min_rtt());
    for i in 1..=5u64 {
        assert_eq!(l.limit(), 3, "pinned to min_concurrency while measuring");
        l.on_sample(&sample(at(t0, 10 * i), 10 * MS, 1, false));
    }
    assert!(!l.measuring_min_rtt());
    l
}

#[test]
fn envoy_pins_during_min_rtt_window_then_grows_near_min_rtt() {
    let t0 = Instant::now();
    let mut l = envoy_measured(t0, &envoy_cfg(), Box::new(FixedRandom(0.0)));
    let min_rtt = l.min_rtt_nanos();
    assert!((min_rtt - 10e6).abs() <= 0.05 * 10e6, "minRTT {min_rtt}");

    let mut path = vec![l.limit()];
    for w in 1..9u64 {
        envoy_window(&mut l, t0, 100 * w, 10);
        path.push(l.limit());
    }
    // gradient = 1.25 (the buffer) and headroom √limit: strictly growing.
    assert!(path.windows(2).all(|w| w[1] > w[0]), "path {path:?}");
    let grown = l.limit();
    assert!(grown > 20 && grown <= 1000);

    // The next minRTT window (due at 50 ms + 1 s, no jitter) pins the limit again …
    envoy_window(&mut l, t0, 1100, 10);
    assert!(!l.measuring_min_rtt(), "5 samples completed the window");
    // … and restores the previous limit once it has its samples.
    assert_eq!(l.limit(), grown);

    let mut l2 = envoy_measured(t0, &envoy_cfg(), Box::new(FixedRandom(0.0)));
    envoy_window(&mut l2, t0, 100, 10);
    let before = l2.limit();
    // This sample opens the window; it started before the window, so it is not counted.
    l2.on_sample(&sample(at(t0, 1100), 10 * MS, 1, false));
    assert!(l2.measuring_min_rtt());
    assert_eq!(l2.limit(), 3);
    for i in 1..=4u64 {
        l2.on_sample(&sample(at(t0, 1100 + 10 * i), 5 * MS, 1, false));
        assert!(l2.measuring_min_rtt());
        assert_eq!(l2.limit(), 3);
    }
    for i in 5..=5u64 {
        l2.on_sample(&sample(at(t0, 1100 + 10 * i), 5 * MS, 1, false));
    }
    assert!(!l2.measuring_min_rtt());
    assert_eq!(l2.limit(), before);
}

/// Feeds one 100 ms window of 10 samples of `rtt`, each reporting `in_flight` requests in flight.
fn envoy_window_at(
    l: &mut EnvoyGradientLimit,
    t0: Instant,
    start_ms: u64,
    rtt_ms: u64,
    in_flight: usize,
) {
    for i in 0..10u64 {
        let now = start_ms + rtt_ms + i * 10;
        l.on_sample(&sample(
            at(t0, now),
            Duration::from_millis(rtt_ms),
            in_flight,
            false,
        ));
    }
}

#[test]
fn envoy_app_limited_growth_holds_the_limit_when_it_is_not_used() {
    let t0 = Instant::now();
    let cfg = EnvoyGradientConfig {
        interval: Duration::from_secs(3600),
        app_limited_growth: Some(2.0),
        ..envoy_cfg()
    };
    // Envoy's rule alone: latency at minRTT grows the limit every window even with 2 in flight.
    let mut envoy = envoy_measured(t0, &envoy_cfg(), Box::new(FixedRandom(0.0)));
    let mut bounded = envoy_measured(t0, &cfg, Box::new(FixedRandom(0.0)));
    for w in 1..9u64 {
        envoy_window_at(&mut envoy, t0, 100 * w, 10, 2);
        envoy_window_at(&mut bounded, t0, 100 * w, 10, 2);
    }
    assert!(
        envoy.limit() > 50,
        "Envoy grows regardless: {}",
        envoy.limit()
    );
    // 2 in flight × 2 ≥ 3 (the restored limit): one window of growth, to 2 × 2 = 4 (not to
    // 3·1.25 + √3.75 → 5: growth stops at twice the peak in flight); at 4, 2 × 2 = 4 used the
    // limit's half, which may still add one (at a limit of 2 the lowest criticality's share is
    // 1, and "twice the peak" held a limit cut to 2 for good); at 5 it is app-limited and stays.
    assert_eq!(bounded.limit(), 5);
    // Using the limit (in flight = limit) lets it grow again, window by window.
    let mut path = vec![bounded.limit()];
    for w in 9..13u64 {
        let used = bounded.limit();
        envoy_window_at(&mut bounded, t0, 100 * w, 10, used);
        path.push(bounded.limit());
    }
    assert!(path.windows(2).all(|w| w[1] > w[0]), "path {path:?}");
    // Decreases still apply while app-limited: 10× minRTT with 1 in flight shrinks it.
    let high = bounded.limit();
    envoy_window_at(&mut bounded, t0, 1300, 100, 1);
    envoy_window_at(&mut bounded, t0, 1400, 100, 1);
    assert!(bounded.limit() < high, "{} !< {high}", bounded.limit());
}

#[test]
fn envoy_shrinks_when_sample_rtt_far_above_min_rtt() {
    let t0 = Instant::now();
    let cfg = EnvoyGradientConfig {
        interval: Duration::from_secs(3600),
        ..envoy_cfg()
    };
    let mut l = envoy_measured(t0, &cfg, Box::new(FixedRandom(0.0)));
    for w in 1..9u64 {
        envoy_window(&mut l, t0, 100 * w, 10);
    }
    // A window is summarised when the first sample after it arrives, so the first slow window
    // still closes the last fast one (and grows the limit once more).
    envoy_window(&mut l, t0, 900, 100);
    let high = l.limit();
    assert!(high > 20);
    // 10× minRTT: gradient clamps at 0.5 → limit/2 + √(limit/2) each window.
    let mut path = vec![high];
    for w in 1..5u64 {
        envoy_window(&mut l, t0, 900 + 100 * w, 100);
        path.push(l.limit());
    }
    assert!(path.windows(2).all(|w| w[1] < w[0]), "path {path:?}");
    let half = high as f64 / 2.0;
    assert_eq!(path[1], (half + half.sqrt()).floor() as usize);
    assert!(l.limit() >= 3);
}

#[test]
fn envoy_discards_samples_started_before_the_min_rtt_window() {
    let t0 = Instant::now();
    let mut l = EnvoyGradientLimit::new(&envoy_cfg(), t0, Box::new(FixedRandom(0.0))).unwrap();
    // Window opened at t0; a request that took 50 ms but completed at t0 + 20 ms started earlier.
    for i in 0..10u64 {
        l.on_sample(&sample(at(t0, 20 + i), 50 * MS, 1, false));
    }
    assert!(
        l.measuring_min_rtt(),
        "old requests must not complete the measurement"
    );
    assert_eq!(l.limit(), 3);
}

#[test]
fn envoy_remeasures_min_rtt_after_five_windows_at_the_floor() {
    let t0 = Instant::now();
    let cfg = EnvoyGradientConfig {
        interval: Duration::from_secs(3600),
        ..envoy_cfg()
    };
    let mut l = envoy_measured(t0, &cfg, Box::new(FixedRandom(0.0)));
    // Latency 20× minRTT: the limit sits at the floor (3) window after window.
    for w in 1..=7u64 {
        envoy_window(&mut l, t0, 100 * w, 200);
        if l.measuring_min_rtt() {
            // Opened by the stale-minRTT rule, long before the hour-long interval.
            assert!(w >= 6, "opened after {w} windows");
            return;
        }
        assert_eq!(l.limit(), 3);
    }
    panic!("minRTT was not re-measured after 5 windows at the floor");
}

#[test]
fn envoy_jitter_is_bounded_by_the_configured_fraction() {
    let t0 = Instant::now();
    let cfg = EnvoyGradientConfig {
        jitter: 0.1,
        ..envoy_cfg()
    };
    let finished = at(t0, 50);
    let mut delays = Vec::new();
    for seed in 0..200u64 {
        let l = envoy_measured(t0, &cfg, Box::new(SeededRandom::new(seed)));
        delays.push(l.next_min_rtt_at() - finished);
    }
    for d in &delays {
        assert!(
            *d >= Duration::from_secs(1) && *d < Duration::from_millis(1100),
            "{d:?}"
        );
    }
    // It is actually random, and spreads across the range.
    let lo = delays.iter().min().copied().unwrap_or_default();
    let hi = delays.iter().max().copied().unwrap_or_default();
    assert!(hi - lo > Duration::from_millis(50), "{lo:?}..{hi:?}");

    let l = envoy_measured(t0, &cfg, Box::new(FixedRandom(0.0)));
    assert_eq!(l.next_min_rtt_at() - finished, Duration::from_secs(1));
}

#[test]
fn envoy_separate_floor_does_not_pin_and_fixed_min_rtt_skips_measuring() {
    let t0 = Instant::now();
    let cfg = EnvoyGradientConfig {
        min_concurrency_limit: Some(10),
        ..envoy_cfg()
    };
    let l = EnvoyGradientLimit::new(&cfg, t0, Box::new(FixedRandom(0.0))).unwrap();
    assert!(l.measuring_min_rtt());
    assert_eq!(
        l.limit(),
        10,
        "not pinned to min_concurrency 3; floor is 10"
    );

    let cfg = EnvoyGradientConfig {
        fixed_min_rtt: Some(10 * MS),
        ..envoy_cfg()
    };
    let mut l = EnvoyGradientLimit::new(&cfg, t0, Box::new(FixedRandom(0.0))).unwrap();
    assert!(!l.measuring_min_rtt());
    envoy_window(&mut l, t0, 0, 10);
    envoy_window(&mut l, t0, 100, 10);
    assert!(l.limit() > 3);
    assert_eq!(l.min_rtt_nanos(), 10e6);
}

// ---------------------------------------------------------------- config

#[test]
fn default_is_gradient2_and_defaults_validate() {
    assert!(matches!(LimitConfig::default(), LimitConfig::Gradient2(_)));
    assert_eq!(LimitConfig::default().name(), "gradient2");
    let t0 = Instant::now();
    for cfg in [
        LimitConfig::Fixed(FixedConfig::default()),
        LimitConfig::Aimd(AimdConfig::default()),
        LimitConfig::Gradient2(Gradient2Config::default()),
        LimitConfig::EnvoyGradient(EnvoyGradientConfig::default()),
    ] {
        cfg.validate().expect("defaults are valid");
        let l = cfg.try_build(t0).expect("builds");
        assert_eq!(l.name(), cfg.name());
        assert!(l.limit() >= 1);
    }
}

#[test]
fn invalid_configs_name_the_field() {
    let cases: Vec<(LimitConfig, &str)> = vec![
        (
            LimitConfig::Fixed(FixedConfig { limit: 0 }),
            "limit.fixed.limit",
        ),
        (
            LimitConfig::Aimd(AimdConfig {
                backoff_ratio: 1.0,
                ..Default::default()
            }),
            "limit.aimd.backoff_ratio",
        ),
        (
            LimitConfig::Aimd(AimdConfig {
                backoff_ratio: 0.4,
                ..Default::default()
            }),
            "limit.aimd.backoff_ratio",
        ),
        (
            LimitConfig::Aimd(AimdConfig {
                timeout: Duration::ZERO,
                ..Default::default()
            }),
            "limit.aimd.timeout_ms",
        ),
        (
            LimitConfig::Aimd(AimdConfig {
                min_limit: 0,
                initial_limit: 0,
                ..Default::default()
            }),
            "limit.aimd.min_limit",
        ),
        (
            LimitConfig::Gradient2(Gradient2Config {
                smoothing: 0.0,
                ..Default::default()
            }),
            "limit.gradient2.smoothing",
        ),
        (
            LimitConfig::Gradient2(Gradient2Config {
                smoothing: f64::NAN,
                ..Default::default()
            }),
            "limit.gradient2.smoothing",
        ),
        (
            LimitConfig::Gradient2(Gradient2Config {
                rtt_tolerance: 0.9,
                ..Default::default()
            }),
            "limit.gradient2.rtt_tolerance",
        ),
        (
            LimitConfig::Gradient2(Gradient2Config {
                max_limit: 10,
                ..Default::default()
            }),
            "limit.gradient2.max_limit",
        ),
        (
            LimitConfig::Gradient2(Gradient2Config {
                initial_limit: 500,
                ..Default::default()
            }),
            "limit.gradient2.initial_limit",
        ),
        (
            LimitConfig::Gradient2(Gradient2Config {
                long_window: 0,
                ..Default::default()
            }),
            "limit.gradient2.long_window",
        ),
        (
            LimitConfig::EnvoyGradient(EnvoyGradientConfig {
                jitter: 1.5,
                ..Default::default()
            }),
            "limit.envoy_gradient.jitter",
        ),
        (
            LimitConfig::EnvoyGradient(EnvoyGradientConfig {
                interval: Duration::ZERO,
                ..Default::default()
            }),
            "limit.envoy_gradient.interval_ms",
        ),
        (
            LimitConfig::EnvoyGradient(EnvoyGradientConfig {
                sample_percentile: 0.0,
                ..Default::default()
            }),
            "limit.envoy_gradient.sample_percentile",
        ),
        (
            LimitConfig::EnvoyGradient(EnvoyGradientConfig {
                max_concurrency_limit: 2,
                ..Default::default()
            }),
            "limit.envoy_gradient.max_concurrency_limit",
        ),
        (
            LimitConfig::EnvoyGradient(EnvoyGradientConfig {
                min_concurrency: 0,
                ..Default::default()
            }),
            "limit.envoy_gradient.min_concurrency",
        ),
    ];
    for (cfg, field) in cases {
        let err = cfg.validate().expect_err(field);
        assert_eq!(err.field, field);
        assert!(err.to_string().contains(field));
        // build never panics even on an invalid config, and the limit is still sane.
        let l = cfg.build(Instant::now());
        assert!(l.limit() >= 1);
    }
}

/// A saturated upstream of `workers` FIFO workers with exponential service, behind a caller
/// with more demand than any limit: whenever fewer than the limit are in flight another request
/// is sent. `mean_ms(sent_ns, held)` is the mean service time of a request sent at `sent_ns`
/// with `held` in flight (itself included). Runs until `until_ms`; returns the limit every
/// 100 ms.
pub(super) fn saturated_upstream(
    l: &mut EnvoyGradientLimit,
    t0: Instant,
    workers: usize,
    mean_ms: impl FnMut(u64, usize) -> f64,
    until_ms: f64,
) -> Vec<usize> {
    saturated_upstream_seeded(l, t0, workers, mean_ms, until_ms, 28)
}

/// [`saturated_upstream`] with its service times drawn from `seed`.
pub(super) fn saturated_upstream_seeded(
    l: &mut EnvoyGradientLimit,
    t0: Instant,
    workers: usize,
    mut mean_ms: impl FnMut(u64, usize) -> f64,
    until_ms: f64,
    seed: u64,
) -> Vec<usize> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    // Times in nanoseconds; `free`: when each worker is next free; `done`: (completion, sent,
    // in flight when sent).
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut free: BinaryHeap<Reverse<u64>> = (0..workers).map(|_| Reverse(0)).collect();
    let mut done: BinaryHeap<Reverse<(u64, u64, usize)>> = BinaryHeap::new();
    let (mut now, mut path, mut next_report) = (0u64, Vec::new(), 0u64);
    let until = (until_ms * 1e6) as u64;
    while now < until {
        while done.len() < l.limit() {
            let held = done.len() + 1;
            let service = (-mean_ms(now, held) * 1e6 * (1.0 - rng.f64()).ln()) as u64;
            let Some(Reverse(f)) = free.pop() else { break };
            let end = f.max(now) + service.max(1);
            free.push(Reverse(end));
            done.push(Reverse((end, now, held)));
        }
        let Some(Reverse((end, sent, in_flight))) = done.pop() else {
            break;
        };
        now = end;
        l.on_sample(&sample(
            t0 + Duration::from_nanos(now),
            Duration::from_nanos(end - sent),
            in_flight,
            false,
        ));
        if now >= next_report {
            path.push(l.limit());
            next_report += 100_000_000;
        }
    }
    path
}

#[path = "tests/envoy_app_limited_cap.rs"]
mod envoy_app_limited_cap;
#[path = "tests/envoy_flat_levels.rs"]
mod envoy_flat_levels;
#[path = "tests/envoy_futile_cut.rs"]
mod envoy_futile_cut;
#[path = "tests/envoy_knee_cap.rs"]
mod envoy_knee_cap;
#[path = "tests/envoy_levels.rs"]
mod envoy_levels;
#[path = "tests/envoy_live.rs"]
mod envoy_live;
#[path = "tests/envoy_once_per_rtt.rs"]
mod envoy_once_per_rtt;
#[path = "tests/envoy_proportional_growth.rs"]
mod envoy_proportional_growth;
#[path = "tests/envoy_slow_start_gain.rs"]
mod envoy_slow_start_gain;
#[path = "tests/envoy_small_limits.rs"]
mod envoy_small_limits;
#[path = "tests/envoy_start_cohort.rs"]
mod envoy_start_cohort;
#[path = "tests/envoy_throughput_ceiling.rs"]
mod envoy_throughput_ceiling;
#[path = "tests/envoy_unanswered.rs"]
mod envoy_unanswered;
#[path = "tests/envoy_unqueued_floor.rs"]
mod envoy_unqueued_floor;
