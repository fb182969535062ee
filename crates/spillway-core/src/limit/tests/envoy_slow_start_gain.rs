//! `slow_start_gain`: how fast a cold limit grows while answers stay at minRTT (issue 28 item
//! 1, the first seconds after the proxy starts at a large upstream).

use super::*;

/// Slow start only: no sampling window closes within these runs (the gradient's own growth
/// would blur the count of round trips).
fn cfg(gain: f64) -> EnvoyGradientConfig {
    EnvoyGradientConfig {
        live_min_rtt: true,
        initial_limit: Some(20),
        min_concurrency: 3,
        request_count: 5,
        jitter: 0.0,
        interval: Duration::from_secs(60),
        update_interval: Duration::from_secs(600),
        max_concurrency_limit: 100_000,
        slow_start_gain: gain,
        ..EnvoyGradientConfig::default()
    }
}

/// Round trips of `rtt_ms` at an upstream whose every `fast_every`-th answer comes within
/// minRTT's tolerance and the rest at twice minRTT (an exponential service's answers are fast
/// about two times in three), every slot of the limit in use (each round's requests were
/// admitted at the limit the round started with), until the limit reaches `target`.
fn round_trips_to(
    l: &mut EnvoyGradientLimit,
    t0: Instant,
    rtt_ms: u64,
    fast_every: usize,
    target: usize,
) -> u64 {
    // The first request of a start runs alone: the provisional minRTT.
    l.on_sample(&sample(
        at(t0, rtt_ms),
        Duration::from_millis(rtt_ms),
        1,
        false,
    ));
    let mut rounds = 0;
    while l.limit() < target {
        rounds += 1;
        assert!(rounds < 50, "limit {} after 50 round trips", l.limit());
        let level = l.limit();
        let end = at(t0, rtt_ms * (rounds + 1));
        for i in 0..level {
            let rtt = if i % fast_every == 0 {
                rtt_ms
            } else {
                2 * rtt_ms
            };
            l.on_sample(&sample(end, Duration::from_millis(rtt), level, false));
        }
    }
    rounds
}

fn limit(gain: f64, t0: Instant) -> EnvoyGradientLimit {
    EnvoyGradientLimit::new(&cfg(gain), t0, Box::new(FixedRandom(0.0))).expect("valid")
}

#[test]
fn gain_one_doubles_per_round_trip_only_when_every_answer_is_fast() {
    let t0 = Instant::now();
    // 20 → 40 → … → 1280: six round trips to a thousand, as TCP's slow start.
    assert_eq!(round_trips_to(&mut limit(1.0, t0), t0, 10, 1, 1000), 6);
    // One answer in three fast: × 1.33 per round trip.
    let slow = round_trips_to(&mut limit(1.0, t0), t0, 10, 3, 1000);
    assert!(slow >= 12, "{slow} round trips");
}

#[test]
fn a_gain_of_three_doubles_per_round_trip_when_a_third_of_the_answers_are_fast() {
    let t0 = Instant::now();
    assert_eq!(round_trips_to(&mut limit(3.0, t0), t0, 10, 3, 1000), 6);
    // And never more than doubles: every answer fast, still six.
    assert_eq!(round_trips_to(&mut limit(3.0, t0), t0, 10, 1, 1000), 6);
    // Fractional gains add whole slots as their credit accrues: 1.5 per answer, 10 answers.
    let mut l = limit(1.5, t0);
    l.on_sample(&sample(at(t0, 10), 10 * MS, 1, false));
    for _ in 0..10 {
        l.on_sample(&sample(at(t0, 20), 10 * MS, 20, false));
    }
    assert_eq!(l.limit(), 35);
}

#[test]
fn slow_answers_grow_nothing_whatever_the_gain() {
    let t0 = Instant::now();
    let mut l = limit(3.0, t0);
    l.on_sample(&sample(at(t0, 10), 10 * MS, 1, false));
    // Past minRTT's tolerance (10 ms × 1.25): the upstream queues; so do timed-out answers.
    for i in 0..40 {
        l.on_sample(&sample(at(t0, 30 + i), 20 * MS, 20, false));
        l.on_sample(&sample(at(t0, 30 + i), 10 * MS, 20, true));
    }
    assert_eq!(l.limit(), 20);
    // Nor do fast answers of requests admitted when less than half the limit was in use: the
    // limit is already twice their level.
    for i in 0..40 {
        l.on_sample(&sample(at(t0, 80 + i), 10 * MS, 10, false));
    }
    assert_eq!(l.limit(), 20);
}

/// A start's lone first request (the provisional minRTT, 10 ms), then `rounds` round trips of
/// 10 ms, each answering every slot of the limit it started with after `rtt(level)`.
fn answer_rounds(
    l: &mut EnvoyGradientLimit,
    t0: Instant,
    rounds: u64,
    rtt: impl Fn(usize) -> Duration,
) {
    l.on_sample(&sample(at(t0, 10), 10 * MS, 1, false));
    for round in 1..=rounds {
        let level = l.limit();
        for _ in 0..level {
            l.on_sample(&sample(at(t0, 10 * (round + 1)), rtt(level), level, false));
        }
    }
}

#[test]
fn slow_start_stops_at_twice_the_last_level_answered_at_min_rtt() {
    // A 20-worker upstream: requests admitted past 20 in flight wait for a worker, and those
    // that find one freeing soon still come back within the gradient's tolerance (10 ms ×
    // 1.5) but past minRTT's eighth (11.25 ms). Without the ceiling, each round's fast answers
    // took the limit to twice their level, 335 after four rounds.
    let t0 = Instant::now();
    let mut knee = limit(3.0, t0);
    answer_rounds(&mut knee, t0, 4, |level| {
        if level <= 20 {
            10 * MS
        } else {
            13 * MS
        }
    });
    // Twice 20, passed by the one step of the gain that reached it.
    assert_eq!(knee.limit(), 41);
    // Where answers stay at minRTT at every level, the same rounds double as before (and as
    // the knee's did without the ceiling): 20 → 41 → 83 → 167 → 335.
    let mut large = limit(3.0, t0);
    answer_rounds(&mut large, t0, 4, |_| 10 * MS);
    assert_eq!(large.limit(), 335);
}

#[test]
fn the_gain_is_checked() {
    for bad in [0.5, 9.0, f64::NAN] {
        assert!(cfg(bad).validate().is_err(), "{bad}");
    }
}

/// `Limit::probing`: a cold limit is a floor of what the upstream runs while its answers come
/// back at minRTT from every level it lets in flight (the admission controller then refuses no
/// one on a wait estimate made from it), and stops being one once most of them queue or time
/// out, or once it is twice the highest level answered at minRTT (where slow start stops).
#[test]
fn a_cold_limit_probes_while_its_answers_stay_at_min_rtt() {
    let t0 = Instant::now();
    let mut l = limit(3.0, t0);
    assert!(
        l.probing(),
        "before any answer the limit is the initial guess"
    );
    // The first round's low levels: minRTT no longer rests on the first answer alone.
    for level in 1..=3 {
        l.on_sample(&sample(at(t0, 10), 10 * MS, level, false));
    }
    // Every slot in use; an exponential service's answers, two in three within minRTT's
    // tolerance.
    let answer = |l: &mut EnvoyGradientLimit, ms: u64, rtt: Duration, dropped: bool| {
        let level = l.limit();
        l.on_sample(&sample(at(t0, ms), rtt, level, dropped));
    };
    for i in 0..30 {
        let rtt = if i % 3 == 0 { 20 * MS } else { 10 * MS };
        answer(&mut l, 20, rtt, false);
    }
    assert!(l.probing(), "limit {}", l.limit());
    // The upstream queues: every answer past the tolerance. Within ten answers, no longer.
    for _ in 0..10 {
        answer(&mut l, 40, 20 * MS, false);
    }
    assert!(!l.probing());
    // Answers fast again (the queue was a moment's): the limit is a floor again.
    for _ in 0..10 {
        answer(&mut l, 50, 10 * MS, false);
    }
    assert!(l.probing());
    // Timed-out answers count as slow ones.
    for _ in 0..10 {
        answer(&mut l, 60, 10 * MS, true);
    }
    assert!(!l.probing());
}

/// A small upstream: the first round's answers come back at minRTT from as many levels as it
/// has workers, and the limit of 20 is past twice that at once.
#[test]
fn a_limit_past_twice_the_level_answered_at_min_rtt_is_no_floor() {
    let t0 = Instant::now();
    let mut l = limit(3.0, t0);
    for level in 1..=4 {
        l.on_sample(&sample(at(t0, 10), 10 * MS, level, false));
    }
    assert_eq!(l.limit(), 20);
    assert!(!l.probing());
    // A large one: answers at minRTT from 20 in flight; the limit grows, and is a floor.
    let mut large = limit(3.0, t0);
    for level in 1..=20 {
        large.on_sample(&sample(at(t0, 10), 10 * MS, level, false));
    }
    assert!(large.limit() > 20 && large.probing(), "{}", large.limit());
}

#[test]
fn a_limit_without_slow_start_never_probes() {
    let t0 = Instant::now();
    let warm = EnvoyGradientConfig {
        live_min_rtt: false,
        ..cfg(3.0)
    };
    let mut l = EnvoyGradientLimit::new(&warm, t0, Box::new(FixedRandom(0.0))).expect("valid");
    assert!(!l.probing());
    l.on_sample(&sample(at(t0, 10), 10 * MS, 1, false));
    assert!(!l.probing());
    let fixed = crate::limit::FixedLimit::new(&crate::limit::FixedConfig { limit: 10 });
    assert!(!fixed.expect("valid").probing());
}

/// Callers giving up before any answer came (a slow or overloaded upstream): nothing says the
/// initial limit is a floor.
#[test]
fn give_ups_before_any_answer_end_probing() {
    let t0 = Instant::now();
    let mut l = limit(3.0, t0);
    for i in 0..10 {
        l.on_abandoned(&sample(at(t0, 250 + i), 250 * MS, 20, false));
    }
    assert!(!l.probing());
}
