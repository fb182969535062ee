//! `proportional_growth` of the Envoy gradient controller: a window of fewer answers than a
//! measurement grows the limit by that share of the gradient's step; cuts are whole.

use super::*;

/// A controller at `initial` with minRTT fixed at 10 ms and windows of 100 ms, judged on 20
/// answers.
fn limit(proportional_growth: bool, initial: usize) -> (EnvoyGradientLimit, Instant) {
    let t0 = Instant::now();
    let cfg = EnvoyGradientConfig {
        fixed_min_rtt: Some(10 * MS),
        request_count: 20,
        initial_limit: Some(initial),
        proportional_growth,
        ..envoy_cfg()
    };
    let l = EnvoyGradientLimit::new(&cfg, t0, Box::new(FixedRandom(0.0))).expect("valid config");
    (l, t0)
}

/// The window opened at `start_ms` gets `answers` answers of `rtt_ms` (within its first 90
/// ms), then one sample at `start_ms + 100` closes it; returns the limit after that.
fn window(
    l: &mut EnvoyGradientLimit,
    t0: Instant,
    start_ms: u64,
    answers: u64,
    rtt_ms: u64,
) -> usize {
    for i in 0..answers {
        let now = start_ms + rtt_ms + i * (90 - rtt_ms.min(89)) / answers.max(1);
        l.on_sample(&sample(
            at(t0, now),
            Duration::from_millis(rtt_ms),
            l.limit(),
            false,
        ));
    }
    l.on_sample(&sample(
        at(t0, start_ms + 100),
        Duration::from_millis(rtt_ms),
        l.limit(),
        false,
    ));
    l.limit()
}

#[test]
fn a_thin_window_grows_by_its_share_of_the_step() {
    // At minRTT the gradient is 1.25 (less the histogram's rounding of the median):
    // 20 → 25 + √25.
    let (mut envoy, t0) = limit(false, 20);
    let whole = window(&mut envoy, t0, 0, 5, 10);
    assert!(
        (27..=30).contains(&whole),
        "Envoy: the whole step on 5 answers, {whole}"
    );
    // 5 of the 20 answers a measurement takes: a quarter of the step, rounded up.
    let (mut l, t0) = limit(true, 20);
    let quarter = 20 + (whole - 20).div_ceil(4);
    assert_eq!(window(&mut l, t0, 0, 5, 10), quarter);
    assert!(quarter < whole);
    // One answer still grows by one slot.
    let (mut l, t0) = limit(true, 20);
    assert_eq!(window(&mut l, t0, 0, 1, 10), 21);
}

#[test]
fn a_window_with_a_measurement_grows_by_the_whole_step() {
    let (mut envoy, t0) = limit(false, 20);
    let whole = window(&mut envoy, t0, 0, 20, 10);
    assert!(whole > 25, "{whole}");
    // 20 answers within the window (the one that closes it counts in the next).
    let (mut l, t0) = limit(true, 20);
    assert_eq!(window(&mut l, t0, 0, 20, 10), whole);
}

#[test]
fn cuts_are_not_scaled() {
    // 30 ms against a tolerance of 12.5 ms: the gradient bottoms out at 0.5, 20 → 10 + √10.
    let (mut envoy, t0) = limit(false, 20);
    let cut = window(&mut envoy, t0, 0, 3, 30);
    assert_eq!(cut, 13);
    let (mut l, t0) = limit(true, 20);
    assert_eq!(
        window(&mut l, t0, 0, 3, 30),
        cut,
        "a thin window cuts as much"
    );
}

/// The zero-config gradient (without the throughput ceiling and the floor that reads it) in
/// front of 20 FIFO workers that slow by held / workers past them, exponential 50 ms: the
/// highest limit after the first two seconds, over seeds 28–33.
fn thrashing_peaks(proportional_growth: bool) -> Vec<usize> {
    (28..34)
        .map(|seed| {
            let t0 = Instant::now();
            let cfg = EnvoyGradientConfig {
                throughput_ceiling: false,
                unqueued_floor: false,
                proportional_growth,
                ..zero_config_envoy()
            };
            let mut l =
                EnvoyGradientLimit::new(&cfg, t0, Box::new(FixedRandom(0.0))).expect("valid");
            l.on_sample(&sample(t0, 40 * MS, 1, false));
            let mean = |_sent_ns, held: usize| 50.0 * (held as f64 / 20.0).max(1.0);
            let path = super::saturated_upstream_seeded(&mut l, t0, 20, mean, 8000.0, seed);
            path[20..].iter().copied().max().unwrap_or(0)
        })
        .collect()
}

#[test]
fn the_gradient_probes_a_thrashing_upstream_less_far() {
    // Each probe past the knee is a queue that every request behind it waits in; by whole
    // steps the peaks were 40–81, by the share of a measurement 28–53.
    let whole = thrashing_peaks(false);
    let share = thrashing_peaks(true);
    for (s, w) in share.iter().zip(&whole) {
        assert!(s < w, "{share:?} / {whole:?}");
    }
}
