//! Unit tests of the book's fleet side (`share.rs`): shared buckets, offered demand, re-rating.

use super::super::*;
use crate::criticality::Criticality;
use crate::criticality::Criticality::*;
use std::time::Duration;
use std::time::Instant;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Customer "a" at 10 cu/s global over 2 tasks; CRITICAL unlimited, SHEDDABLE quota 0.
fn fleet_book() -> (QuotaBook, Instant) {
    let t0 = Instant::now();
    let q = CustomerQuota::uniform(10.0)
        .with(Critical, None)
        .with(Sheddable, Some(0.0));
    let cfg = QuotaConfig {
        tasks: 2,
        enforcement: QuotaEnforcement::Always,
        ..QuotaConfig::default()
    }
    .with_customer("a", q);
    (QuotaBook::new(cfg, t0).expect("valid config"), t0)
}

#[test]
fn only_finite_positive_quotas_are_shared_and_start_at_the_static_split() {
    let (book, _) = fleet_book();
    let shared = book.shared_buckets();
    let names: Vec<_> = shared.iter().map(|b| (b.customer, b.criticality)).collect();
    assert_eq!(
        names,
        vec![(Some("a"), SheddablePlus), (Some("a"), CriticalPlus)]
    );
    for b in &shared {
        assert_eq!(b.global, 10.0);
        assert!((b.rate - 5.0).abs() < 1e-9, "{b:?}");
        assert_eq!(book.static_rate(b.index), Some(5.0));
    }
    assert!(!book.set_rate(0, 1.0), "SHEDDABLE (quota 0) is not shared");
    assert!(!book.set_rate(usize::MAX, 1.0));
}

#[test]
fn offered_counts_admitted_and_refused_cost() {
    let (book, t0) = fleet_book();
    let i = book.shared_buckets()[0].index;
    let mut refused = 0;
    for _ in 0..8 {
        if book.try_charge(t0, "a", SheddablePlus, 1.0, true).is_err() {
            refused += 1;
        }
    }
    assert_eq!(refused, 3, "capacity 5 cu at 5 cu/s × 1 s");
    assert!((book.offered(i) - 8.0).abs() < 1e-9);
    // Unlimited and zero-quota buckets keep no count.
    book.try_charge(t0, "a", Critical, 1.0, true)
        .expect("unlimited");
    assert_eq!(book.offered(Criticality::Critical.index()), 0.0);
}

#[test]
fn set_rate_rescales_the_bucket_keeping_its_fill() {
    let (book, t0) = fleet_book();
    let i = book.shared_buckets()[0].index;
    for _ in 0..5 {
        book.try_charge(t0, "a", SheddablePlus, 1.0, true).unwrap();
    }
    assert!(book.try_charge(t0, "a", SheddablePlus, 1.0, true).is_err());
    // Twice the rate: still empty now, but refills at 10 cu/s (0.1 s per unit).
    assert!(book.set_rate(i, 10.0));
    let u = book.usage(t0, "a")[SheddablePlus].unwrap();
    assert_eq!((u.rate, u.capacity), (10.0, 10.0));
    assert!(u.balance.abs() < 1e-6, "{u:?}");
    assert!(book
        .try_charge(t0 + ms(100), "a", SheddablePlus, 1.0, true)
        .is_ok());
    // A share of 0 keeps refusing with a bounded retry_after and keeps counting demand.
    assert!(book.set_rate(i, 0.0));
    let e = book
        .try_charge(t0 + ms(200), "a", SheddablePlus, 1.0, true)
        .unwrap_err();
    assert!(e.retry_after <= DEFAULT_MAX_RETRY_AFTER);
    assert!((book.offered(i) - 8.0).abs() < 1e-9);
}

#[test]
fn store_settings_are_validated() {
    let ok = QuotaConfig {
        store: Some("redis://127.0.0.1:6379/0".into()),
        ..QuotaConfig::default()
    };
    assert!(ok.validate().is_ok());
    let bad = QuotaConfig {
        store: Some("http://x".into()),
        ..QuotaConfig::default()
    };
    assert_eq!(bad.validate().unwrap_err().field, "quota.store");
    let fast = QuotaConfig {
        lease_interval: ms(10),
        ..ok.clone()
    };
    assert_eq!(
        fast.validate().unwrap_err().field,
        "quota.lease_interval_ms"
    );
    let orphan = QuotaConfig {
        store_password_file: Some("/run/secret".into()),
        ..QuotaConfig::default()
    };
    assert!(orphan.validate().is_err());
}

#[test]
fn demand_is_smoothed_while_steady_and_followed_when_it_shifts() {
    let mut d = DemandEstimate::default();
    assert_eq!(d.get(), 0.0);
    assert_eq!(d.update(60.0, 0.5), 60.0, "the first reading stands");
    // Noise within a quarter: smoothed (alpha = 1 - e^-0.5 over half a second).
    let alpha = 1.0 - (-0.5f64).exp();
    let want = 60.0 + alpha * (54.0 - 60.0);
    assert!((d.update(54.0, 0.5) - want).abs() < 1e-9);
    assert!(!d.shifted());
    // A drop to a tenth over half a second: taken at once.
    assert_eq!(d.update(6.0, 0.5), 6.0);
    assert!(d.shifted());
    // Up by 40%, once: smoothed; twice in a row: the run's average is taken.
    let once = d.update(8.5, 0.5);
    assert!(once > 6.0 && once < 8.5, "{once}");
    assert!((d.update(8.5, 0.5) - 8.5).abs() < 1e-9);
    // Off by 40%, then back inside: the run ends, the next 40% is smoothed again.
    let up = d.update(12.0, 0.5);
    assert!(up < 12.0, "{up}");
    let back = d.update(8.5, 0.5);
    assert!(back < up, "{back}");
    let again = d.update(12.0, 0.5);
    assert!(again < 12.0, "{again}");
    // Nonsense readings count as nothing offered.
    let mut z = DemandEstimate::default();
    assert_eq!(z.update(f64::NAN, 0.5), 0.0);
    assert_eq!(z.update(-5.0, 0.5), 0.0);
}

#[test]
fn a_few_arrivals_per_short_interval_are_smoothed_not_followed() {
    // 2-3 requests/s seen in 100 ms readings: mostly 0, now and then 10/s. No run of one side
    // lasts long enough, so the estimate stays near the mean instead of jumping with it.
    let mut d = DemandEstimate::default();
    d.update(2.0, 0.1);
    let readings = [0.0, 0.0, 10.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 10.0];
    for _ in 0..20 {
        for r in readings {
            let e = d.update(r, 0.1);
            assert!(e > 0.5 && e < 6.0, "{e}");
        }
    }
    // A real shift at the same cadence, 3 -> 40/s: followed after half a second of it (the
    // run's average: the last 10/s reading began it).
    let before = d.get();
    let mut last = 0.0;
    for _ in 0..5 {
        last = d.update(40.0, 0.1);
    }
    assert!(before < 6.0 && last > 30.0, "{before} -> {last}");
    // Nothing at all for a second and a half: a drop, taken.
    for _ in 0..15 {
        last = d.update(0.0, 0.1);
    }
    assert_eq!(last, 0.0);
}

/// A Poisson count with mean `mean` from a small deterministic generator (multiplication of
/// uniforms), so the noise tests below need no random crate and always see the same draws.
fn poisson(state: &mut u64, mean: f64) -> u64 {
    let mut uniform = || {
        *state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let limit = (-mean).exp();
    let mut p = uniform();
    let mut k = 0;
    while p > limit {
        p *= uniform();
        k += 1;
    }
    k
}

#[test]
fn a_busy_bucket_follows_a_shift_at_its_next_reading() {
    // 400 requests/s in 250 ms readings (100 arrivals each), then 100/s: one reading of 25
    // arrivals where 100 are expected is no noise, and is taken as it stands.
    let mut d = DemandEstimate::default();
    for _ in 0..8 {
        d.update_with(400.0, 0.25, Some(100), 1.0);
    }
    assert_eq!(d.update_with(100.0, 0.25, Some(25), 1.0), 100.0);
    assert!(d.shifted());
    // Back up, the same.
    assert_eq!(d.update_with(400.0, 0.25, Some(100), 1.0), 400.0);
    // A tenth off is smoothed however many arrivals it rests on (steady demand wobbles).
    let e = d.update_with(360.0, 0.25, Some(90), 1.0);
    assert!(e > 360.0 && e < 400.0 && !d.shifted(), "{e}");
    // The same drop seen without counts waits for half a second of readings (the time rule).
    let mut t = DemandEstimate::default();
    t.update(400.0, 0.25);
    assert!(t.update(100.0, 0.25) > 100.0);
    assert_eq!(t.update(100.0, 0.25), 100.0);
}

#[test]
fn a_few_arrivals_per_reading_are_rarely_taken_for_a_shift() {
    // 2 requests/s in 250 ms readings: half an arrival per reading, runs of a second or more
    // without one are common. Counted, a run is beyond noise only when it could hardly be
    // chance (4.5 s without an arrival: about once in 8,000 starts), so the estimate stays a
    // smoothed average, and its ask covers the demand most of the time (seed 31: 13 shifts
    // in 19,900 readings, mean 1.995, the ask under the demand 8.9% of the time).
    let (rate, dt) = (2.0, 0.25);
    let mut state = 31;
    let mut d = DemandEstimate::default();
    let (mut sum, mut under, mut shifts, mut lowest) = (0.0, 0, 0, f64::INFINITY);
    let n = 20_000;
    for i in 0..n {
        let k = poisson(&mut state, rate * dt);
        let e = d.update_with(k as f64 / dt, dt, Some(k), 1.0);
        if i >= 100 {
            sum += e;
            lowest = lowest.min(e);
            under += usize::from(d.upper() < rate);
            shifts += usize::from(d.shifted());
        }
    }
    let mean = sum / (n - 100) as f64;
    let under = under as f64 / (n - 100) as f64;
    eprintln!("2/s in 250 ms readings: mean {mean:.3}, lowest {lowest:.3}, ask under the demand {under:.3}, shifts {shifts}");
    assert!(shifts <= n / 1000, "{shifts}");
    assert!((mean - rate).abs() < 0.1 * rate, "{mean}");
    assert!(lowest >= 0.0, "{lowest}");
    assert!(under < 0.15, "{under}");
}

#[test]
fn a_quiet_bucket_reports_its_long_view_and_asks_above_its_demand() {
    // 0.3 requests/s in 250 ms readings, what each of 10,000 instances sharing 1,000/s sees
    // on average. A one-second estimate is 0 most of the time and near 0.9/s for a second
    // after each arrival; the store cuts such spikes at the fair level and so computed a level
    // twice the true one. The long view (8 s) keeps the report near the demand, and the ask
    // (its Poisson upper bound) over it.
    let (rate, dt) = (0.3, 0.25);
    let mut state = 7;
    let mut d = DemandEstimate::default();
    let n = 40_000;
    let (mut sum, mut spikes, mut under) = (0.0, 0, 0);
    for i in 0..n {
        let k = poisson(&mut state, rate * dt);
        d.update_with(k as f64 / dt, dt, Some(k), 1.0);
        if i >= 400 {
            let v = d.get();
            sum += v;
            spikes += usize::from(v > 3.0 * rate);
            under += usize::from(d.upper() < rate);
        }
    }
    let m = (n - 400) as f64;
    let (mean, spikes, under) = (sum / m, spikes as f64 / m, under as f64 / m);
    eprintln!(
        "0.3/s in 250 ms readings: mean {mean:.3}, over 3x {spikes:.4}, ask under {under:.4}"
    );
    assert!((mean - rate).abs() < 0.1 * rate, "{mean}");
    assert!(spikes < 0.01, "{spikes}");
    assert!(under < 0.05, "{under}");
}

#[test]
fn a_bucket_turning_quiet_starts_its_long_view_from_its_demand_then() {
    // 40/s (busy: its smoothed estimate is reported), then 0.5/s: the drop is beyond noise at
    // the next reading, and the long view starts there rather than from 40/s eight seconds
    // deep; ten seconds on it reports about the new demand.
    let dt = 0.25;
    let mut state = 3;
    let mut d = DemandEstimate::default();
    for _ in 0..40 {
        let k = poisson(&mut state, 40.0 * dt);
        d.update_with(k as f64 / dt, dt, Some(k), 1.0);
    }
    assert!((d.get() - 40.0).abs() < 8.0, "{}", d.get());
    for _ in 0..40 {
        let k = poisson(&mut state, 0.5 * dt);
        d.update_with(k as f64 / dt, dt, Some(k), 1.0);
    }
    assert!(d.get() < 1.5, "{}", d.get());
    assert!(d.upper() >= 0.5, "{}", d.upper());
}
