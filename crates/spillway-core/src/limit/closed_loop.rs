//! Closed-loop simulations: the limit drives the latency it then observes.
//!
//! Model: a server with `CAPACITY` parallel slots and service time `BASE`; demand is unbounded,
//! so `limit` requests are always in flight and, by Little's law, each takes
//! `BASE · max(1, limit / CAPACITY)`. Completions arrive `rtt / limit` apart. Deterministic: no
//! randomness except the Envoy jitter, which is seeded.

use std::time::{Duration, Instant};

use super::*;
use crate::random::SeededRandom;

const CAPACITY: f64 = 50.0;
const BASE_NS: f64 = 10e6;

/// Runs `samples` completions and returns the limit after each.
fn run(cfg: &LimitConfig, samples: usize) -> Vec<usize> {
    let t0 = Instant::now();
    let mut l = cfg.build_with_random(t0, Box::new(SeededRandom::new(7)));
    let mut now = t0;
    (0..samples)
        .map(|_| {
            let limit = l.limit();
            let rtt_ns = BASE_NS * (limit as f64 / CAPACITY).max(1.0);
            now += Duration::from_nanos((rtt_ns / limit as f64) as u64);
            l.on_sample(&Sample {
                rtt: Duration::from_nanos(rtt_ns as u64),
                in_flight: limit,
                dropped: false,
                now,
            });
            l.limit()
        })
        .collect()
}

#[test]
fn envoy_gradient_settles_near_capacity_when_latency_follows_the_limit() {
    let cfg = LimitConfig::EnvoyGradient(EnvoyGradientConfig::default());
    // About 40 simulated seconds: hundreds of 100 ms windows, no minRTT re-measurement yet.
    let path = run(&cfg, 150_000);
    let tail = &path[path.len() / 2..];
    let (lo, hi) = (
        tail.iter().copied().min().unwrap_or(0),
        tail.iter().copied().max().unwrap_or(0),
    );
    // Equilibrium: gradient·limit + √(gradient·limit) = limit with gradient = 1.25·CAPACITY/limit
    // (sampleRTT ∝ limit above capacity) gives a limit a little above 1.25·CAPACITY.
    assert!(lo >= CAPACITY as usize, "tail {lo}..{hi}");
    assert!(hi <= 2 * CAPACITY as usize, "tail {lo}..{hi}");
}

#[test]
fn gradient2_follows_slowly_rising_latency_up_to_max_limit() {
    // Known property of Gradient2 (Netflix concurrency-limits issue #137, PR #134 discussion):
    // the baseline is a moving average of the latency the limit itself causes, so when latency
    // rises smoothly with the limit the gradient stays at 1 and the queue allowance keeps
    // growing the limit until `max_limit`. `max_limit` is therefore a real capacity bound for
    // Gradient2, not a formality; Gradient2 reacts to *changes* in latency (see the step tests).
    let cfg = LimitConfig::Gradient2(Gradient2Config {
        max_limit: 400,
        ..Gradient2Config::default()
    });
    let path = run(&cfg, 20_000);
    assert_eq!(path.last().copied(), Some(400));
}

#[test]
fn envoy_gradient_with_the_futile_cut_rule_settles_as_without() {
    // Latency follows the limit here (the upstream is the bottleneck), so the rule of
    // `envoy/futile.rs` finds every cut effective and changes nothing.
    let cfg = |rule| {
        LimitConfig::EnvoyGradient(EnvoyGradientConfig {
            one_change_per_rtt: true,
            rebaseline_on_futile_cut: rule,
            ..EnvoyGradientConfig::default()
        })
    };
    assert_eq!(run(&cfg(true), 150_000), run(&cfg(false), 150_000));
}

/// The zero-config preset's limit (live minRTT, no pinning, slack of the callers' budget).
fn preset(budget: Option<Duration>) -> LimitConfig {
    let mut cfg = crate::controller::AdmissionConfig::zero_config().limit;
    if let (LimitConfig::EnvoyGradient(c), None) = (&mut cfg, budget) {
        c.latency_slack = 0.0;
    }
    cfg
}

#[test]
fn the_preset_settles_near_capacity_when_latency_follows_the_limit() {
    // Budget 100 ms (no deadlines: the queue's max wait) against a 10 ms service: the slack
    // (a tenth of it, 10 ms) tolerates up to 20 ms, 2 × BASE, so the limit settles where
    // latency is about that, about twice CAPACITY, never at max_concurrency_limit.
    for budget in [None, Some(Duration::from_millis(100))] {
        let cfg = preset(budget);
        let t0 = Instant::now();
        let mut l = cfg.build_with_random(t0, Box::new(SeededRandom::new(7)));
        if let Some(b) = budget {
            l.set_latency_budget(b);
        }
        let mut now = t0;
        let mut tail = Vec::new();
        for i in 0..150_000 {
            let limit = l.limit();
            let rtt_ns = BASE_NS * (limit as f64 / CAPACITY).max(1.0);
            now += Duration::from_nanos((rtt_ns / limit as f64) as u64);
            l.on_sample(&Sample {
                rtt: Duration::from_nanos(rtt_ns as u64),
                in_flight: limit,
                dropped: false,
                now,
            });
            if i >= 75_000 {
                tail.push(l.limit());
            }
        }
        let (lo, hi) = (
            tail.iter().copied().min().unwrap_or(0),
            tail.iter().copied().max().unwrap_or(0),
        );
        let ceiling = if budget.is_some() { 3.0 } else { 2.0 };
        assert!(lo >= CAPACITY as usize, "{budget:?}: tail {lo}..{hi}");
        assert!(
            hi <= (ceiling * CAPACITY) as usize,
            "{budget:?}: tail {lo}..{hi}"
        );
    }
}
