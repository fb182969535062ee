//! `app_limited_growth`: a window that may grow the limit grows it to at most `f ×` its peak in
//! flight (Linux slow start: `cwnd < 2 * max_packets_out`), not by the full gradient.

use super::*;

#[test]
fn envoy_growth_is_capped_at_f_times_the_peak_in_flight() {
    let t0 = Instant::now();
    let cfg = EnvoyGradientConfig {
        interval: Duration::from_secs(3600),
        app_limited_growth: Some(2.0),
        ..envoy_cfg()
    };
    let mut l = envoy_measured(t0, &cfg, Box::new(FixedRandom(0.0)));
    // Grow the limit with every slot in use, at minRTT (10 ms).
    let mut w = 1u64;
    while l.limit() < 15 {
        let used = l.limit();
        envoy_window_at(&mut l, t0, 100 * w, 10, used);
        w += 1;
        assert!(w < 50, "the limit grows while used");
    }
    // Windows open at 50 ms (the end of the minRTT window) and every 100 ms after: this sample
    // closes the loop's last one (it may grow the limit once more) and opens the next; each
    // window below is closed by the first sample of the next call.
    l.on_sample(&sample(
        at(t0, 100 * w + 50),
        Duration::from_millis(5),
        1,
        false,
    ));
    let old = l.limit();
    // A queue drains: latency half of minRTT (gradient clamps at 2), with three quarters of the
    // limit in flight. Envoy's formula alone gives 2·old + √(2·old); the cap is 2 × the peak
    // in flight, 1.5·old.
    let peak = old * 3 / 4;
    envoy_window_at(&mut l, t0, 100 * w + 50, 5, peak);
    envoy_window_at(&mut l, t0, 100 * (w + 1) + 50, 5, 1);
    assert!(
        l.limit() > old && l.limit() <= 2 * peak,
        "{old} -> {} with {peak} in flight",
        l.limit()
    );
    // The next window is app-limited (1 in flight): no growth at all.
    let capped = l.limit();
    envoy_window_at(&mut l, t0, 100 * (w + 2) + 50, 5, 1);
    assert_eq!(l.limit(), capped);
    // With every slot in use the same latency may double it (the gradient's own bound).
    let mut used = envoy_measured(t0, &cfg, Box::new(FixedRandom(0.0)));
    for w in 1..=w {
        let n = used.limit();
        envoy_window_at(&mut used, t0, 100 * w, 10, n);
    }
    let before = used.limit();
    envoy_window_at(&mut used, t0, 100 * (w + 1), 5, before);
    envoy_window_at(&mut used, t0, 100 * (w + 2), 5, before);
    assert!(
        used.limit() >= 2 * before.min(capped),
        "{before} -> {}",
        used.limit()
    );
}
