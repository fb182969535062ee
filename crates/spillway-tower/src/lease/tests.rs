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

const IV: Duration = Duration::from_millis(500);

fn charge(book: &QuotaBook, t0: Instant, n: usize) {
    for _ in 0..n {
        let _ = book.try_charge(t0, "acme", Criticality::Critical, 1.0, true);
    }
}

#[test]
fn demand_is_the_offered_rate_smoothed() {
    let (book, _, t0) = book(3);
    let mut lease = LeaseBook::default();
    // A bucket nothing was offered to is not sent (it keeps the static split).
    assert!(lease.demands(&book, t0, IV).is_empty());
    // 60 cost units/s for 10 s of half-second readings: the average reaches it, and the ask
    // is two standard deviations of its Poisson noise above (√(60 / 2) each).
    let mut r = Vec::new();
    for i in 1..=20u64 {
        charge(&book, t0, 30);
        r = lease.demands(&book, t0 + Duration::from_millis(500 * i), IV);
    }
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].key, "{spillway}:quota:demand:CRITICAL:c:acme");
    assert_eq!(r[0].global, 90.0);
    assert!((r[0].demand - 60.0).abs() < 0.1, "{r:?}");
    let sd = (60.0f64 / 2.0).sqrt();
    assert!((r[0].ask - (r[0].demand + 2.0 * sd)).abs() < 0.1, "{r:?}");
}

#[test]
fn the_first_demand_reading_stands_as_it_is() {
    let (fresh, _, t0) = book(3);
    let mut lease = LeaseBook::default();
    // The call a lease task makes as it starts reads nothing (too short): a bucket with
    // arrivals reports the rate it enforces, and the reading goes on from the origin.
    charge(&fresh, t0, 3);
    let r = lease.demands(&fresh, t0 + Duration::from_millis(10), IV);
    assert_eq!((r[0].demand, r[0].ask), (30.0, 30.0), "{r:?}");
    charge(&fresh, t0, 27);
    let d = lease.demands(&fresh, t0 + IV, IV)[0].demand;
    assert!((d - 60.0).abs() < 1e-9, "{d}");
}

#[test]
fn an_idle_bucket_is_sent_once_as_leaving_then_left_out() {
    let (book, cfg, t0) = book(3);
    let mut lease = LeaseBook::default();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    charge(&book, t0, 20);
    assert_eq!(lease.demands(&book, at(500), IV).len(), 1);
    // No arrival since: still sent until IDLE_AFTER (2 s) has passed ...
    assert_eq!(lease.demands(&book, at(1000), IV).len(), 1);
    assert_eq!(lease.demands(&book, at(2000), IV).len(), 1);
    // ... then once as leaving (a negative demand), then not at all.
    let r = lease.demands(&book, at(2500), IV);
    assert_eq!((r.len(), r[0].demand), (1, -1.0), "{r:?}");
    assert!(lease.demands(&book, at(3000), IV).is_empty());
    // A failed call may have lost the leave: it is sent again.
    lease.fail(&book, cfg.lease_interval, at(3000));
    let r = lease.demands(&book, at(3500), IV);
    assert_eq!((r.len(), r[0].demand), (1, -1.0), "{r:?}");
    assert!(lease.demands(&book, at(4000), IV).is_empty());
    // A request arrives: the bucket is reported again at the next reading.
    charge(&book, t0, 1);
    let r = lease.demands(&book, at(4500), IV);
    assert!(r.len() == 1 && r[0].demand > 0.0, "{r:?}");
}

#[test]
fn a_quiet_bucket_stays_while_its_demand_counts_and_a_leave_keeps_the_rate() {
    let (book, _, t0) = book(3);
    let mut lease = LeaseBook::default();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    // One request every 2 s among 100 members: 0.5/s, far above the store's floor (1% of an
    // equal split: 0.009/s), so three quiet seconds do not make the bucket idle.
    let mut r = Vec::new();
    for i in 1..=40u64 {
        if i % 4 == 0 {
            charge(&book, t0, 1);
        }
        r = lease.demands(&book, at(500 * i), IV);
        let shares: Vec<f64> = r.iter().map(|_| 5.0).collect();
        lease.granted(&book, &r, 100, &shares, at(500 * i));
    }
    for i in 41..=46u64 {
        r = lease.demands(&book, at(500 * i), IV);
        assert!(r.len() == 1 && r[0].demand > 0.0, "{i}: {r:?}");
        lease.granted(&book, &r, 100, &[5.0], at(500 * i));
    }
    assert!(r[0].ask >= 0.5, "{r:?}");
    // Among 3 members the floor is 0.3/s: the same bucket, quiet for 2 s, is left, once, and
    // keeps the rate it had rather than the floor share the store answers a leave with.
    let mut small = LeaseBook::default();
    let (book, _, t0) = self::book(3);
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    charge(&book, t0, 1);
    let r = small.demands(&book, at(500), IV);
    small.granted(&book, &r, 3, &[5.0], at(500));
    let mut left = None;
    for i in 2..=40u64 {
        let r = small.demands(&book, at(500 * i), IV);
        if r.first().is_some_and(|r| r.demand < 0.0) {
            small.granted(&book, &r, 3, &[0.3], at(500 * i));
            left = Some(i);
            break;
        }
        small.granted(&book, &r, 3, &vec![5.0; r.len()], at(500 * i));
    }
    assert!(left.is_some(), "never left");
    assert!((rate(&book) - 5.0).abs() < 1e-9, "{}", rate(&book));
}

#[test]
fn a_lease_rerates_and_a_failing_store_falls_back_to_the_static_split() {
    let (book, cfg, t0) = book(3);
    let mut lease = LeaseBook::default();
    assert!((rate(&book) - 30.0).abs() < 1e-9, "static 90 / 3 at first");
    // Failures before any lease: the static split.
    lease.fail(&book, cfg.lease_interval, t0);
    assert_eq!(lease.mode, LeaseMode::Static);
    charge(&book, t0, 1);
    let reports = lease.demands(&book, t0, IV);
    assert_eq!(reports.len(), 1);
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
