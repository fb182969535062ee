use super::book::{Slot, SCAN_MAX_CUSTOMERS};
use super::units::to_ns;
use super::*;
use crate::criticality::Criticality;
use crate::criticality::Criticality::*;
use proptest::prelude::*;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Customers "a" and "b" at 2 cu/s each (one task, burst 1 s: capacity 2 cu), enforcing always.
fn two_customers(enforcement: QuotaEnforcement) -> (QuotaBook, Instant) {
    let t0 = Instant::now();
    let cfg = QuotaConfig {
        enforcement,
        ..QuotaConfig::default()
    }
    .with_customer("a", CustomerQuota::uniform(2.0))
    .with_customer("b", CustomerQuota::uniform(2.0));
    (QuotaBook::new(cfg, t0).expect("valid config"), t0)
}

fn balance(book: &QuotaBook, now: Instant, customer: &str, c: Criticality) -> f64 {
    book.usage(now, customer)[c].expect("limited").balance
}

#[test]
fn customer_over_quota_is_refused_while_another_within_quota_is_admitted() {
    let (book, t0) = two_customers(QuotaEnforcement::Always);
    assert!(book.try_charge(t0, "a", Critical, 1.0, true).is_ok());
    assert!(book.try_charge(t0, "a", Critical, 1.0, true).is_ok());
    // "a" has spent its 2 cu burst; 1 cu more needs 0.5 s of refill at 2 cu/s.
    let e = book.try_charge(t0, "a", Critical, 1.0, true).unwrap_err();
    assert_eq!(e.retry_after, ms(500));
    assert!(book.try_charge(t0, "b", Critical, 1.0, true).is_ok());
    assert!(book
        .try_charge(t0 + ms(500), "a", Critical, 1.0, true)
        .is_ok());
}

#[test]
fn global_quota_is_divided_among_tasks() {
    let t0 = Instant::now();
    let cfg = QuotaConfig {
        tasks: 5,
        ..QuotaConfig::default()
    }
    .with_customer("a", CustomerQuota::uniform(10.0));
    let book = QuotaBook::new(cfg, t0).unwrap();
    let u = book.usage(t0, "a")[Critical].unwrap();
    assert_eq!((u.rate, u.capacity, u.balance), (2.0, 2.0, 2.0));
    assert!(book.try_charge(t0, "a", Critical, 2.0, true).is_ok());
    assert!(book.try_charge(t0, "a", Critical, 0.1, true).is_err());
    // 0.5 s at 2 cu/s refills exactly 1 cu.
    assert!(book
        .try_charge(t0 + ms(500), "a", Critical, 1.0, true)
        .is_ok());
    assert!(book
        .try_charge(t0 + ms(500), "a", Critical, 0.001, true)
        .is_err());
}

#[test]
fn refund_lets_the_next_request_in() {
    let (book, t0) = two_customers(QuotaEnforcement::Always);
    let charge = book.try_charge(t0, "a", Critical, 2.0, true).unwrap();
    assert_eq!(charge.amount(), 2.0);
    assert!(book.try_charge(t0, "a", Critical, 1.0, true).is_err());
    book.settle(t0, charge, 1.0); // cost half the estimate: 1 cu back
    assert_eq!(balance(&book, t0, "a", Critical), 1.0);
    assert!(book.try_charge(t0, "a", Critical, 1.0, true).is_ok());
}

#[test]
fn extra_charge_delays_the_next_request() {
    let (book, t0) = two_customers(QuotaEnforcement::Always);
    let charge = book.try_charge(t0, "a", Critical, 1.0, true).unwrap();
    book.settle(t0, charge, 3.0); // 2 cu more than estimated: balance 2 − 3 = −1
    assert_eq!(balance(&book, t0, "a", Critical), -1.0);
    // Paying 1 cu needs a balance of 1: 2 cu of refill = 1 s.
    let e = book.try_charge(t0, "a", Critical, 1.0, true).unwrap_err();
    assert_eq!(e.retry_after, ms(1000));
    assert!(book
        .try_charge(t0 + ms(999), "a", Critical, 1.0, true)
        .is_err());
    assert!(book
        .try_charge(t0 + ms(1000), "a", Critical, 1.0, true)
        .is_ok());
}

#[test]
fn settle_at_the_estimate_changes_nothing_and_refunds_stop_at_capacity() {
    let (book, t0) = two_customers(QuotaEnforcement::Always);
    let c = book.try_charge(t0, "a", Critical, 0.3, true).unwrap();
    book.settle(t0, c, 0.3);
    assert!((balance(&book, t0, "a", Critical) - 1.7).abs() < 1e-9);
    // Refunding after the bucket refilled cannot lift it above capacity.
    book.settle(t0 + ms(2000), c, 0.0);
    assert_eq!(balance(&book, t0 + ms(2000), "a", Critical), 2.0);
}

#[test]
fn criticalities_have_separate_buckets() {
    let t0 = Instant::now();
    let cfg = QuotaConfig::default()
        .with_customer("a", CustomerQuota::uniform(2.0).with(CriticalPlus, None));
    let book = QuotaBook::new(cfg, t0).unwrap();
    assert!(book.try_charge(t0, "a", Sheddable, 2.0, true).is_ok());
    assert!(book.try_charge(t0, "a", Sheddable, 0.5, true).is_err());
    // SHEDDABLE's spending left CRITICAL's allowance intact.
    assert!(book.try_charge(t0, "a", Critical, 2.0, true).is_ok());
    assert!(book.try_charge(t0, "a", SheddablePlus, 2.0, true).is_ok());
    // Unlimited: never refused, costs nothing, and settling is a no-op.
    let c = book.try_charge(t0, "a", CriticalPlus, 1e12, true).unwrap();
    assert_eq!(c.amount(), 0.0);
    book.settle(t0, c, 1e15);
    assert!(book.try_charge(t0, "a", CriticalPlus, 1e12, true).is_ok());
    assert_eq!(book.usage(t0, "a")[CriticalPlus], None);
}

#[test]
fn unknown_customers_share_the_default_slot() {
    let t0 = Instant::now();
    let cfg = QuotaConfig {
        default_customer: CustomerQuota::uniform(2.0),
        ..QuotaConfig::default()
    }
    .with_customer("a", CustomerQuota::unlimited());
    let book = QuotaBook::new(cfg, t0).unwrap();
    assert!(book.try_charge(t0, "x", Critical, 2.0, true).is_ok());
    // "y" is a different unknown name but the same bucket, which "x" emptied.
    assert!(book.try_charge(t0, "y", Critical, 1.0, true).is_err());
    assert!(book.try_charge(t0, "", Critical, 1.0, true).is_err());
    assert!(book.try_charge(t0, "a", Critical, 100.0, true).is_ok());
    assert_eq!(book.usage(t0, "zzz"), book.usage(t0, "x"));
    assert!(book.is_configured("a") && !book.is_configured("x"));
    assert_eq!(book.customers().collect::<Vec<_>>(), ["a"]);
}

#[test]
fn default_config_never_refuses() {
    let t0 = Instant::now();
    let book = QuotaBook::new(QuotaConfig::default(), t0).unwrap();
    for _ in 0..10 {
        assert!(book.try_charge(t0, "anyone", Critical, 1e9, true).is_ok());
    }
    assert_eq!(book.customers().count(), 0);
}

#[test]
fn when_overloaded_charges_calm_use_but_refuses_only_under_overload() {
    let (book, t0) = two_customers(QuotaEnforcement::WhenOverloaded);
    for _ in 0..3 {
        assert!(book.try_charge(t0, "a", Critical, 2.0, false).is_ok());
    }
    // 6 cu charged against 2: the calm-period debt stops at −burst = −2.
    assert_eq!(balance(&book, t0, "a", Critical), -2.0);
    assert!(book.try_charge(t0, "a", Critical, 1.0, false).is_ok());
    // Now overloaded: paying 1 cu from −2 needs 3 cu of refill = 1.5 s.
    let e = book.try_charge(t0, "a", Critical, 1.0, true).unwrap_err();
    assert_eq!(e.retry_after, ms(1500));
    assert!(book
        .try_charge(t0 + ms(1500), "a", Critical, 1.0, true)
        .is_ok());
    assert!(book.try_charge(t0, "b", Critical, 1.0, true).is_ok());
}

#[test]
fn always_refuses_even_when_not_overloaded() {
    let (book, t0) = two_customers(QuotaEnforcement::Always);
    assert!(book.try_charge(t0, "a", Critical, 2.0, false).is_ok());
    let e = book.try_charge(t0, "a", Critical, 2.0, false).unwrap_err();
    assert_eq!(e.retry_after, ms(1000));
    assert!(
        book.try_charge(t0, "a", Critical, 2.0, false)
            .unwrap_err()
            .retry_after
            == ms(1000)
    );
}

#[test]
fn retry_after_is_capped_and_oversized_requests_wait_for_a_full_bucket() {
    let t0 = Instant::now();
    let cfg = QuotaConfig {
        enforcement: QuotaEnforcement::Always,
        ..QuotaConfig::default()
    }
    .with_customer("a", CustomerQuota::uniform(1.0))
    .with_customer("z", CustomerQuota::uniform(0.0));
    let book = QuotaBook::new(cfg, t0).unwrap();
    // Oversized (3 cu > 1 cu capacity) runs from a full bucket and leaves 2 cu of debt.
    let big = book.try_charge(t0, "a", Critical, 3.0, true).unwrap();
    assert_eq!(balance(&book, t0, "a", Critical), -2.0);
    // 0.1 cu needs the balance back at 0.1: 2.1 s; another oversized one waits for full: 3 s.
    let e = book.try_charge(t0, "a", Critical, 0.1, true).unwrap_err();
    assert_eq!(e.retry_after, ms(2100));
    let e = book.try_charge(t0, "a", Critical, 3.0, true).unwrap_err();
    assert_eq!(e.retry_after, ms(3000));
    // A wildly larger actual cost: debt stops at 60 s of quota below zero, and the wait at 60 s.
    book.settle(t0, big, 1e6);
    assert_eq!(balance(&book, t0, "a", Critical), -60.0);
    let e = book.try_charge(t0, "a", Critical, 1.0, true).unwrap_err();
    assert_eq!(e.retry_after, DEFAULT_MAX_RETRY_AFTER);
    // A zero quota refuses any positive cost while enforcing, with the longest wait.
    let e = book.try_charge(t0, "z", Critical, 0.001, true).unwrap_err();
    assert_eq!(e.retry_after, DEFAULT_MAX_RETRY_AFTER);
    assert!(book.try_charge(t0, "z", Critical, 0.0, true).is_ok());
    assert_eq!(book.usage(t0, "z")[Critical].unwrap().rate, 0.0);
}

#[test]
fn hostile_costs_neither_panic_nor_bypass() {
    let (book, t0) = two_customers(QuotaEnforcement::Always);
    for bad in [f64::NAN, -1.0, f64::NEG_INFINITY, -0.0] {
        let c = book.try_charge(t0, "a", Critical, bad, true).unwrap();
        assert_eq!(c.amount(), 0.0);
    }
    assert_eq!(balance(&book, t0, "a", Critical), 2.0);
    // Infinity runs only from a full bucket, leaving the maximum debt behind.
    let c = book
        .try_charge(t0, "a", Critical, f64::INFINITY, true)
        .unwrap();
    assert!(book
        .try_charge(t0, "a", Critical, f64::INFINITY, true)
        .is_err());
    assert_eq!(balance(&book, t0, "a", Critical), -120.0);
    book.settle(t0, c, f64::NAN); // NaN: the estimate stands
    assert_eq!(balance(&book, t0, "a", Critical), -120.0);
    book.settle(t0, c, -5.0); // negative: cost 0, everything refunded
    assert_eq!(balance(&book, t0, "a", Critical), 2.0);
    // Times before the origin count as the origin.
    assert!(book
        .try_charge(t0 - ms(10), "b", Critical, 1.0, true)
        .is_ok());
    let u = book.usage(t0, "a")[Critical].unwrap();
    assert!(u.balance.is_finite() && u.rate.is_finite() && u.capacity.is_finite());
}

#[test]
fn a_charge_from_another_book_is_ignored() {
    let (big, t0) = two_customers(QuotaEnforcement::Always);
    let small = QuotaBook::new(QuotaConfig::default(), t0).unwrap();
    let c = big.try_charge(t0, "b", Critical, 1.0, true).unwrap();
    small.settle(t0, c, 100.0);
    assert!(small.try_charge(t0, "b", Critical, 1e9, true).is_ok());
}

#[test]
fn config_errors_name_the_field_and_the_customer() {
    let err = |cfg: QuotaConfig| QuotaBook::new(cfg, Instant::now()).unwrap_err();
    let e = err(QuotaConfig {
        tasks: 0,
        ..QuotaConfig::default()
    });
    assert_eq!(e.field, "quota.tasks");
    let e = err(QuotaConfig {
        burst: Duration::ZERO,
        ..QuotaConfig::default()
    });
    assert_eq!(e.field, "quota.burst_ms");
    let e = err(QuotaConfig {
        max_retry_after: Duration::ZERO,
        ..QuotaConfig::default()
    });
    assert_eq!(e.field, "quota.max_retry_after_ms");
    for bad in [f64::NAN, -1.0, f64::INFINITY] {
        let e = err(QuotaConfig::default().with_customer(
            "acme",
            CustomerQuota::unlimited().with(Sheddable, Some(bad)),
        ));
        assert!(e.to_string().contains("acme.SHEDDABLE"), "{e}");
    }
    let e = err(QuotaConfig {
        default_customer: CustomerQuota::uniform(-2.0),
        ..QuotaConfig::default()
    });
    assert!(e.value.starts_with("default."), "{e}");
    let e = err(QuotaConfig::default()
        .with_customer("acme", CustomerQuota::uniform(1.0))
        .with_customer("acme", CustomerQuota::uniform(2.0)));
    assert!(e.to_string().contains("\"acme\""), "{e}");
    let e = err(QuotaConfig::default().with_customer("", CustomerQuota::uniform(1.0)));
    assert!(e.to_string().contains("non-empty"), "{e}");
    assert!(QuotaConfig::default().validate().is_ok());
}

#[test]
fn slots_stay_small() {
    // The memory bound in the module docs assumes this on 64-bit targets.
    if cfg!(target_pointer_width = "64") {
        assert!(
            // 4 buckets × (tat, rate, offered demand, arrivals, global quota) + the boxed name.
            std::mem::size_of::<Slot>() <= 176,
            "{}",
            std::mem::size_of::<Slot>()
        );
        assert!(std::mem::size_of::<QuotaCharge>() <= 24);
    }
}

#[test]
fn threads_charging_one_bucket_never_exceed_the_bound() {
    // 1000 cu/s, capacity 1000 cu, 1 cu per request costs exactly 1 ms of refill. Virtual time
    // advances 10 µs per attempt, shared by 4 threads, so `now` is non-monotonic across threads.
    let t0 = Instant::now();
    let cfg = QuotaConfig {
        enforcement: QuotaEnforcement::Always,
        ..QuotaConfig::default()
    }
    .with_customer("a", CustomerQuota::uniform(1000.0));
    let book = Arc::new(QuotaBook::new(cfg, t0).unwrap());
    let clock_us = Arc::new(AtomicU64::new(0));
    let admitted = Arc::new(AtomicUsize::new(0));
    const THREADS: u64 = 4;
    const ATTEMPTS: u64 = 10_000;
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (book, clock_us, admitted) = (book.clone(), clock_us.clone(), admitted.clone());
            std::thread::spawn(move || {
                for _ in 0..ATTEMPTS {
                    let us = clock_us.fetch_add(10, Ordering::SeqCst) + 10;
                    let now = t0 + Duration::from_micros(us);
                    if book.try_charge(now, "a", Critical, 1.0, true).is_ok() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("no panic");
    }
    let admitted = admitted.load(Ordering::Relaxed) as u64;
    // 400 ms of virtual time. Every admission advanced tat by 1 ms from 0, and none left it
    // beyond (latest now + 1 s), so at most 400 + 1000 admissions.
    let elapsed_ms = THREADS * ATTEMPTS * 10 / 1000;
    assert!(admitted <= elapsed_ms + 1000, "admitted {admitted}");
    // A stale `now` lags at most the whole 400 ms run, so the first refusal comes after at least
    // 1000 − 400 admissions.
    assert!(admitted >= 600 - 1, "admitted {admitted}");
    let later = t0 + ms(elapsed_ms + 2000);
    assert!(book.try_charge(later, "a", Critical, 1000.0, true).is_ok());
}

/// One step of the property test.
#[derive(Debug, Clone)]
struct Op {
    customer: usize,
    criticality: usize,
    estimate: f64,
    /// Actual cost as a multiple of the estimate, settled `settle_after` steps later;
    /// `None` = never settled (the estimate stands).
    actual_factor: Option<f64>,
    settle_after: usize,
    advance_ms: u64,
}

fn op() -> impl Strategy<Value = Op> {
    (
        0..3usize,
        0..4usize,
        0.0..3.0f64,
        prop::option::of(0.0..3.0f64),
        0..4usize,
        prop_oneof![Just(0u64), 0..1500u64],
    )
        .prop_map(
            |(customer, criticality, estimate, actual_factor, settle_after, advance_ms)| Op {
                customer,
                criticality,
                estimate,
                actual_factor,
                settle_after,
                advance_ms,
            },
        )
}

proptest! {
    #[test]
    fn to_ns_matches_ceil(cost in 0.0f64..1e12, ns_per_unit in 1e-3f64..1e12) {
        prop_assert_eq!(to_ns(cost, ns_per_unit), to_ns_with_ceil(cost, ns_per_unit));
    }

    /// While enforcing, for every bucket and every window of events i..=j ending in an admission
    /// of estimate e_j at time t_j:
    ///
    ///   Σ admitted estimates in i..=j + Σ (actual − estimate) settled in i..=j
    ///       ≤ r · (t_j − t_i) + B + max(0, e_j − B)
    ///
    /// (r = per-task rate, B = r × burst). Proof sketch: the balance is at most B before event i,
    /// gains at most r·(t_j − t_i) of refill, and an admission leaves it ≥ min(0, B − e_j); refunds
    /// capped at capacity and rounding up to whole nanoseconds only debit more. No debt is
    /// forgiven here: admissions need a balance >= 0 (or a full bucket), at most 4 settles are
    /// pending, each at most 6 cu extra, so debt stays under 26 cu, far from the 60 s floor.
    /// (`overloaded` is always true, so WhenOverloaded enforces.)
    #[test]
    fn admitted_cost_never_exceeds_quota_times_time_plus_burst(
        ops in prop::collection::vec(op(), 1..80)
    ) {
        let t0 = Instant::now();
        let cfg = QuotaConfig {
            tasks: 2,
            enforcement: QuotaEnforcement::WhenOverloaded,
            default_customer: CustomerQuota::uniform(6.0),
            ..QuotaConfig::default()
        }
        .with_customer("a", CustomerQuota::uniform(4.0))
        .with_customer("b", CustomerQuota::uniform(2.0));
        let book = QuotaBook::new(cfg, t0).unwrap();
        let names = ["a", "b", "someone-else"];
        let rates = [2.0, 1.0, 3.0]; // per task
        // Per (customer, criticality): events (time s, debit cu, Some(estimate) if an admission).
        let mut events: Vec<Vec<(f64, f64, Option<f64>)>> = vec![Vec::new(); 12];
        let mut pending: Vec<(usize, QuotaCharge, f64, usize)> = Vec::new();
        let mut now_ms = 0u64;
        for (step, o) in ops.iter().enumerate() {
            now_ms += o.advance_ms;
            let now = t0 + ms(now_ms);
            let t = now_ms as f64 / 1e3;
            let mut k = 0;
            while k < pending.len() {
                if pending[k].0 <= step {
                    let (_, charge, actual, key) = pending.swap_remove(k);
                    book.settle(now, charge, actual);
                    events[key].push((t, actual - charge.amount(), None));
                } else {
                    k += 1;
                }
            }
            let c = Criticality::ALL[o.criticality];
            let key = o.customer * 4 + o.criticality;
            if let Ok(charge) = book.try_charge(now, names[o.customer], c, o.estimate, true) {
                events[key].push((t, o.estimate, Some(o.estimate)));
                if let Some(f) = o.actual_factor {
                    pending.push((step + o.settle_after, charge, o.estimate * f, key));
                }
            }
        }
        for (key, ev) in events.iter().enumerate() {
            let r = rates[key / 4];
            let cap = r * 1.0;
            for j in 0..ev.len() {
                let Some(e_j) = ev[j].2 else { continue };
                let mut sum = 0.0;
                for i in (0..=j).rev() {
                    sum += ev[i].1;
                    let bound = r * (ev[j].0 - ev[i].0) + cap + (e_j - cap).max(0.0);
                    prop_assert!(sum <= bound + 1e-6,
                        "bucket {key}: events {i}..={j} debited {sum} > bound {bound}");
                }
            }
        }
        // Liveness: once every debt has been repaid, each bucket pays a full burst again.
        let later = t0 + ms(now_ms + 100_000);
        for (n, name) in names.iter().enumerate() {
            for c in Criticality::ALL {
                prop_assert!(book.try_charge(later, name, c, rates[n], true).is_ok());
            }
        }
    }
}

#[test]
fn an_unlimited_book_answers_as_the_full_lookup_does() {
    let t0 = Instant::now();
    for enforcement in [QuotaEnforcement::WhenOverloaded, QuotaEnforcement::Always] {
        let cfg = QuotaConfig {
            enforcement,
            ..QuotaConfig::default()
        };
        let fast = QuotaBook::new(cfg.clone(), t0).unwrap();
        assert!(
            fast.unlimited,
            "the default configuration takes the short cut"
        );
        let mut full = QuotaBook::new(cfg, t0).unwrap();
        full.unlimited = false;
        for (customer, c, estimate, overloaded) in [
            ("anyone", Critical, 1e9, true),
            ("", Sheddable, -1.0, false),
            ("x", CriticalPlus, f64::NAN, true),
            ("y", SheddablePlus, f64::INFINITY, false),
        ] {
            let a = fast.try_charge(t0, customer, c, estimate, overloaded);
            assert_eq!(a, full.try_charge(t0, customer, c, estimate, overloaded));
            fast.settle(t0, a.unwrap(), 5.0);
        }
        assert_eq!(fast.usage(t0, "x"), full.usage(t0, "x"));
    }
    // Any configured customer or limited default level takes the full path.
    let named = QuotaConfig::default().with_customer("a", CustomerQuota::unlimited());
    assert!(!QuotaBook::new(named, t0).unwrap().unlimited);
    let limited = QuotaConfig {
        default_customer: CustomerQuota::unlimited().with(Sheddable, Some(1.0)),
        ..QuotaConfig::default()
    };
    assert!(!QuotaBook::new(limited, t0).unwrap().unlimited);
}

#[test]
fn small_and_large_tables_find_the_same_slots() {
    let t0 = Instant::now();
    for n in [1, SCAN_MAX_CUSTOMERS, SCAN_MAX_CUSTOMERS + 1, 20] {
        let names: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
        let cfg = names.iter().fold(QuotaConfig::default(), |cfg, name| {
            cfg.with_customer(name.as_str(), CustomerQuota::uniform(1.0))
        });
        let book = QuotaBook::new(cfg, t0).unwrap();
        for (i, name) in names.iter().enumerate() {
            assert_eq!(book.slot_index(name), i, "{name} of {n}");
            assert_eq!(book.slot_index(name), book.index[name.as_str()]);
        }
        for unknown in ["", "c", "c00", "C0", "x"] {
            assert_eq!(
                book.slot_index(unknown),
                n,
                "{unknown:?} goes to the default slot"
            );
        }
    }
}

/// The rounding-up `to_ns` did with `f64::ceil`.
fn to_ns_with_ceil(cost: f64, ns_per_unit: f64) -> u64 {
    let ns = (cost * ns_per_unit).ceil();
    if ns >= u64::MAX as f64 {
        u64::MAX
    } else if ns > 0.0 {
        ns as u64
    } else {
        0
    }
}

#[test]
fn to_ns_rounds_up_like_ceil_at_the_edges() {
    let two_53 = 9_007_199_254_740_992.0;
    for x in [
        0.0,
        -0.0,
        -0.5,
        1e-300,
        0.5,
        1.0,
        1.5,
        two_53 - 0.5,
        two_53,
        two_53 + 2.0,
        9_223_372_036_854_774_784.0, // the largest f64 below 2^63
        9_223_372_036_854_775_808.0, // 2^63
        1.8e19,
        18_446_744_073_709_549_568.0, // the largest f64 below 2^64
        u64::MAX as f64,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ] {
        assert_eq!(to_ns(x, 1.0), to_ns_with_ceil(x, 1.0), "{x}");
    }
}

#[test]
fn book_is_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<QuotaBook>();
    assert_send_sync::<QuotaCharge>();
}
