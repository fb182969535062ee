use super::*;
use spillway_core::quota::{CustomerQuota, QuotaEnforcement};
use spillway_core::quota::{QuotaBook, QuotaConfig};
use spillway_core::Criticality;
use std::time::{Duration, Instant};

fn book(tasks: u32) -> (QuotaBook, QuotaConfig, Instant) {
    let t0 = Instant::now();
    let cfg = QuotaConfig {
        tasks,
        enforcement: QuotaEnforcement::Always,
        store: Some("redis://127.0.0.1:1/0".into()),
        ..QuotaConfig::default()
    }
    .with_customer(
        "acme",
        CustomerQuota::unlimited().with(Criticality::Critical, Some(90.0)),
    );
    (QuotaBook::new(cfg.clone(), t0).unwrap(), cfg, t0)
}

fn rate(book: &QuotaBook) -> f64 {
    book.shared_buckets()[0].rate
}

#[test]
fn demand_is_the_offered_rate_smoothed() {
    let (book, _, t0) = book(3);
    let mut lease = LeaseBook::default();
    let r = lease.demands(&book, t0);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].key, "{spillway}:quota:demand:CRITICAL:c:acme");
    assert_eq!((r[0].global, r[0].demand), (90.0, 0.0));
    // 60 cost units/s for 10 s of half-second readings: the average reaches it.
    let mut d = 0.0;
    for i in 1..=20u64 {
        for _ in 0..30 {
            let _ = book.try_charge(t0, "acme", Criticality::Critical, 1.0, true);
        }
        d = lease.demands(&book, t0 + Duration::from_millis(500 * i))[0].demand;
    }
    assert!((d - 60.0).abs() < 0.1, "{d}");
}

#[test]
fn the_first_demand_reading_stands_as_it_is() {
    let (fresh, _, t0) = book(3);
    let mut lease = LeaseBook::default();
    lease.demands(&fresh, t0);
    for _ in 0..30 {
        let _ = fresh.try_charge(t0, "acme", Criticality::Critical, 1.0, true);
    }
    let d = lease.demands(&fresh, t0 + Duration::from_millis(500))[0].demand;
    assert!((d - 60.0).abs() < 1e-9, "{d}");
}

#[test]
fn a_lease_rerates_and_a_failing_store_falls_back_to_the_static_split() {
    let (book, cfg, t0) = book(3);
    let mut lease = LeaseBook::default();
    assert!((rate(&book) - 30.0).abs() < 1e-9, "static 90 / 3 at first");
    // Failures before any lease: the static split.
    lease.fail(&book, cfg.lease_interval, t0);
    assert_eq!(lease.mode, LeaseMode::Static);
    let reports = lease.demands(&book, t0);
    // The first lease after a failure may lower the rate, not raise it (the store may have
    // restarted empty and count only the first instances back); the next one applies.
    lease.granted(&book, &reports, 2, &[70.0], t0);
    assert_eq!(lease.mode, LeaseMode::Leased);
    assert!((rate(&book) - 30.0).abs() < 1e-9, "{}", rate(&book));
    lease.granted(&book, &reports, 2, &[70.0], t0);
    assert!((rate(&book) - 70.0).abs() < 1e-9);
    let at = |ms| t0 + Duration::from_millis(ms);
    // Holding for two intervals (1 s at 500 ms).
    lease.fail(&book, cfg.lease_interval, at(900));
    assert_eq!(lease.mode, LeaseMode::Holding);
    assert!((rate(&book) - 70.0).abs() < 1e-9);
    // Halfway down to 30 after three intervals.
    lease.fail(&book, cfg.lease_interval, at(1500));
    assert_eq!(lease.mode, LeaseMode::Decaying);
    assert!((rate(&book) - 50.0).abs() < 1e-6, "{}", rate(&book));
    // Static from four intervals on.
    lease.fail(&book, cfg.lease_interval, at(2000));
    assert_eq!(lease.mode, LeaseMode::Static);
    assert!((rate(&book) - 30.0).abs() < 1e-6);
    // Back: a lower share applies at once, a higher one from the second lease.
    lease.granted(&book, &reports, 3, &[45.0], at(2500));
    assert!((rate(&book) - 30.0).abs() < 1e-9);
    lease.granted(&book, &reports, 3, &[45.0], at(3000));
    assert!((rate(&book) - 45.0).abs() < 1e-9);
    lease.fail(&book, cfg.lease_interval, at(3100));
    lease.granted(&book, &reports, 3, &[20.0], at(3500));
    assert!((rate(&book) - 20.0).abs() < 1e-9);
}

#[test]
fn replies_are_checked_and_urls_redacted() {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(parse_reply(&s(&["3", "42.5"]), 1), Ok((3, vec![42.5])));
    assert!(parse_reply(&s(&["3"]), 1).is_err());
    assert!(parse_reply(&s(&["3", "nan"]), 1).is_err());
    assert!(parse_reply(&s(&["3", "-1"]), 1).is_err());
    assert!(parse_reply(&[], 0).is_err());
    assert_eq!(
        redacted("rediss://user:secret@cache:6380/2?x=1"),
        "rediss://cache:6380/2"
    );
    assert_eq!(
        redacted("redis://127.0.0.1:6379/0"),
        "redis://127.0.0.1:6379/0"
    );
    assert_eq!(redacted("nonsense"), "(invalid store URL)");
}

#[test]
fn store_urls_are_checked() {
    assert!(check_store_url("redis://127.0.0.1:6379/0").is_ok());
    assert!(check_store_url("redis://127.0.0.1:notaport/0").is_err());
    assert_eq!(
        check_store_url("rediss://cache:6380/0").is_ok(),
        cfg!(feature = "fleet-tls")
    );
    assert!(FleetStore::new("redis://127.0.0.1:6379/0").is_ok());
    let e = FleetStore::new("http://127.0.0.1:6379/0").unwrap_err();
    assert!(e.to_string().contains("quota.store"), "{e}");
    let short = FleetStore::new("redis://127.0.0.1:6379/0")
        .unwrap()
        .lease_interval(Duration::from_millis(10));
    assert!(short.is_err());
}
