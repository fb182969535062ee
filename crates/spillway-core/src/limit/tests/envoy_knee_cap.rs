//! `knee_cap`: on a large upstream kept saturated (and the overload sustained, as the
//! controller would report it), the limit stays near what its workers can run (Little's law)
//! instead of where the median reaches the gradient's tolerance; latency that a cut does not
//! bring down is taken as the upstream's and left to the gradient. Without sustained overload
//! the cap does not apply.

use super::*;

/// The zero-config gradient with `knee_cap` as given.
fn preset(knee_cap: bool) -> EnvoyGradientConfig {
    EnvoyGradientConfig {
        knee_cap,
        ..zero_config_envoy()
    }
}

/// A saturated upstream of `workers` FIFO workers with exponential service of mean `mean_ms`
/// (times `slow.0` from `slow.1` ms on), behind a caller with more demand than any limit:
/// whenever fewer than the limit are in flight another request is sent. Runs until `until_ms`;
/// returns the limit every 100 ms.
fn saturated(
    l: &mut EnvoyGradientLimit,
    t0: Instant,
    workers: usize,
    mean_ms: f64,
    slow: (f64, f64),
    until_ms: f64,
) -> Vec<usize> {
    let mean = |sent_ns: u64, _held| {
        if sent_ns as f64 >= slow.1 * 1e6 {
            mean_ms * slow.0
        } else {
            mean_ms
        }
    };
    super::saturated_upstream(l, t0, workers, mean, until_ms)
}

#[test]
fn a_thousand_workers_kept_busy_are_not_given_a_queue() {
    let t0 = Instant::now();
    let run = |knee: bool| {
        let mut l =
            EnvoyGradientLimit::new(&preset(knee), t0, Box::new(FixedRandom(0.0))).expect("valid");
        // The cap holds while the controller reports sustained overload (a saturated caller).
        l.set_overloaded(true);
        // A first request alone measures minRTT, as at any start.
        l.on_sample(&sample(t0, 7 * MS, 1, false));
        let path = saturated(&mut l, t0, 1000, 10.0, (1.0, f64::INFINITY), 3000.0);
        (path, l.knee_caps())
    };
    let (with, caps) = run(true);
    let (without, _) = run(false);
    let tail = |p: &[usize]| *p[p.len() - 10..].iter().max().expect("ran");
    // Without the cap the gradient's tolerance (here its slack: 10 % of the 100 ms budget, a
    // whole service time) holds about twice the workers in flight.
    assert!(tail(&without) > 1500, "without: {without:?}");
    // With it: about a tenth of a service time's queue (1.1 × the workers, plus the
    // estimate's error), and never below what keeps them busy for long.
    assert!(tail(&with) <= 1300, "with: {with:?}");
    let low = *with[with.len() - 10..].iter().min().expect("ran");
    assert!(low >= 950, "with: {with:?}");
    assert!(caps > 0);
}

#[test]
fn the_cap_waits_for_sustained_overload_and_caps_the_lowest_share() {
    let t0 = Instant::now();
    let run = |knee: bool, overloaded: bool, share: f64| {
        let mut l =
            EnvoyGradientLimit::new(&preset(knee), t0, Box::new(FixedRandom(0.0))).expect("valid");
        l.set_overloaded(overloaded);
        l.set_lowest_share(share);
        l.on_sample(&sample(t0, 7 * MS, 1, false));
        saturated(&mut l, t0, 1000, 10.0, (1.0, f64::INFINITY), 3000.0)
    };
    // Until the controller reports sustained overload the gradient alone decides.
    assert_eq!(run(true, false, 0.8), run(false, false, 0.8));
    // Then the cap is on the lowest level's share of the limit: the limit sits higher by
    // the headroom the levels above it keep.
    let tail = |p: &[usize]| p[p.len() - 10..].iter().sum::<usize>();
    let (full, share) = (run(true, true, 1.0), run(true, true, 0.8));
    assert!(tail(&share) > tail(&full), "{share:?} vs {full:?}");
}

#[test]
fn an_upstream_that_got_slower_is_not_cut_to_nothing() {
    let t0 = Instant::now();
    let run = |knee: bool| {
        let mut l =
            EnvoyGradientLimit::new(&preset(knee), t0, Box::new(FixedRandom(0.0))).expect("valid");
        // The cap holds while the controller reports sustained overload (a saturated caller).
        l.set_overloaded(true);
        l.on_sample(&sample(t0, 7 * MS, 1, false));
        // At 1.5 s every request takes twice as long, queued or not: slower, not queueing.
        saturated(&mut l, t0, 1000, 10.0, (2.0, 1500.0), 4000.0)
    };
    let with = run(true);
    // The cap may cut once, then takes the slower latency as the upstream's: the 1000 workers
    // are still kept busy (the median limit over the last second at least 950).
    let mut last: Vec<usize> = with[with.len() - 10..].to_vec();
    last.sort_unstable();
    assert!(last[5] >= 950, "with {with:?}");
}
