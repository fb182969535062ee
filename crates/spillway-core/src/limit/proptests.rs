//! Property tests: every algorithm stays within its bounds on any sample stream.

use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;
use crate::random::SeededRandom;

// ---------------------------------------------------------------- properties

fn any_rtt() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        Just(Duration::from_nanos(u64::MAX)),
        (0u64..10_000_000_000).prop_map(Duration::from_nanos),
        (0u64..100_000).prop_map(Duration::from_micros),
    ]
}

fn any_stream() -> impl Strategy<Value = Vec<(u64, Duration, usize, bool)>> {
    prop::collection::vec(
        (
            prop_oneof![0u64..1_000, 0u64..200_000_000, Just(90_000_000_000)],
            any_rtt(),
            prop_oneof![0usize..2_000, Just(usize::MAX)],
            any::<bool>(),
        ),
        0..400,
    )
}

fn configs(min: usize, span: usize, seed: u64) -> Vec<LimitConfig> {
    let max = min + span;
    vec![
        LimitConfig::Fixed(FixedConfig { limit: min }),
        LimitConfig::Aimd(AimdConfig {
            initial_limit: min,
            min_limit: min,
            max_limit: max,
            ..Default::default()
        }),
        LimitConfig::Gradient2(Gradient2Config {
            initial_limit: max,
            min_limit: min,
            max_limit: max,
            queue_size: if seed & 1 == 0 {
                QueueSize::SquareRoot
            } else {
                QueueSize::Fixed(4)
            },
            ..Default::default()
        }),
        LimitConfig::EnvoyGradient(EnvoyGradientConfig {
            min_concurrency: min,
            max_concurrency_limit: max,
            request_count: 3,
            interval: Duration::from_millis(500),
            ..Default::default()
        }),
    ]
}

proptest! {
    #[test]
    fn every_limit_stays_within_bounds_on_any_stream(
        stream in any_stream(),
        min in 1usize..50,
        span in 0usize..500,
        seed in any::<u64>(),
    ) {
        let t0 = Instant::now();
        for cfg in configs(min, span, seed) {
            prop_assert!(cfg.validate().is_ok());
            let mut l = cfg.build_with_random(t0, Box::new(SeededRandom::new(seed)));
            let mut now = t0;
            for &(advance_ns, rtt, in_flight, dropped) in &stream {
                now += Duration::from_nanos(advance_ns);
                l.on_sample(&Sample { rtt, in_flight, dropped, now });
                let limit = l.limit();
                prop_assert!(limit >= 1, "{} limit 0", l.name());
                prop_assert!(limit >= min && limit <= min + span,
                    "{} limit {} outside [{}, {}]", l.name(), limit, min, min + span);
            }
        }
    }

    #[test]
    fn gradient2_estimate_is_never_nan(stream in any_stream()) {
        let mut l = Gradient2Limit::new(&Gradient2Config {
            min_limit: 1,
            initial_limit: 1,
            ..Default::default()
        }).unwrap();
        let mut now = Instant::now();
        for &(advance_ns, rtt, in_flight, dropped) in &stream {
            now += Duration::from_nanos(advance_ns);
            l.on_sample(&Sample { rtt, in_flight, dropped, now });
            prop_assert!(l.estimate().is_finite());
            prop_assert!(l.long_rtt_nanos().is_finite());
        }
    }
}
