//! The retry budget over one [`Windowed<2>`] against the budget as it was before the sixth
//! round — two separate counters, one per count (here two [`Windowed<1>`]) — as the model:
//! for any configuration and any forward sequence of requests, retries and silences
//! (including silences long enough to wrap the pair's 16-bit round tags), both decide every retry alike and report the same
//! counts and allowance at every step.

use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::{RetryBudget, ROUNDING_SLACK};
use crate::retry::RetryConfig;
use crate::window::Windowed;

/// The budget before the sixth round, verbatim but for its name and its two counters' type.
struct Model {
    requests: Windowed<1>,
    retries: Windowed<1>,
    ratio: f64,
    floor: f64,
}

impl Model {
    fn new(cfg: &RetryConfig, origin: Instant) -> Self {
        Model {
            requests: Windowed::new(cfg.window, cfg.buckets, origin),
            retries: Windowed::new(cfg.window, cfg.buckets, origin),
            ratio: cfg.budget_ratio,
            floor: cfg.min_retries_per_sec * cfg.window.as_secs_f64(),
        }
    }
    fn record_request(&self, now: Instant) {
        self.requests.add(now, 0, 1);
    }
    fn allowance(&self, now: Instant) -> f64 {
        self.ratio * self.requests.sums(now)[0] as f64 + self.floor
    }
    fn counts(&self, now: Instant) -> (u64, u64) {
        (self.requests.sums(now)[0], self.retries.sums(now)[0])
    }
    fn try_spend(&self, now: Instant) -> bool {
        let Some(landed) = self.retries.add_landed(now, 0, 1) else {
            return false;
        };
        let with_ours = self.retries.sums(now)[0];
        if with_ours as f64 <= self.allowance(now) + ROUNDING_SLACK {
            true
        } else {
            self.retries.take_back(landed, 0, 1);
            false
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Request,
    Spend,
    Read,
    /// Advance by this many nanoseconds.
    Advance(u64),
    /// Advance by this many windows and a fraction of one (silences).
    Silence(u32, u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => Just(Op::Request),
        6 => Just(Op::Spend),
        2 => Just(Op::Read),
        4 => (0u64..3_000_000_000).prop_map(Op::Advance),
        1 => (prop_oneof![Just(1u32), Just(2), Just(16_383), Just(16_384), Just(65_535),
                          Just(65_536), Just(65_537), 0u32..200_000], 0u64..1_000)
            .prop_map(|(w, f)| Op::Silence(w, f)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn decides_and_counts_as_the_two_counter_budget(
        ops in proptest::collection::vec(op(), 1..300),
        window_ms in prop_oneof![Just(10_000u64), 1u64..20_000],
        buckets in prop_oneof![Just(10usize), 1usize..24],
        ratio in prop_oneof![Just(0.0), Just(0.1), 0.0f64..1.0],
        per_sec in prop_oneof![Just(0.0), Just(1.0), 0.0f64..5.0],
    ) {
        let cfg = RetryConfig {
            budget_ratio: ratio,
            min_retries_per_sec: per_sec,
            window: Duration::from_millis(window_ms),
            buckets,
            ..RetryConfig::default()
        };
        prop_assume!(cfg.validate().is_ok());
        let t0 = Instant::now();
        let (budget, model) = (RetryBudget::new(&cfg, t0), Model::new(&cfg, t0));
        let mut now = t0;
        for (i, op) in ops.into_iter().enumerate() {
            match op {
                Op::Request => {
                    budget.record_request(now);
                    model.record_request(now);
                }
                Op::Spend => {
                    prop_assert_eq!(budget.try_spend(now), model.try_spend(now), "op {}", i);
                }
                Op::Read => {}
                Op::Advance(ns) => now += Duration::from_nanos(ns),
                Op::Silence(w, f) => {
                    now += cfg.window * w + cfg.window.mul_f64(f as f64 / 1_000.0);
                }
            }
            prop_assert_eq!(budget.counts(now), model.counts(now), "op {}", i);
            prop_assert_eq!(budget.allowance(now), model.allowance(now), "op {}", i);
        }
    }
}

/// A reservation taken back leaves the other count and other rounds alone, takes no more
/// than it added, and nothing once its bucket was reused for a later round.
#[test]
fn take_back_only_touches_its_own_count_and_round() {
    const S: Duration = Duration::from_secs(1);
    let t0 = Instant::now();
    let p = Windowed::<2>::new(S * 10, 10, t0);
    p.add(t0, 0, 5);
    let landed = p.add_landed(t0, 1, 3).expect("n > 0 lands");
    assert_eq!(landed.added(), 3);
    p.take_back(landed, 1, 1);
    assert_eq!(p.sums(t0), [5, 2]);
    p.add(t0, 1, 4);
    p.take_back(landed, 1, 10); // at most the 3 it added
    assert_eq!(p.sums(t0), [5, 3]);
    assert_eq!(p.add_landed(t0, 1, 0), None);
    assert_eq!(p.add_landed(t0, 2, 1), None);
    let old = p.add_landed(t0, 1, 1).expect("lands");
    p.add(t0 + S * 10, 1, 4); // bucket 0, the next round: the round-0 events are gone
    p.take_back(old, 1, 1); // must not eat a newer round's event
    assert_eq!(p.sums(t0 + S * 10), [0, 4]);
}

/// A slice full of retries refuses the next one rather than spending it uncounted.
#[test]
fn a_full_slice_refuses_the_retry() {
    let t0 = Instant::now();
    let cfg = RetryConfig {
        min_retries_per_sec: 1e9,
        ..RetryConfig::default()
    };
    let budget = RetryBudget::new(&cfg, t0);
    budget.counts.add(t0, 1, Windowed::<2>::MAX_SLICE_COUNT - 1);
    assert!(budget.try_spend(t0), "the last one that fits the slice");
    assert!(!budget.try_spend(t0), "the slice is full");
    assert_eq!(budget.counts(t0).1, Windowed::<2>::MAX_SLICE_COUNT);
}
