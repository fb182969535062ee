//! Unit tests of the upstream pool: balancing, ejection, ORCA, Host values.

use super::pick::two_of;
use super::*;

/// A [`Tried`] holding `ids`.
fn tried(ids: &[u64]) -> Tried {
    let mut t = Tried::default();
    for &id in ids {
        t.add(id);
    }
    t
}

fn pool(n: usize) -> Pool {
    let cfg = UpstreamConfig {
        addresses: (0..n).map(|i| format!("127.0.0.1:{}", 9000 + i)).collect(),
        ..UpstreamConfig::default()
    };
    Pool::new(&cfg, &SignalsConfig::default()).unwrap()
}

/// The Host header a task's requests get when the client sent none: the port left out when
/// it is 80 (as hyper-util's client did).
#[test]
fn host_values() {
    let cfg = UpstreamConfig {
        addresses: vec!["127.0.0.1:9000".into(), "backend.local:80".into()],
        ..UpstreamConfig::default()
    };
    let p = Pool::new(&cfg, &SignalsConfig::default()).unwrap();
    assert_eq!(p.tasks[0].host, "127.0.0.1:9000");
    assert_eq!(p.tasks[1].host, "backend.local");
}

#[test]
fn authority_parsing() {
    assert!(parse_authority("127.0.0.1:9000").is_some());
    assert!(parse_authority("[::1]:9000").is_some());
    assert!(parse_authority("backend.local:80").is_some());
    assert!(parse_authority("127.0.0.1").is_none());
    assert!(parse_authority("http://x:1").is_none());
    assert!(parse_authority("u@x:1").is_none());
}

#[test]
fn p2c_prefers_less_loaded_and_avoids_erroring_tasks() {
    let p = pool(2);
    let now = Instant::now();
    let busy: Vec<_> = (0..3).map(|_| p.tasks[0].start(now)).collect();
    for _ in 0..20 {
        assert_eq!(p.pick(&tried(&[]), now).unwrap().id, 1);
    }
    drop(busy);
    // A task answering fast refusals: idle, but penalised for its errors.
    p.tasks[1].outcomes.add(now, FAILED, 3);
    let _one = p.tasks[0].start(now);
    for _ in 0..20 {
        assert_eq!(p.pick(&tried(&[]), now).unwrap().id, 0);
    }
    // Excluding tried tasks.
    assert_eq!(p.pick(&tried(&[0]), now).unwrap().id, 1);
    assert_eq!(p.pick(&tried(&[1]), now).unwrap().id, 0);
    assert!(p.pick(&tried(&[0, 1]), now).is_none());
}

#[test]
fn a_tried_task_is_not_picked_again_in_a_pool_of_any_size() {
    // Tried tasks used to be a 64-bit set: a task with an index of 64 or more could get a
    // request's retry after refusing it, or its connection error, again.
    let p = pool(100);
    let now = Instant::now();
    let all_but_77: Vec<u64> = (0..100).filter(|&i| i != 77).collect();
    for _ in 0..50 {
        assert_eq!(p.pick(&tried(&all_but_77), now).unwrap().id, 77);
    }
    let t = tried(&[70, 99, 3]);
    for _ in 0..2_000 {
        let id = p.pick(&t, now).unwrap().id;
        assert!(!t.has(id), "picked task {id} again");
    }
    assert!(p.pick(&tried(&(0..100).collect::<Vec<_>>()), now).is_none());
}

#[test]
fn two_draws_are_distinct_and_cover_the_pool() {
    let items: Vec<usize> = (0..5).collect();
    let mut seen = [0u32; 5];
    for _ in 0..5_000 {
        let (a, b) = two_of(&items).unwrap();
        assert!(a < b, "distinct, in order: {a} {b}");
        seen[*a] += 1;
        seen[*b] += 1;
    }
    // Each of 5 items is in 2 of 5 pairs: ~2,000 of 10,000 slots each.
    assert!(
        seen.iter().all(|&c| (1_600..=2_400).contains(&c)),
        "{seen:?}"
    );
    assert_eq!(two_of(&[7]), Some((&7, &7)));
    assert_eq!(two_of::<u8>(&[]), None);
}

#[test]
fn a_request_in_a_slot_holds_it_and_its_count_until_it_ends() {
    let p = pool(1);
    let t = &p.tasks[0];
    let now = Instant::now();
    let free = t.slots.available_permits();
    let slot = Arc::clone(&t.slots).try_acquire_owned().unwrap();
    let held = t.start_in_slot(now, slot);
    assert_eq!(t.slots.available_permits(), free - 1);
    assert_eq!(t.in_flight(), 1);
    drop(held);
    assert_eq!(t.slots.available_permits(), free, "the slot is given back");
    assert_eq!(t.in_flight(), 0);
}

#[test]
fn ejection_respects_fleet_cap_and_fallback() {
    let p = pool(2);
    let now = Instant::now();
    for _ in 0..5 {
        p.record_failure(&p.tasks[0], now);
    }
    assert!(p.tasks[0].is_ejected(now));
    for _ in 0..10 {
        p.record_failure(&p.tasks[1], now);
    }
    assert!(!p.tasks[1].is_ejected(now), "at most 1 of 2 ejected");
    for _ in 0..10 {
        assert_eq!(p.pick(&tried(&[]), now).unwrap().id, 1);
    }
    // Only the ejected one left untried: still used rather than failing.
    assert_eq!(p.pick(&tried(&[1]), now).unwrap().id, 0);
}

#[test]
fn orca_mean_of_fresh_reports() {
    let p = Arc::new(pool(2));
    let mut now = Instant::now();
    let s = p.orca_signal();
    assert_eq!(s.utilisation(now), 0.0);
    p.record_orca(&p.tasks[0], 0.6, now);
    now += orca::REFRESH;
    assert!((s.utilisation(now) - 0.6).abs() < 1e-9);
    p.record_orca(&p.tasks[1], 0.2, now);
    now += orca::REFRESH;
    assert!((s.utilisation(now) - 0.4).abs() < 1e-9);
    assert_eq!(s.utilisation(now + Duration::from_secs(60)), 0.0, "stale");
}

#[test]
fn the_orca_mean_is_read_at_most_a_refresh_late() {
    let p = Arc::new(pool(3));
    let t0 = Instant::now();
    let s = p.orca_signal();
    p.record_orca(&p.tasks[0], 0.9, t0);
    assert!((s.utilisation(t0) - 0.9).abs() < 1e-9);
    // A report inside the refresh: the mean computed at t0 still stands…
    p.record_orca(&p.tasks[1], 0.3, t0);
    assert!((s.utilisation(t0 + orca::REFRESH / 2) - 0.9).abs() < 1e-9);
    // …and is recomputed once the refresh has passed.
    assert!((s.utilisation(t0 + orca::REFRESH) - 0.6).abs() < 1e-9);
    // A short orca_max_age shortens the refresh to an eighth of it.
    let cfg = UpstreamConfig {
        addresses: vec!["127.0.0.1:9000".into()],
        ..UpstreamConfig::default()
    };
    let signals = SignalsConfig {
        orca_max_age_ms: 2,
        ..SignalsConfig::default()
    };
    let q = Arc::new(Pool::new(&cfg, &signals).unwrap());
    let s = q.orca_signal();
    let t1 = Instant::now();
    assert_eq!(s.utilisation(t1), 0.0);
    q.record_orca(&q.tasks[0], 0.5, t1);
    assert!((s.utilisation(t1 + Duration::from_micros(250)) - 0.5).abs() < 1e-9);
}

#[test]
fn a_tasks_reports_are_read_at_most_once_per_eighth_of_the_refresh() {
    let p = Arc::new(pool(2));
    let every = orca::read_every(Duration::from_secs(1));
    assert_eq!(every, orca::REFRESH / 8);
    let t0 = Instant::now();
    assert!(p.wants_orca(&p.tasks[0], t0), "the first report is read");
    p.record_orca(&p.tasks[0], 0.5, t0);
    assert!(
        !p.wants_orca(&p.tasks[0], t0 + every / 2),
        "too soon after the last"
    );
    assert!(p.wants_orca(&p.tasks[1], t0), "each task on its own clock");
    assert!(p.wants_orca(&p.tasks[0], t0 + every));
    // A short orca_max_age shortens it with the refresh.
    assert_eq!(
        orca::read_every(Duration::from_millis(2)),
        Duration::from_millis(2) / 64
    );
}
