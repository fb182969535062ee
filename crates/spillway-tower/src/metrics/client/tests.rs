use super::*;
use crate::metrics::handles::tests::{labels, Counting};
use spillway_core::Criticality;
use std::sync::atomic::Ordering;

fn total(rec: &Counting, family: &str) -> u64 {
    rec.0
        .lock()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.name() == family)
        .map(|(_, v)| v.load(Ordering::Relaxed))
        .sum()
}

fn series(rec: &Counting, family: &str) -> usize {
    rec.0
        .lock()
        .unwrap()
        .keys()
        .filter(|k| k.name() == family)
        .count()
}

#[test]
fn a_label_set_is_registered_once_per_thread_and_counted_every_time() {
    let rec = Counting::default();
    let l = labels("acme", "get", Criticality::Critical);
    metrics::with_local_recorder(&rec, || {
        for _ in 0..5 {
            crate::metrics::throttled(&l, SharedString::const_str("10.0.0.1:80"));
            crate::metrics::retried(&l, SharedString::const_str("10.0.0.1:80"), "overloaded");
        }
        crate::metrics::retried(&l, SharedString::const_str("10.0.0.1:80"), "unavailable");
    });
    assert_eq!(total(&rec, m::THROTTLED), 5);
    assert_eq!(total(&rec, m::RETRIED), 6);
    // Three label sets, each registered once (the facade registered on all 11 calls).
    assert_eq!(rec.1.load(Ordering::Relaxed), 3);
    let map = rec.0.lock().unwrap();
    let retried: Vec<Vec<(String, String)>> = map
        .keys()
        .filter(|k| k.name() == m::RETRIED)
        .map(|k| {
            k.labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect()
        })
        .collect();
    assert!(retried.iter().all(|l| l.len() == 5
        && l[0] == (m::L_CUSTOMER.to_owned(), "acme".to_owned())
        && l[4] == (m::L_DESTINATION.to_owned(), "10.0.0.1:80".to_owned())));
}

#[test]
fn past_the_cap_new_destinations_fold_into_one_series() {
    let rec = Counting::default();
    let max = series::max_series_per_family();
    let l = labels("acme", "get", Criticality::Critical);
    metrics::with_local_recorder(&rec, || {
        for i in 0..max + 10 {
            crate::metrics::throttled(&l, SharedString::from(format!("10.0.0.1:{i}")));
        }
        // Again, from the cache this time: the same series.
        for i in 0..max + 10 {
            crate::metrics::throttled(&l, SharedString::from(format!("10.0.0.1:{i}")));
        }
    });
    // The cap's series, plus the one fallback `(other, other, CRITICAL, other)` that is never
    // refused: no series per destination past the cap (a resolver can make many).
    assert_eq!(series(&rec, m::THROTTLED), max + 1);
    assert_eq!(
        total(&rec, m::THROTTLED),
        2 * (max + 10) as u64,
        "every call counted"
    );
    let map = rec.0.lock().unwrap();
    let folded: u64 = map
        .iter()
        .filter(|(k, _)| k.name() == m::THROTTLED)
        .filter(|(k, _)| {
            k.labels()
                .all(|l| l.key() == m::L_CRITICALITY || l.value() == OTHER)
        })
        .map(|(_, v)| v.load(Ordering::Relaxed))
        .sum();
    let overflow: u64 = map
        .iter()
        .filter(|(k, _)| k.name() == m::LABEL_OVERFLOW)
        .map(|(_, v)| v.load(Ordering::Relaxed))
        .sum();
    assert_eq!(overflow, 20, "each folded call counted as overflow");
    assert_eq!(folded, 20);
}

#[test]
fn a_full_family_folds_the_customer_first_and_keeps_the_destination() {
    let rec = Counting::default();
    let max = series::max_series_per_family();
    metrics::with_local_recorder(&rec, || {
        // `(other, get, CRITICAL, a)` first, then the family filled on other customers.
        let first = labels(OTHER, "get", Criticality::Critical);
        crate::metrics::throttled(&first, SharedString::const_str("a"));
        for i in 1..max {
            let l = labels(&format!("c{i}"), "put", Criticality::Critical);
            crate::metrics::throttled(&l, SharedString::const_str("a"));
        }
        let late = labels("late", "get", Criticality::Critical);
        crate::metrics::throttled(&late, SharedString::const_str("a"));
    });
    let map = rec.0.lock().unwrap();
    let of = |customer: &str, op: &str, dest: &str| -> u64 {
        map.iter()
            .filter(|(k, _)| k.name() == m::THROTTLED)
            .filter(|(k, _)| {
                let l: Vec<(&str, &str)> = k.labels().map(|l| (l.key(), l.value())).collect();
                l.contains(&(m::L_CUSTOMER, customer))
                    && l.contains(&(m::L_OPERATION, op))
                    && l.contains(&(m::L_DESTINATION, dest))
            })
            .map(|(_, v)| v.load(Ordering::Relaxed))
            .sum()
    };
    assert_eq!(of("late", "get", "a"), 0, "folded");
    assert_eq!(
        of(OTHER, "get", "a"),
        2,
        "the customer folded, the rest kept"
    );
}

#[test]
fn a_changed_cap_decides_again() {
    let rec = Counting::default();
    let l = labels("acme", "get", Criticality::Critical);
    metrics::with_local_recorder(&rec, || {
        crate::metrics::throttled(&l, SharedString::const_str("a"));
        TABLE.with(|t| assert_eq!(t.borrow().counters.len(), 1));
        // What a cap change does to the generation (the cap itself is the process's, which
        // other tests read: left as it is).
        TABLE.with(|t| {
            let mut t = t.borrow_mut();
            t.generation = t.generation.wrapping_sub(1);
        });
        crate::metrics::throttled(&l, SharedString::const_str("a"));
    });
    assert_eq!(total(&rec, m::THROTTLED), 2);
    // Registered again after the (simulated) change, into the same series.
    assert_eq!(rec.1.load(Ordering::Relaxed), 2);
    assert_eq!(series(&rec, m::THROTTLED), 1);
}
