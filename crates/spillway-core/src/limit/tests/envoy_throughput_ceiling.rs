//! `throughput_ceiling`: an upstream that delivers less when given more than its workers is
//! held near its workers; a plain FIFO upstream, which delivers the same past its knee, is
//! left to the gradient.

use super::*;

/// The zero-config gradient with `throughput_ceiling` as given.
fn preset(throughput_ceiling: bool) -> EnvoyGradientConfig {
    EnvoyGradientConfig {
        throughput_ceiling,
        // The ceiling alone: the preset's `unqueued_floor` reads the ceiling's levels, so with
        // it the paths with and without the ceiling would differ by the floor too.
        unqueued_floor: false,
        // And the gradient's whole steps, whose probes the ceiling is compared with: growing
        // by the share of a measurement, the gradient alone peaks at 34 here, not 54.
        proportional_growth: false,
        ..zero_config_envoy()
    }
}

/// `workers` FIFO workers with exponential service of mean `mean_ms`, each request slowed by
/// `held / workers` when more than `workers` are held (`thrash`; issue 28's `slowdown`
/// backend), behind a caller with more demand than any limit: whenever fewer than the limit
/// are in flight another request is sent. Runs until `until_ms`; returns the limit every
/// 100 ms.
fn saturated(
    l: &mut EnvoyGradientLimit,
    t0: Instant,
    workers: usize,
    mean_ms: f64,
    thrash: bool,
    until_ms: f64,
    seed: u64,
) -> Vec<usize> {
    let mean = |_sent_ns, held: usize| {
        if thrash {
            mean_ms * (held as f64 / workers as f64).max(1.0)
        } else {
            mean_ms
        }
    };
    super::saturated_upstream_seeded(l, t0, workers, mean, until_ms, seed)
}

/// The median of the last 20 limits of `path`.
fn settled(path: &[usize]) -> usize {
    let mut last = path[path.len().saturating_sub(20)..].to_vec();
    last.sort_unstable();
    last[last.len() / 2]
}

fn run(ceiling: bool, thrash: bool) -> (Vec<usize>, u64) {
    run_seeded(ceiling, thrash, 28)
}

fn run_seeded(ceiling: bool, thrash: bool, seed: u64) -> (Vec<usize>, u64) {
    let t0 = Instant::now();
    let mut l =
        EnvoyGradientLimit::new(&preset(ceiling), t0, Box::new(FixedRandom(0.0))).expect("valid");
    // A first request alone measures minRTT, as at any start.
    l.on_sample(&sample(t0, 40 * MS, 1, false));
    let path = saturated(&mut l, t0, 20, 50.0, thrash, 8000.0, seed);
    (path, l.throughput_caps())
}

#[test]
fn a_thrashing_upstream_is_held_near_its_workers() {
    let (with, caps) = run(true, true);
    let (without, none) = run(false, true);
    assert_eq!(none, 0);
    assert!(caps > 0, "with: {with:?}");
    // With the ceiling the limit sits near the 20 workers, past which each extra request
    // slows every other.
    assert!(settled(&with) <= 26, "with: {with:?}");
    assert!(settled(&with) >= 16, "with: {with:?}");
    // Once the cap has held, the limit probes above it by an eighth a window (`thrash.rs`);
    // the gradient's own probe doubles it, and without the ceiling it reached 54 here.
    let peak = |path: &[usize]| path[20..].iter().copied().max().unwrap_or(0);
    assert!(peak(&with) < 2 * settled(&with), "with: {with:?}");
    assert!(peak(&without) >= 2 * settled(&with), "without: {without:?}");
}

#[test]
fn a_plain_fifo_upstream_is_left_to_the_gradient() {
    // Delivery is flat past the knee: no level falls below another beyond the noise, and the
    // gradient decides. At this seed not one window is capped.
    let (with, caps) = run(true, false);
    let (without, _) = run(false, false);
    assert_eq!(caps, 0, "with: {with:?}");
    assert_eq!(with, without);
    // Over others a window now and then is, by chance (every pool above the best is judged
    // at two standard errors, window after window): one to three single windows in a third
    // of the runs, never the streak of four that is remembered and probed above gently, and
    // the limit settles where the gradient alone puts it, give or take the path taken.
    let mut capped = 0;
    for seed in 1..=10 {
        let (with, caps) = run_seeded(true, false, seed);
        let (without, _) = run_seeded(false, false, seed);
        assert!(caps < 4, "seed {seed}: {caps} caps, with: {with:?}");
        capped += usize::from(caps > 0);
        let (w, wo) = (settled(&with) as f64, settled(&without) as f64);
        assert!(
            (0.8..=1.25).contains(&(w / wo)),
            "seed {seed}: settled {w} with, {wo} without"
        );
    }
    assert!(capped <= 5, "{capped} of 10 runs capped at least once");
}
