//! `unqueued_floor`: in front of a saturated FIFO upstream with an exponential service the
//! gradient's cuts on a window's chance median go less deep, and a thrashing upstream is still
//! held near its workers by the throughput ceiling, applied after the floor.

use super::*;

/// The zero-config gradient with `unqueued_floor` as given, growing by whole steps: the
/// floor's paths are compared seed by seed, and proportional growth moves both (with it the
/// floor still holds the lowest limit higher in sum, 166 against 129, but at seed 32 one slot
/// lower, 34 against 35).
fn preset(unqueued_floor: bool) -> EnvoyGradientConfig {
    EnvoyGradientConfig {
        unqueued_floor,
        proportional_growth: false,
        ..zero_config_envoy()
    }
}

/// The limit every 100 ms over 8 s in front of 20 FIFO workers with exponential service of
/// 50 ms (slowed by held / workers past them when `thrash`), and the cuts the floor held.
fn run(floor: bool, thrash: bool, seed: u64) -> (Vec<usize>, u64) {
    let t0 = Instant::now();
    let mut l =
        EnvoyGradientLimit::new(&preset(floor), t0, Box::new(FixedRandom(0.0))).expect("valid");
    // A first request alone measures minRTT, as at any start.
    l.on_sample(&sample(t0, 40 * MS, 1, false));
    let mean = |_sent_ns, held: usize| {
        if thrash {
            50.0 * (held as f64 / 20.0).max(1.0)
        } else {
            50.0
        }
    };
    let path = super::saturated_upstream_seeded(&mut l, t0, 20, mean, 8000.0, seed);
    (path, l.floor_holds())
}

/// The lowest limit after the first second (slow start).
fn lowest(path: &[usize]) -> usize {
    path.iter().skip(10).copied().min().unwrap_or(0)
}

#[test]
fn cuts_in_front_of_a_saturated_fifo_upstream_go_less_deep() {
    let (mut with_sum, mut without_sum) = (0, 0);
    for seed in 28..34 {
        let (with, holds) = run(true, false, seed);
        let (without, none) = run(false, false, seed);
        assert!(holds > 0, "seed {seed}");
        assert_eq!(none, 0);
        // The gradient alone went as low as 9, 19 and 22 for 20 workers (seeds 30, 33, 29).
        assert!(
            lowest(&with) >= lowest(&without),
            "seed {seed}: {with:?} / {without:?}"
        );
        with_sum += lowest(&with);
        without_sum += lowest(&without);
    }
    assert!(with_sum > without_sum, "{with_sum} / {without_sum}");
}

#[test]
fn a_thrashing_upstream_is_still_held_near_its_workers() {
    for seed in 28..34 {
        let (path, _) = run(true, true, seed);
        let mut last = path[path.len() - 20..].to_vec();
        last.sort_unstable();
        let settled = last[last.len() / 2];
        // Without the ceiling the gradient holds it past 30 (`envoy_throughput_ceiling`); the
        // ceiling alone at 19-24. The floor's levels hold it a little higher: 21-33.
        assert!((16..=34).contains(&settled), "seed {seed}: {path:?}");
    }
}
