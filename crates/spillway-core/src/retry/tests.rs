use super::*;
use crate::clock::{Clock, ManualClock};
use proptest::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const S: Duration = Duration::from_secs(1);
use RetryDecision::{GiveUp, Retry};

fn policy(cfg: RetryConfig) -> (RetryPolicy, ManualClock) {
    let clock = ManualClock::new();
    let p = RetryPolicy::new(cfg, clock.now()).expect("valid config");
    (p, clock)
}

fn requests(p: &RetryPolicy, now: Instant, n: u64) {
    for _ in 0..n {
        p.record_request(now);
    }
}

#[test]
fn defaults_are_documented_values() {
    let c = RetryConfig::default();
    assert_eq!(c.max_attempts, 3);
    assert_eq!(c.budget_ratio, 0.1);
    assert_eq!(c.min_retries_per_sec, 1.0);
    assert_eq!(c.window, Duration::from_secs(10));
    assert_eq!(c.buckets, 10);
    assert_eq!(c.widespread_ring, 8);
    assert_eq!(c.widespread_min_tasks, 2);
    assert_eq!(c.widespread_fraction, 0.5);
    assert_eq!(c.validate(), Ok(()));
}

#[test]
fn budget_allows_ten_percent_plus_the_floor() {
    let (p, clock) = policy(RetryConfig::default());
    let now = clock.now();
    requests(&p, now, 100);
    // 0.1 × 100 + 1/s × 10 s = 20 retries.
    assert_eq!(p.budget().allowance(now), 20.0);
    for i in 0..20 {
        assert_eq!(p.decide(now, &Failure::overloaded(1)), Retry, "retry {i}");
    }
    assert_eq!(
        p.decide(now, &Failure::overloaded(1)),
        GiveUp(RetryGate::Budget)
    );
    assert_eq!(p.budget().counts(now), (100, 20)); // the refusal took nothing
}

#[test]
fn a_quiet_client_still_gets_the_floor() {
    let cfg = RetryConfig {
        min_retries_per_sec: 0.3, // × 10 s = 3 retries per window
        ..RetryConfig::default()
    };
    let (p, clock) = policy(cfg);
    let now = clock.now();
    requests(&p, now, 5); // 0.1 × 5 = 0.5: alone, not one whole retry
    assert_eq!(p.budget().allowance(now), 3.5);
    for _ in 0..3 {
        assert_eq!(p.decide(now, &Failure::overloaded(1)), Retry);
    }
    assert_eq!(
        p.decide(now, &Failure::overloaded(1)),
        GiveUp(RetryGate::Budget)
    );
}

#[test]
fn no_floor_and_no_requests_means_no_retries() {
    let cfg = RetryConfig {
        min_retries_per_sec: 0.0,
        ..RetryConfig::default()
    };
    let (p, clock) = policy(cfg);
    assert_eq!(
        p.decide(clock.now(), &Failure::overloaded(1)),
        GiveUp(RetryGate::Budget)
    );
    requests(&p, clock.now(), 30); // 0.1 × 30 = 3.0000000000000004 in f64: exactly 3 retries
    for _ in 0..3 {
        assert_eq!(p.decide(clock.now(), &Failure::overloaded(1)), Retry);
    }
    assert_eq!(
        p.decide(clock.now(), &Failure::overloaded(1)),
        GiveUp(RetryGate::Budget)
    );
}

#[test]
fn budget_refills_as_the_window_slides() {
    let cfg = RetryConfig {
        min_retries_per_sec: 0.0,
        ..RetryConfig::default()
    };
    let (p, clock) = policy(cfg);
    requests(&p, clock.now(), 10); // 1 retry
    assert_eq!(p.decide(clock.now(), &Failure::overloaded(1)), Retry);
    clock.advance(S * 5);
    requests(&p, clock.now(), 10); // 20 requests, 1 retry: one more
    assert_eq!(p.decide(clock.now(), &Failure::overloaded(1)), Retry);
    assert_eq!(
        p.decide(clock.now(), &Failure::overloaded(1)),
        GiveUp(RetryGate::Budget)
    );
    clock.advance(S * 5); // t = 10 s: the first 10 requests and first retry expire
    assert_eq!(p.budget().counts(clock.now()), (10, 1));
    assert_eq!(
        p.decide(clock.now(), &Failure::overloaded(1)),
        GiveUp(RetryGate::Budget)
    );
    clock.advance(S * 5); // t = 15 s: everything expired
    assert_eq!(p.budget().counts(clock.now()), (0, 0));
}

#[test]
fn attempt_limit_counts_attempts_carried_in() {
    let (p, clock) = policy(RetryConfig::default());
    let now = clock.now();
    requests(&p, now, 1000);
    assert_eq!(p.decide(now, &Failure::overloaded(0)), Retry); // 0 is read as 1
    assert_eq!(p.decide(now, &Failure::overloaded(1)), Retry);
    assert_eq!(p.decide(now, &Failure::overloaded(2)), Retry); // the 3rd attempt may go
    assert_eq!(
        p.decide(now, &Failure::overloaded(3)),
        GiveUp(RetryGate::AttemptLimit)
    );
    // A request that arrived already on its 5th attempt from upstream is never retried here.
    assert_eq!(
        p.decide(now, &Failure::overloaded(5)),
        GiveUp(RetryGate::AttemptLimit)
    );
    assert_eq!(
        p.decide(now, &Failure::overloaded(u32::MAX)),
        GiveUp(RetryGate::AttemptLimit)
    );

    let (p, clock) = policy(RetryConfig {
        max_attempts: 1,
        ..RetryConfig::default()
    });
    assert_eq!(
        p.decide(clock.now(), &Failure::overloaded(1)),
        GiveUp(RetryGate::AttemptLimit)
    );
}

#[test]
fn markers_and_kinds_are_honoured_and_cost_no_budget() {
    let (p, clock) = policy(RetryConfig::default());
    let now = clock.now();
    assert_eq!(
        p.decide(now, &Failure::not_retryable(1)),
        GiveUp(RetryGate::NotRetryable)
    );
    assert_eq!(
        p.decide(now, &Failure::overloaded_dont_retry(1)),
        GiveUp(RetryGate::DontRetry)
    );
    let both = Failure {
        attempts_made: 9,
        dont_retry: true,
        retryable: false,
    };
    assert_eq!(p.decide(now, &both), GiveUp(RetryGate::NotRetryable)); // first gate wins
    let marked_and_spent = Failure::overloaded_dont_retry(9);
    assert_eq!(
        p.decide(now, &marked_and_spent),
        GiveUp(RetryGate::DontRetry)
    );
    assert_eq!(p.budget().counts(now), (0, 0));
}

#[test]
fn one_refusing_task_is_local_and_is_retried() {
    let (p, clock) = policy(RetryConfig::default());
    let now = clock.now();
    requests(&p, now, 100);
    for _ in 0..8 {
        p.record_outcome(now, 42, true);
    }
    assert_eq!(
        p.recent_tasks(),
        RecentTasks {
            distinct: 1,
            refusing: 1
        }
    );
    assert_eq!(p.decide(now, &Failure::overloaded(1)), Retry);
    // Three healthy tasks and one refusing: 1/4 < 0.5, still local.
    for t in [1, 2, 3] {
        p.record_outcome(now, t, false);
    }
    assert_eq!(
        p.recent_tasks(),
        RecentTasks {
            distinct: 4,
            refusing: 1
        }
    );
    assert_eq!(p.decide(now, &Failure::overloaded(1)), Retry);
}

#[test]
fn most_tasks_refusing_is_widespread() {
    let (p, clock) = policy(RetryConfig::default());
    let now = clock.now();
    requests(&p, now, 100);
    for t in [1, 2, 3, 4] {
        p.record_outcome(now, t, false);
    }
    p.record_outcome(now, 5, true);
    p.record_outcome(now, 6, true);
    p.record_outcome(now, 7, true);
    // 7 distinct tasks, 3 refusing: 3/7 < 0.5.
    assert_eq!(p.decide(now, &Failure::overloaded(1)), Retry);
    p.record_outcome(now, 8, true); // 8 distinct, 4 refusing: 4/8 >= 0.5
    assert!(p.is_widespread());
    assert_eq!(
        p.decide(now, &Failure::overloaded(1)),
        GiveUp(RetryGate::Widespread)
    );
    assert_eq!(
        p.budget().counts(now).1,
        1,
        "the widespread refusal spent no budget"
    );
    // Tasks 5..8 recover: their latest outcomes are accepts.
    for t in [5, 6, 7, 8] {
        p.record_outcome(now, t, false);
    }
    assert!(!p.is_widespread());
    assert_eq!(p.decide(now, &Failure::overloaded(1)), Retry);
}

#[test]
fn two_tasks_both_refusing_is_widespread() {
    let (p, clock) = policy(RetryConfig::default());
    requests(&p, clock.now(), 100);
    p.record_outcome(clock.now(), 1, true);
    p.record_outcome(clock.now(), 2, true);
    assert_eq!(
        p.decide(clock.now(), &Failure::overloaded(1)),
        GiveUp(RetryGate::Widespread)
    );
}

#[test]
fn gate_names_are_snake_case_labels() {
    let names: Vec<&str> = RetryGate::ALL.iter().map(|g| g.as_str()).collect();
    assert_eq!(
        names,
        [
            "not_retryable",
            "dont_retry",
            "attempt_limit",
            "widespread",
            "budget"
        ]
    );
    for g in RetryGate::ALL {
        assert_eq!(g.to_string(), g.as_str());
    }
    assert!(Retry.is_retry());
    assert!(!GiveUp(RetryGate::Budget).is_retry());
}

#[test]
fn invalid_configs_name_the_field() {
    let bad = |f: fn(&mut RetryConfig)| {
        let mut c = RetryConfig::default();
        f(&mut c);
        c.validate().expect_err("must be rejected").field
    };
    assert_eq!(bad(|c| c.max_attempts = 0), "retry.max_attempts");
    assert_eq!(bad(|c| c.max_attempts = 101), "retry.max_attempts");
    assert_eq!(bad(|c| c.budget_ratio = -0.1), "retry.budget_ratio");
    assert_eq!(bad(|c| c.budget_ratio = 1.5), "retry.budget_ratio");
    assert_eq!(bad(|c| c.budget_ratio = f64::NAN), "retry.budget_ratio");
    assert_eq!(
        bad(|c| c.min_retries_per_sec = -1.0),
        "retry.min_retries_per_sec"
    );
    assert_eq!(
        bad(|c| c.min_retries_per_sec = f64::INFINITY),
        "retry.min_retries_per_sec"
    );
    assert_eq!(bad(|c| c.window = Duration::ZERO), "retry.window");
    assert_eq!(
        bad(|c| c.window = Duration::from_secs(3601)),
        "retry.window"
    );
    assert_eq!(bad(|c| c.window = Duration::from_nanos(5)), "retry.window");
    assert_eq!(bad(|c| c.buckets = 0), "retry.buckets");
    assert_eq!(bad(|c| c.buckets = 3601), "retry.buckets");
    assert_eq!(bad(|c| c.widespread_ring = 0), "retry.widespread_ring");
    assert_eq!(bad(|c| c.widespread_ring = 65), "retry.widespread_ring");
    assert_eq!(
        bad(|c| c.widespread_min_tasks = 0),
        "retry.widespread_min_tasks"
    );
    assert_eq!(
        bad(|c| c.widespread_min_tasks = 9),
        "retry.widespread_min_tasks"
    );
    assert_eq!(
        bad(|c| c.widespread_fraction = 0.0),
        "retry.widespread_fraction"
    );
    assert_eq!(
        bad(|c| c.widespread_fraction = 1.01),
        "retry.widespread_fraction"
    );
    assert_eq!(
        bad(|c| c.widespread_fraction = f64::NAN),
        "retry.widespread_fraction"
    );
    let err = RetryPolicy::new(
        RetryConfig {
            max_attempts: 0,
            ..RetryConfig::default()
        },
        Instant::now(),
    )
    .expect_err("rejected");
    assert!(err.to_string().contains("retry.max_attempts"), "{err}");
}

#[test]
fn types_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<RetryPolicy>();
    check::<RetryBudget>();
    check::<RetryConfig>();
    check::<RetryDecision>();
}

#[test]
fn concurrent_spending_never_overspends() {
    const THREADS: u64 = 4;
    const OPS: u64 = 100_000;
    let (p, clock) = policy(RetryConfig::default());
    let p = Arc::new(p);
    let now = clock.now() + S * 3;
    requests(&p, now, 100_000); // allowance: 0.1 × 100 000 + 10 = 10 010
    let cap = 10_010u64;
    let spent = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (p, spent) = (Arc::clone(&p), Arc::clone(&spent));
            std::thread::spawn(move || {
                for _ in 0..OPS {
                    if p.decide(now, &Failure::overloaded(1)).is_retry() {
                        spent.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("worker panicked");
    }
    let spent = spent.load(Ordering::Relaxed);
    assert!(spent <= cap, "over-spent: {spent} > {cap}");
    // Under-spend is bounded by the racing callers (see budget.rs): at most THREADS − 1.
    assert!(spent + THREADS > cap, "under-spent: {spent}");
    assert_eq!(p.budget().counts(now), (100_000, spent));
}

#[test]
fn concurrent_requests_and_retries_stay_within_budget() {
    const THREADS: u64 = 4;
    const OPS: u64 = 100_000;
    let (p, clock) = policy(RetryConfig::default());
    let p = Arc::new(p);
    let now = clock.now() + S * 3;
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let p = Arc::clone(&p);
            std::thread::spawn(move || {
                let mut spent = 0u64;
                for i in 0..OPS {
                    if i % 2 == 0 {
                        p.record_request(now);
                    } else if p.decide(now, &Failure::overloaded(1)).is_retry() {
                        spent += 1;
                    }
                }
                spent
            })
        })
        .collect();
    let spent: u64 = handles
        .into_iter()
        .map(|h| h.join().expect("worker panicked"))
        .sum();
    let (reqs, retries) = p.budget().counts(now);
    assert_eq!(reqs, THREADS * OPS / 2);
    assert_eq!(retries, spent);
    // Each retry was checked against an allowance no larger than the final one.
    assert!(
        spent as f64 <= p.budget().allowance(now),
        "{spent} retries for {reqs} requests"
    );
    assert!(spent > 0);
}

#[derive(Debug, Clone)]
enum Op {
    Request,
    Retry,
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => Just(Op::Request),
        4 => Just(Op::Retry),
        1 => (1u64..4_000).prop_map(Op::Advance),
    ]
}

proptest! {
    /// Any sequence of requests, retry attempts and time advances: every retry granted leaves
    /// retries_in_window <= ratio × requests_in_window + floor, and the policy grants exactly
    /// when an independent model of the sliding window says the next retry fits.
    #[test]
    fn retries_never_exceed_budget_plus_floor(
        ops in proptest::collection::vec(op(), 1..400),
        ratio in prop_oneof![Just(0.0), Just(0.1), Just(0.25), 0.0f64..1.0],
        floor in prop_oneof![Just(0.0), Just(0.1), Just(1.0), 0.0f64..3.0],
    ) {
        let cfg = RetryConfig {
            budget_ratio: ratio,
            min_retries_per_sec: floor,
            ..RetryConfig::default()
        };
        let (p, clock) = policy(cfg);
        let t0 = clock.now();
        let slice = |now: Instant| (now - t0).as_millis() as u64 / 1_000; // 10 buckets of 1 s
        let in_window = |events: &[u64], s: u64| events.iter().filter(|&&e| s - e < 10).count() as u64;
        let (mut req_at, mut retry_at) = (Vec::new(), Vec::new());
        for op in ops {
            let now = clock.now();
            match op {
                Op::Request => {
                    p.record_request(now);
                    req_at.push(slice(now));
                }
                Op::Retry => {
                    let s = slice(now);
                    let (reqs, retries) = (in_window(&req_at, s), in_window(&retry_at, s));
                    let fits = (retries + 1) as f64 <= ratio * reqs as f64 + floor * 10.0 + 1e-9;
                    let decision = p.decide(now, &Failure::overloaded(1));
                    prop_assert_eq!(decision.is_retry(), fits, "reqs {} retries {}", reqs, retries);
                    if decision.is_retry() {
                        retry_at.push(s);
                        let (r, q) = (p.budget().counts(now).1, p.budget().counts(now).0);
                        prop_assert!(r as f64 <= ratio * q as f64 + floor * 10.0 + 1e-9);
                    }
                }
                Op::Advance(ms) => clock.advance(Duration::from_millis(ms)),
            }
            let s = slice(clock.now());
            prop_assert_eq!(p.budget().counts(clock.now()), (in_window(&req_at, s), in_window(&retry_at, s)));
        }
    }

    /// The non-budget gates hold for any failure, whatever the ring holds.
    #[test]
    fn gates_hold_for_any_failure(
        attempts in any::<u32>(),
        dont_retry in any::<bool>(),
        retryable in any::<bool>(),
        outcomes in proptest::collection::vec((0u64..6, any::<bool>()), 0..20),
    ) {
        let (p, clock) = policy(RetryConfig::default());
        let now = clock.now();
        requests(&p, now, 1_000);
        for (task, refused) in outcomes {
            p.record_outcome(now, task, refused);
        }
        let d = p.decide(now, &Failure { attempts_made: attempts, dont_retry, retryable });
        if d.is_retry() {
            prop_assert!(retryable && !dont_retry && attempts < 3 && !p.is_widespread());
        }
        let expected = if !retryable {
            Some(RetryGate::NotRetryable)
        } else if dont_retry {
            Some(RetryGate::DontRetry)
        } else if attempts >= 3 {
            Some(RetryGate::AttemptLimit)
        } else if p.is_widespread() {
            Some(RetryGate::Widespread)
        } else {
            None
        };
        prop_assert_eq!(d, expected.map_or(Retry, GiveUp));
    }
}
