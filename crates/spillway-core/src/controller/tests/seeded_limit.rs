//! A controller built with a seeded random source for its limit is reproducible: the Envoy
//! gradient's jittered minRTT windows (the only randomness in a limit) follow the seed.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::clock::ManualClock;
use crate::criticality::{Criticality, PerCriticality};
use crate::limit::EnvoyGradientConfig;
use crate::limit::LimitConfig;
use crate::random::{FixedRandom, SeededRandom};
use crate::shed::ShedConfig;

/// The Envoy gradient with short, fully jittered minRTT windows (1–2 s apart) and no shedding,
/// so a 40 s run sees many windows whose timing depends on the random draws.
fn envoy_config() -> AdmissionConfig {
    AdmissionConfig {
        limit: LimitConfig::EnvoyGradient(EnvoyGradientConfig {
            interval: Duration::from_secs(1),
            request_count: 5,
            jitter: 1.0,
            update_interval: Duration::from_millis(20),
            ..EnvoyGradientConfig::default()
        }),
        shed: ShedConfig {
            thresholds: PerCriticality([None; Criticality::COUNT]),
            ramp: 0.1,
        },
        ..AdmissionConfig::default()
    }
}

/// The limit after each of 3000 identical sequential requests (latency 10–16 ms, fixed pattern).
fn trajectory(seed: u64) -> Vec<usize> {
    let clock = ManualClock::new();
    let ctl = AdmissionController::with_limit_random(
        envoy_config(),
        Arc::new(clock.clone()),
        Box::new(SeededRandom::new(seed)),
    )
    .expect("valid config")
    .with_random(Arc::new(FixedRandom(0.5)));
    let mut limits = Vec::with_capacity(3000);
    for i in 0..3000u64 {
        let req = AdmissionRequest::new("alice", Criticality::Critical);
        let Admission::Admitted(mut p) = ctl.admit(&req) else {
            panic!("a lone request is admitted");
        };
        clock.advance(Duration::from_millis(10 + i % 7));
        p.set_outcome(Outcome::Success);
        drop(p);
        limits.push(ctl.snapshot().limit);
    }
    limits
}

#[test]
fn same_seed_same_limit_trajectory() {
    let a = trajectory(7);
    assert_eq!(a, trajectory(7), "same seed, same samples: same limits");
    // The seed really reaches the limit: another one moves the minRTT windows.
    assert_ne!(a, trajectory(8), "a different seed changes the trajectory");
    assert!(
        a.iter().any(|&l| l > 3),
        "the limit left its minRTT pin: {a:?}"
    );
}
