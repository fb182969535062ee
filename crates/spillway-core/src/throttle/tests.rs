use super::*;
use crate::clock::{Clock, ManualClock};
use crate::random::{FixedRandom, SeededRandom};
use proptest::prelude::*;
use std::sync::Arc;

const S: Duration = Duration::from_secs(1);

fn throttle_with(cfg: ThrottleConfig, draw: f64) -> (AdaptiveThrottle<FixedRandom>, ManualClock) {
    let clock = ManualClock::new();
    let t =
        AdaptiveThrottle::with_random(cfg, clock.now(), FixedRandom(draw)).expect("valid config");
    (t, clock)
}

/// Feeds `requests` requests of which the first `accepts` were accepted, all at `now`, with a
/// draw that never throttles (so every request is sent and counted).
fn feed<R: RandomSource>(t: &AdaptiveThrottle<R>, now: Instant, requests: u64, accepts: u64) {
    t.counts.add(now, REQUESTS, requests);
    t.counts.add(now, ACCEPTS, accepts);
}

#[test]
fn defaults_are_the_sre_book_values() {
    let c = ThrottleConfig::default();
    assert_eq!(c.window, Duration::from_secs(120));
    assert_eq!(c.k, 2.0);
    assert_eq!(c.buckets, 120);
    assert_eq!(c.min_requests_per_sec, 0.0);
    assert_eq!(c.validate(), Ok(()));
}

#[test]
fn probability_matches_hand_worked_values() {
    let (t, clock) = throttle_with(ThrottleConfig::default(), 0.0);
    let now = clock.now();
    assert_eq!(t.probability(now), 0.0); // no history
    feed(&t, now, 100, 30);
    // (100 − 2·30) / (100 + 1) = 40 / 101
    assert_eq!(t.counts(now), (100, 30));
    assert!((t.probability(now) - 40.0 / 101.0).abs() < 1e-15);
    // Healthy: 100 requests, 100 accepts → 100 − 200 < 0 → 0.
    assert_eq!(t.probability_for(100, 100), 0.0);
    // Exactly at the K boundary: 100 − 2·50 = 0 → 0.
    assert_eq!(t.probability_for(100, 50), 0.0);
    // Nothing accepted: 10 / 11.
    assert!((t.probability_for(10, 0) - 10.0 / 11.0).abs() < 1e-15);
    // K = 1.5: (100 − 45) / 101.
    assert!((reject_probability(100, 30, 1.5) - 55.0 / 101.0).abs() < 1e-15);
}

#[test]
fn lower_k_throttles_harder() {
    assert!(reject_probability(100, 40, 1.1) > reject_probability(100, 40, 2.0));
    assert_eq!(reject_probability(100, 40, 3.0), 0.0);
}

#[test]
fn decisions_follow_the_draw() {
    // P = 40/101 ≈ 0.396: a draw of 0.39 is refused, 0.40 is sent.
    let (t, clock) = throttle_with(ThrottleConfig::default(), 0.39);
    feed(&t, clock.now(), 100, 30);
    let err = t.try_acquire(clock.now()).expect_err("0.39 < P refuses");
    assert!((err.probability - 40.0 / 101.0).abs() < 1e-15);
    assert!(err.to_string().contains("throttled locally"));

    let (t, clock) = throttle_with(ThrottleConfig::default(), 0.40);
    feed(&t, clock.now(), 100, 30);
    assert_eq!(t.try_acquire(clock.now()), Ok(()));
}

#[test]
fn throttled_requests_still_count_as_requests() {
    let (t, clock) = throttle_with(ThrottleConfig::default(), 0.0); // refuses whenever P > 0
    let now = clock.now();
    feed(&t, now, 10, 0);
    for _ in 0..50 {
        assert!(t.try_acquire(now).is_err());
    }
    assert_eq!(t.counts(now), (60, 0));
    // The refusals pushed P up, towards (but never to) 1: 60 / 61.
    assert!((t.probability(now) - 60.0 / 61.0).abs() < 1e-15);
}

#[test]
fn requests_in_flight_are_neither_refused_nor_accepted() {
    // A cold client whose rate rises faster than answers come back: 100 sent, 30 answered and
    // accepted, 70 still in flight. Counted as sent, they read as 70 refusals: P = 40/101.
    let (t, clock) = throttle_with(ThrottleConfig::default(), 0.0);
    let now = clock.now();
    for i in 0..100 {
        assert_eq!(
            t.try_acquire(now),
            Ok(()),
            "request {i}: nothing was refused"
        );
    }
    for _ in 0..30 {
        t.record_accept(now);
        t.settle();
    }
    assert_eq!(t.outstanding(), 70);
    assert_eq!(t.counts(now), (100, 30));
    assert_eq!(t.probability(now), 0.0);
    assert_eq!(t.try_acquire(now), Ok(()));
    // Their outcome is in: 40 of the 71 timed out or were refused (settled, no accept), the
    // other 31 accepted. Now they count: (101 − 2 · 61) / 102 < 0, still open.
    for _ in 0..31 {
        t.record_accept(now);
        t.settle();
    }
    for _ in 0..40 {
        t.settle();
    }
    assert_eq!(t.outstanding(), 0);
    assert_eq!(t.probability(now), 0.0);
    // Thirty more sent and refused: (131 − 2 · 61) / 132.
    for _ in 0..30 {
        t.counts.add(now, REQUESTS, 1);
    }
    assert!((t.probability(now) - 9.0 / 132.0).abs() < 1e-15);
    // A stray settle does not wrap the count: it reads zero, and the next request let
    // through makes it good.
    t.settle();
    assert_eq!(t.outstanding(), 0);
    assert!((t.probability(now) - 9.0 / 132.0).abs() < 1e-15);
    let (t, clock) = throttle_with(ThrottleConfig::default(), 1.0 - f64::EPSILON);
    t.settle();
    assert_eq!(t.try_acquire(clock.now()), Ok(()));
    assert_eq!(t.outstanding(), 0);
    assert_eq!(t.try_acquire(clock.now()), Ok(()));
    assert_eq!(t.outstanding(), 1);
}

#[test]
fn first_request_of_a_new_client_is_never_throttled() {
    let (t, clock) = throttle_with(ThrottleConfig::default(), 0.0);
    assert_eq!(t.try_acquire(clock.now()), Ok(()));
    assert_eq!(t.counts(clock.now()), (1, 0));
}

#[test]
fn minimum_request_rate_keeps_a_quiet_client_open() {
    let cfg = ThrottleConfig {
        min_requests_per_sec: 1.0, // over 120 s: at least 120 requests before throttling
        ..ThrottleConfig::default()
    };
    let (t, clock) = throttle_with(cfg, 0.0);
    let now = clock.now();
    feed(&t, now, 119, 0);
    assert_eq!(t.probability(now), 0.0);
    assert_eq!(t.try_acquire(now), Ok(())); // the 120th request, judged on 119
                                            // Outstanding, it is left out (119 known: still below the minimum); once its refusal is
                                            // in (settled, no accept), it counts.
    assert_eq!(t.probability(now), 0.0);
    t.settle();
    assert!((t.probability(now) - 120.0 / 121.0).abs() < 1e-15);
    assert!(t.try_acquire(now).is_err());
}

#[test]
fn probability_stays_below_one_even_with_huge_counts() {
    assert!(reject_probability(u64::MAX, 0, 2.0) < 1.0);
    assert_eq!(reject_probability(u64::MAX, 0, 2.0), MAX_PROBABILITY);
    assert!(reject_probability(1 << 60, 0, 0.001) < 1.0);
    assert!(reject_probability(1, 0, 2.0) < 1.0);
    // Degenerate K never throttles rather than producing NaN.
    assert_eq!(reject_probability(100, 0, f64::NAN), 0.0);
    assert_eq!(reject_probability(100, 0, 0.0), 0.0);
    // A draw just below 1 still leaks the odd request through is the formula's job; the clamp
    // guarantees P < 1 so that a draw of MAX_PROBABILITY is always sent.
    let (t, clock) = throttle_with(ThrottleConfig::default(), MAX_PROBABILITY);
    feed(&t, clock.now(), 1 << 40, 0);
    assert_eq!(t.try_acquire(clock.now()), Ok(()));
}

#[test]
fn window_forgets_after_120_seconds() {
    let (t, clock) = throttle_with(ThrottleConfig::default(), 0.0);
    feed(&t, clock.now(), 100, 0);
    clock.advance(S * 60);
    feed(&t, clock.now(), 100, 100);
    // Both halves in the window: (200 − 200) / 201 → 0.
    assert_eq!(t.counts(clock.now()), (200, 100));
    assert_eq!(t.probability(clock.now()), 0.0);
    clock.advance(S * 60); // t = 120 s: the first 100 unanswered requests are forgotten
    assert_eq!(t.counts(clock.now()), (100, 100));
    clock.advance(S * 60); // t = 180 s: everything is forgotten
    assert_eq!(t.counts(clock.now()), (0, 0));
}

#[test]
fn a_client_back_within_k_times_the_accept_rate_is_not_refused_for_the_surge_it_left() {
    // A 10 s window in 1 s buckets. Steady: 30 requests a second, all accepted.
    let cfg = ThrottleConfig {
        window: 10 * S,
        buckets: 10,
        ..ThrottleConfig::default()
    };
    let (t, clock) = throttle_with(cfg, 0.0);
    for _ in 0..5 {
        feed(&t, clock.now(), 30, 30);
        clock.advance(S);
    }
    // A surge: 1,000 a second for 5 s, of which the backend accepts 40.
    for _ in 0..5 {
        assert!(
            t.probability(clock.now()) <= {
                let (r, a) = t.counts(clock.now());
                t.probability_for(r, a)
            },
            "no more than the formula alone"
        );
        feed(&t, clock.now(), 1000, 40);
        clock.advance(S);
    }
    let (requests, accepts) = t.counts(clock.now());
    let formula = t.probability_for(requests, accepts);
    // (5,120 − 2 · 320) / 5,121: the window holds 4 steady seconds and the surge.
    assert!(formula > 0.87, "the window's formula: {formula}");
    assert!(
        (t.probability(clock.now()) - formula).abs() < 0.05,
        "still asking for the surge's rate: about the formula"
    );
    // Back to 30 a second, within 2 × the 40 a second the backend has been accepting.
    feed(&t, clock.now(), 30, 30);
    clock.advance(S);
    let (requests, accepts) = t.counts(clock.now());
    assert!(
        t.probability_for(requests, accepts) > 0.85,
        "the window still holds the surge"
    );
    assert_eq!(
        t.probability(clock.now()),
        0.0,
        "the recent rate is within K × accepts"
    );
    assert_eq!(t.try_acquire(clock.now()), Ok(()));
}

#[test]
fn throttle_releases_itself_as_accepts_return() {
    let clock = ManualClock::new();
    let t =
        AdaptiveThrottle::with_random(ThrottleConfig::default(), clock.now(), SeededRandom::new(1))
            .expect("valid config");
    feed(&t, clock.now(), 1000, 0);
    assert!(t.probability(clock.now()) > 0.99);
    // The backend has recovered: every request sent is accepted. The client keeps offering 10/s.
    // With K = 2 the gap 1 − P roughly doubles per window (P' = 2P − 1 at a steady offered
    // rate), so from P ≈ 0.999 the release takes several windows — but it needs no one's help.
    let mut sent = 0u64;
    let mut released_at = None;
    for step in 1..=36_000u32 {
        clock.advance(Duration::from_millis(100));
        if t.try_acquire(clock.now()).is_ok() {
            t.record_accept(clock.now());
            t.settle();
            sent += 1;
        }
        if released_at.is_none() && t.probability(clock.now()) == 0.0 {
            released_at = Some(step / 10);
        }
    }
    assert!(sent > 0, "a trickle must leak through while throttled");
    let released_at = released_at.expect("the throttle must release itself within an hour");
    assert!(
        released_at > 120,
        "released after {released_at} s, before the refusals aged out"
    );
    assert_eq!(t.probability(clock.now()), 0.0);
}

#[test]
fn invalid_configs_name_the_field() {
    let bad = |f: fn(&mut ThrottleConfig)| {
        let mut c = ThrottleConfig::default();
        f(&mut c);
        c.validate().expect_err("must be rejected").field
    };
    assert_eq!(bad(|c| c.k = 0.0), "throttle.k");
    assert_eq!(bad(|c| c.k = -1.0), "throttle.k");
    assert_eq!(bad(|c| c.k = f64::INFINITY), "throttle.k");
    assert_eq!(bad(|c| c.k = f64::NAN), "throttle.k");
    assert_eq!(bad(|c| c.window = Duration::ZERO), "throttle.window");
    assert_eq!(
        bad(|c| c.window = Duration::from_nanos(3)),
        "throttle.window"
    );
    assert_eq!(bad(|c| c.buckets = 0), "throttle.buckets");
    assert_eq!(bad(|c| c.buckets = 3601), "throttle.buckets");
    assert_eq!(
        bad(|c| c.min_requests_per_sec = -0.1),
        "throttle.min_requests_per_sec"
    );
    assert_eq!(
        bad(|c| c.min_requests_per_sec = f64::NAN),
        "throttle.min_requests_per_sec"
    );
    let err = AdaptiveThrottle::new(
        ThrottleConfig {
            k: 0.0,
            ..ThrottleConfig::default()
        },
        Instant::now(),
    )
    .expect_err("k = 0 is rejected");
    assert!(err.to_string().contains("throttle.k"));
    let ok = ThrottleConfig {
        buckets: 3600,
        min_requests_per_sec: 5.0,
        k: 0.5,
        ..ThrottleConfig::default()
    };
    assert_eq!(ok.validate(), Ok(()));
}

#[test]
fn types_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<AdaptiveThrottle>();
    check::<AdaptiveThrottle<SeededRandom>>();
    check::<Throttled>();
    check::<ThrottleConfig>();
}

#[test]
fn concurrent_counts_are_exact() {
    const THREADS: u64 = 4;
    const OPS: u64 = 100_000;
    // A seeded source: about half the requests are refused once accepts fall behind, so both
    // outcomes run concurrently; every one must still be counted.
    let clock = ManualClock::new();
    let t = Arc::new(
        AdaptiveThrottle::with_random(ThrottleConfig::default(), clock.now(), SeededRandom::new(7))
            .expect("valid config"),
    );
    let now = clock.now() + S * 30;
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let t = Arc::clone(&t);
            std::thread::spawn(move || {
                let (mut sent, mut accepted) = (0u64, 0u64);
                for op in 0..OPS {
                    // Spread over 30 s of buckets, all inside the window.
                    let at = now + Duration::from_millis((op * 7 + i) % 30_000);
                    if t.try_acquire(at).is_ok() {
                        sent += 1;
                        if op % 3 == 0 {
                            t.record_accept(at);
                            accepted += 1;
                        }
                        t.settle();
                    }
                }
                (sent, accepted)
            })
        })
        .collect();
    let mut accepted = 0;
    let mut sent = 0;
    for h in handles {
        let (s, a) = h.join().expect("worker panicked");
        sent += s;
        accepted += a;
    }
    let at = now + S * 31;
    assert_eq!(t.counts(at), (THREADS * OPS, accepted));
    assert_eq!(t.outstanding(), 0, "every request let through was settled");
    assert!(sent < THREADS * OPS, "the throttle must have refused some");
    assert!(sent > accepted);
}

proptest! {
    #[test]
    fn probability_is_in_unit_interval(req in any::<u64>(), acc in any::<u64>(), k in 0.01f64..100.0) {
        let p = reject_probability(req, acc, k);
        prop_assert!((0.0..1.0).contains(&p), "p = {p}");
    }

    #[test]
    fn probability_is_monotone_in_requests(
        req in 0u64..1_000_000_000_000,
        step in 1u64..1_000_000,
        acc in 0u64..1_000_000_000_000,
        k in 0.01f64..100.0,
        min_rate in 0.0f64..1_000.0,
    ) {
        let cfg = ThrottleConfig { k, min_requests_per_sec: min_rate, ..ThrottleConfig::default() };
        let (t, _) = throttle_with(cfg, 0.0);
        let lo = t.probability_for(req, acc);
        let hi = t.probability_for(req + step, acc);
        prop_assert!(lo <= hi, "P({req}) = {lo} > P({}) = {hi}", req + step);
        prop_assert!(hi < 1.0);
    }
}

#[test]
fn a_slice_counts_at_most_max_slice_count_requests_and_fails_open() {
    // The saturating rule of the compact window (window/pair): past 2^24 − 1 requests in one
    // slice, further requests are not counted, so the throttle refuses less, never more.
    let (t, clock) = throttle_with(ThrottleConfig::default(), 0.0);
    let now = clock.now();
    let max = crate::window::Windowed::<2>::MAX_SLICE_COUNT;
    feed(&t, now, max + 1_000, 0);
    assert_eq!(t.counts(now), (max, 0));
    let next = now + S;
    feed(&t, next, 10, 0); // the next slice counts afresh
    assert_eq!(t.counts(next), (max + 10, 0));
    assert!(t.probability(next) < MAX_PROBABILITY);
}
