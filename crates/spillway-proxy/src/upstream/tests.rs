//! Unit tests of the upstream pool: balancing, ejection, ORCA, per-thread clients.

use super::*;

fn pool(n: usize) -> Pool {
    let cfg = UpstreamConfig {
        addresses: (0..n).map(|i| format!("127.0.0.1:{}", 9000 + i)).collect(),
        ..UpstreamConfig::default()
    };
    Pool::new(&cfg, &SignalsConfig::default()).unwrap()
}

/// A data-plane thread gets clients of its own (so a pooled connection, whose task runs on
/// the runtime that opened it, is only used by the thread that opened it); other threads
/// share one.
#[test]
fn data_threads_get_their_own_clients() {
    let p = Arc::new(pool(1));
    let shared = p.client(false) as *const UpstreamClient as usize;
    assert_eq!(shared, &p.http1 as *const UpstreamClient as usize);
    // Both threads alive at once (a finished thread's slot may be given to a new one).
    let barrier = Arc::new(std::sync::Barrier::new(2));
    let on_thread = |p: Arc<Pool>, barrier: Arc<std::sync::Barrier>| {
        std::thread::spawn(move || {
            mark_data_thread();
            let a = p.client(false) as *const UpstreamClient as usize;
            let b = p.client(false) as *const UpstreamClient as usize;
            let h2 = p.client(true) as *const UpstreamClient as usize;
            assert_eq!(a, b, "the same thread keeps its clients");
            assert_ne!(a, h2);
            barrier.wait();
            a
        })
    };
    let h1 = on_thread(Arc::clone(&p), Arc::clone(&barrier));
    let h2 = on_thread(Arc::clone(&p), barrier);
    let (t1, t2) = (h1.join().unwrap(), h2.join().unwrap());
    assert_ne!(t1, shared);
    assert_ne!(t2, shared);
    assert_ne!(t1, t2, "two data threads, two pools");
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
        assert_eq!(p.pick(0, now).unwrap().id, 1);
    }
    drop(busy);
    // A task answering fast refusals: idle, but penalised for its errors.
    p.tasks[1].errors.add(now, 3);
    let _one = p.tasks[0].start(now);
    for _ in 0..20 {
        assert_eq!(p.pick(0, now).unwrap().id, 0);
    }
    // Excluding tried tasks.
    assert_eq!(p.pick(0b01, now).unwrap().id, 1);
    assert_eq!(p.pick(0b10, now).unwrap().id, 0);
    assert!(p.pick(0b11, now).is_none());
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
        assert_eq!(p.pick(0, now).unwrap().id, 1);
    }
    // Only the ejected one left untried: still used rather than failing.
    assert_eq!(p.pick(0b10, now).unwrap().id, 0);
}

#[test]
fn orca_mean_of_fresh_reports() {
    let p = Arc::new(pool(2));
    let now = Instant::now();
    let s = p.orca_signal();
    assert_eq!(s.utilisation(now), 0.0);
    p.record_orca(&p.tasks[0], 0.6, now);
    assert!((s.utilisation(now) - 0.6).abs() < 1e-9);
    p.record_orca(&p.tasks[1], 0.2, now);
    assert!((s.utilisation(now) - 0.4).abs() < 1e-9);
    assert_eq!(s.utilisation(now + Duration::from_secs(60)), 0.0, "stale");
}
