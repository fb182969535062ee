//! `one_change_per_rtt` of the Envoy gradient controller: after a change, only requests started
//! after it may change the limit again.

use super::*;

/// Feeds one sample every 10 ms with `now` in `[from_ms, to_ms)`, each `rtt_ms` long; returns
/// the limit after each sample whenever it changed.
fn feed(
    l: &mut EnvoyGradientLimit,
    t0: Instant,
    from_ms: u64,
    to_ms: u64,
    rtt_ms: u64,
) -> Vec<usize> {
    let mut path = Vec::new();
    for now in (from_ms..to_ms).step_by(10) {
        let before = l.limit();
        l.on_sample(&sample(
            at(t0, now),
            Duration::from_millis(rtt_ms),
            before,
            false,
        ));
        if l.limit() != before {
            path.push(l.limit());
        }
    }
    path
}

#[test]
fn envoy_one_change_per_rtt_ignores_requests_started_before_the_change() {
    let t0 = Instant::now();
    let plain_cfg = EnvoyGradientConfig {
        interval: Duration::from_secs(3600),
        ..envoy_cfg()
    };
    let once_cfg = EnvoyGradientConfig {
        one_change_per_rtt: true,
        ..plain_cfg.clone()
    };
    let mut plain = envoy_measured(t0, &plain_cfg, Box::new(FixedRandom(0.0)));
    let mut once = envoy_measured(t0, &once_cfg, Box::new(FixedRandom(0.0)));
    // RTT (10 ms) shorter than a window (100 ms): every window has fresh samples, so both grow
    // the same way, window by window.
    let grow_plain = feed(&mut plain, t0, 100, 1000, 10);
    let grow_once = feed(&mut once, t0, 100, 1000, 10);
    assert_eq!(grow_plain, grow_once);
    assert!(grow_once.len() >= 7 && grow_once.windows(2).all(|w| w[1] > w[0]));
    // Now every request takes 300 ms (a queue built up under that limit). Until 1300 ms the
    // answers are of requests started before 1000 ms: before the last change, or at most
    // in the window it opened (which may still hold fast samples and grow the limit once).
    let top = *grow_once.last().expect("grew");
    let plain_path = feed(&mut plain, t0, 1000, 1300, 300);
    let once_path = feed(&mut once, t0, 1000, 1300, 300);
    // Envoy halves (plus √) every window on them: three decreases in 300 ms.
    let decreases = |path: &[usize], from: usize| {
        let mut last = from;
        path.iter()
            .filter(|&&x| {
                let down = x < last;
                last = x;
                down
            })
            .count()
    };
    assert!(decreases(&plain_path, top) >= 2, "{plain_path:?}");
    // With one change per RTT: no decrease, they predate the last change.
    assert_eq!(decreases(&once_path, top), 0, "{once_path:?}");
    assert!(once_path.len() <= 1, "{once_path:?}");
    // From 1300 ms answers come from requests started after that change: one decrease, then
    // nothing until requests started after *it* answer (300 ms later) — one per RTT.
    let high = once.limit();
    let path = feed(&mut once, t0, 1300, 1700, 300);
    assert_eq!(path.len(), 1, "{path:?}");
    assert!(path[0] < high);
    let path = feed(&mut once, t0, 1700, 2100, 300);
    assert_eq!(path.len(), 1, "{path:?}");
}

/// With one change per RTT, a window that closes sooner after a change than the latency that
/// prompted it holds only the answers that beat that latency: it may cut, and grow by one at
/// most.
#[test]
fn envoy_one_change_per_rtt_grows_by_one_at_most_on_the_answers_that_beat_the_rest() {
    let t0 = Instant::now();
    let cfg = EnvoyGradientConfig {
        interval: Duration::from_secs(3600),
        one_change_per_rtt: true,
        ..envoy_cfg()
    };
    let mut l = envoy_measured(t0, &cfg, Box::new(FixedRandom(0.0)));
    assert!(
        !feed(&mut l, t0, 100, 1000, 10).is_empty(),
        "grew at minRTT"
    );
    // Answers take 150 ms now; the first window of requests started after the last change
    // cuts, at `cut`.
    let high = l.limit();
    let mut cut = None;
    for now in (1160..1600).step_by(10) {
        l.on_sample(&sample(at(t0, now), 150 * MS, l.limit(), false));
        if l.limit() < high {
            cut = Some(now);
            break;
        }
    }
    let cut = cut.expect("the slow answers cut the limit");
    let low = l.limit();
    // The first answers of requests started after the cut are the fast ones (10 ms); the
    // window opened at the cut closes 100 ms later, before 150 ms have passed: one more at
    // most (the gradient alone doubles on them).
    for now in (cut + 20..=cut + 100).step_by(20) {
        l.on_sample(&sample(at(t0, now), 10 * MS, low, false));
    }
    assert_eq!(l.limit(), low + 1, "grew on the answers that beat the rest");
    // Answering that fast for longer than the cut's latency, they are the upstream's latency:
    // the window that closes then grows the limit.
    for now in (cut + 120..=cut + 300).step_by(20) {
        l.on_sample(&sample(at(t0, now), 10 * MS, l.limit(), false));
    }
    assert!(l.limit() > low + 1, "{} after {low}", l.limit());
}
