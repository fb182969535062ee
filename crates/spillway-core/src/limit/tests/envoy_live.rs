//! `live_min_rtt`, `initial_limit` and `latency_slack`: the Envoy gradient without pinning, and
//! with a latency tolerance the callers' budget allows (issue 28, "do no harm below capacity").

use super::*;

fn live_cfg() -> EnvoyGradientConfig {
    EnvoyGradientConfig {
        live_min_rtt: true,
        initial_limit: Some(20),
        min_concurrency: 3,
        request_count: 5,
        jitter: 0.0,
        interval: Duration::from_secs(1),
        ..EnvoyGradientConfig::default()
    }
}

fn live(cfg: &EnvoyGradientConfig, t0: Instant) -> EnvoyGradientLimit {
    EnvoyGradientLimit::new(cfg, t0, Box::new(FixedRandom(0.0))).expect("valid config")
}

#[test]
fn starts_at_the_initial_limit_and_never_pins() {
    let t0 = Instant::now();
    let mut l = live(&live_cfg(), t0);
    assert_eq!(l.limit(), 20, "no pinned measurement at start");
    assert!(!l.measuring_min_rtt());
    // The first request of a start ran alone: it is minRTT's first (provisional) sample.
    l.on_sample(&sample(at(t0, 10), 10 * MS, 1, false));
    assert!((l.min_rtt_nanos() - 10e6).abs() <= 0.05 * 10e6);
    // A minute of steady load at minRTT with every slot used: the limit grows (app-limited
    // rule off here) and is never pinned back, where Envoy's window would pin it every 1 s.
    let mut lowest = usize::MAX;
    for w in 1..600u64 {
        let n = l.limit().min(64);
        envoy_window_at(&mut l, t0, 100 * w, 10, n);
        lowest = lowest.min(l.limit());
        assert!(!l.measuring_min_rtt());
    }
    assert!(lowest >= 20, "lowest limit {lowest}");
}

#[test]
fn min_rtt_comes_only_from_low_concurrency_samples() {
    let t0 = Instant::now();
    let mut l = live(&live_cfg(), t0);
    // Busy from the start: 40 ms answers with 30 in flight say nothing about minRTT; with no
    // minRTT the limit holds.
    for w in 0..4u64 {
        envoy_window_at(&mut l, t0, 100 * w, 40, 30);
    }
    assert_eq!(l.min_rtt_nanos(), 0.0);
    assert_eq!(l.limit(), 20, "no minRTT yet: the limit holds");
    // Had nothing run at low concurrency for 5 windows, it would go to the floor to find out.
    let mut never = live(&live_cfg(), t0);
    for w in 0..7u64 {
        envoy_window_at(&mut never, t0, 100 * w, 40, 30);
    }
    assert_eq!(never.limit(), 3);
    // A trough: requests that ran with at most 3 in flight measure it.
    for i in 0..5u64 {
        l.on_sample(&sample(at(t0, 450 + i), 8 * MS, 2, false));
    }
    assert!(
        (l.min_rtt_nanos() - 8e6).abs() <= 0.05 * 8e6,
        "{}",
        l.min_rtt_nanos()
    );
    // Later busy windows do not move it.
    for w in 5..10u64 {
        {
            let n = l.limit();
            envoy_window_at(&mut l, t0, 100 * w, 40, n);
        }
    }
    assert!((l.min_rtt_nanos() - 8e6).abs() <= 0.05 * 8e6);
    assert!(l.limit() < 20, "40 ms against 8 ms: cut");
}

#[test]
fn a_slower_upstream_is_re_measured_at_the_floor() {
    let t0 = Instant::now();
    let mut l = live(&live_cfg(), t0);
    l.on_sample(&sample(at(t0, 10), 10 * MS, 1, false));
    // The upstream now takes 40 ms at any concurrency: cut to the floor (3) …
    let mut w = 1u64;
    while l.limit() > 3 {
        {
            let n = l.limit();
            envoy_window_at(&mut l, t0, 100 * w, 40, n);
        }
        w += 1;
        assert!(w < 100, "cut to the floor");
    }
    // … where every sample is a low-concurrency one: minRTT becomes 40 ms and the limit
    // grows again.
    for _ in 0..12 {
        {
            let n = l.limit();
            envoy_window_at(&mut l, t0, 100 * w, 40, n);
        }
        w += 1;
    }
    assert!(
        (l.min_rtt_nanos() - 40e6).abs() <= 0.05 * 40e6,
        "{}",
        l.min_rtt_nanos()
    );
    assert!(l.limit() > 3, "grows again at the new minRTT");
}

#[test]
fn a_slower_upstream_is_re_measured_once_the_limit_is_low_not_after_a_full_measurement() {
    let t0 = Instant::now();
    let cfg = EnvoyGradientConfig {
        request_count: 25,
        ..live_cfg()
    };
    let mut l = live(&cfg, t0);
    // A completed measurement: 10 ms.
    for i in 0..25u64 {
        l.on_sample(&sample(at(t0, 10 + i), 10 * MS, 1, false));
    }
    assert!((l.min_rtt_nanos() - 10e6).abs() <= 0.05 * 10e6);
    // The upstream now takes 40 ms at any concurrency: the gradient cuts to min_concurrency.
    let mut w = 1u64;
    while l.limit() > 3 {
        {
            let n = l.limit();
            envoy_window_at(&mut l, t0, 100 * w, 40, n);
        }
        w += 1;
        assert!(w < 100, "cut to min_concurrency");
    }
    // Answers at low concurrency but with others in flight may hold our own queue: not used.
    for i in 0..6u64 {
        l.on_sample(&sample(at(t0, 100 * w + 40 + i), 40 * MS, 3, false));
    }
    assert!((l.min_rtt_nanos() - 10e6).abs() <= 0.05 * 10e6);
    // Six that ran alone (twice min_concurrency), far fewer than the 25 a measurement takes:
    // minRTT is 40 ms.
    for i in 0..6u64 {
        l.on_sample(&sample(at(t0, 100 * w + 50 + i), 40 * MS, 1, false));
    }
    assert!(
        (l.min_rtt_nanos() - 40e6).abs() <= 0.05 * 40e6,
        "{}",
        l.min_rtt_nanos()
    );
}

#[test]
fn latency_within_the_slack_of_the_budget_is_not_cut() {
    let t0 = Instant::now();
    // A fast upstream (1 ms alone) behind a busy host: 20 ms at any concurrency. Returns the
    // lowest limit on the way.
    let run = |slack: f64| {
        let cfg = EnvoyGradientConfig {
            latency_slack: slack,
            ..live_cfg()
        };
        let mut l = live(&cfg, t0);
        l.set_latency_budget(Duration::from_millis(100));
        l.on_sample(&sample(at(t0, 10), MS, 1, false));
        let mut lowest = l.limit();
        for w in 1..30u64 {
            let n = l.limit();
            envoy_window_at(&mut l, t0, 100 * w, 20, n);
            lowest = lowest.min(l.limit());
        }
        lowest
    };
    // Envoy's rule alone: 20 ms ≫ 1.25 ms, cut to the floor (until minRTT is re-measured
    // there, refusing meanwhile).
    assert_eq!(run(0.0), 3);
    assert_eq!(run(0.25), 20, "20 ms ≤ 1 ms + 25 ms: never cut");
    // Beyond the slack the gradient cuts as before.
    let cfg = EnvoyGradientConfig {
        latency_slack: 0.25,
        ..live_cfg()
    };
    let mut l = live(&cfg, t0);
    l.set_latency_budget(Duration::from_millis(100));
    l.on_sample(&sample(at(t0, 10), MS, 1, false));
    for w in 1..6u64 {
        let n = l.limit();
        envoy_window_at(&mut l, t0, 100 * w, 60, n);
    }
    assert!(l.limit() < 10, "60 ms > 26 ms tolerated: {}", l.limit());
}

/// Answers `(level, ms)` in the order given, the first at 101 ms and one a millisecond after
/// the other: each admitted at that in-flight level, `ms` before it came back. Returns minRTT
/// (ms) after each.
fn answers(l: &mut EnvoyGradientLimit, t0: Instant, seq: &[(usize, u32)]) -> Vec<f64> {
    (101..)
        .zip(seq)
        .map(|(t, &(level, ms))| {
            l.on_sample(&sample(at(t0, t), ms * MS, level, false));
            l.min_rtt_nanos() / 1e6
        })
        .collect()
}

/// The start's first round, admitted at levels 1..=20 (the initial limit) before any answer
/// came back, in the order a variable service answers: level 1 in `low_ms`, levels 20 down to
/// 4 in `round_ms`, levels 2 and 3 in `low_ms`.
fn first_round(low_ms: u32, round_ms: u32) -> Vec<(usize, u32)> {
    let mut seq = vec![(1, low_ms)];
    seq.extend((4..=20).rev().map(|level| (level, round_ms)));
    seq.extend([(2, low_ms), (3, low_ms)]);
    seq
}

#[test]
fn a_faster_first_round_lowers_the_provisional_min_rtt_once_it_is_all_in() {
    let t0 = Instant::now();
    // Three requests at up to 3 in flight (fewer than request_count: no measurement) drew
    // 60 ms; the seventeen admitted after them, up to the initial limit and before any
    // answer, 20 ms.
    let round = first_round(60, 20);
    let mut l = live(&live_cfg(), t0);
    let seen = answers(&mut l, t0, &round);
    assert!(
        seen[..19].iter().all(|&m| (m - 60.0).abs() <= 3.0),
        "the low levels' median until the round is all in: {seen:?}"
    );
    assert!(
        (seen[19] - 20.0).abs() <= 1.0,
        "the round's median: {seen:?}"
    );
    // Requests admitted after the first answer came back are no part of it, however short:
    // with nineteen of the round in, ten more 5 ms answers change nothing; the round's last
    // answer still completes it.
    let mut later = live(&live_cfg(), t0);
    answers(&mut later, t0, &round[..19]);
    for i in 0..10u64 {
        later.on_sample(&sample(at(t0, 130 + i), 5 * MS, 8, false));
    }
    assert!((later.min_rtt_nanos() / 1e6 - 60.0).abs() <= 3.0);
    later.on_sample(&sample(at(t0, 140), 60 * MS, 3, false));
    assert!((later.min_rtt_nanos() / 1e6 - 20.0).abs() <= 1.0);
    // One of the round timed out (level 20, its caller gone after 100 ms): the rest would be
    // its fast part; the low levels' median stands.
    let mut spoiled = live(&live_cfg(), t0);
    answers(&mut spoiled, t0, &round[..1]);
    spoiled.on_sample(&sample(at(t0, 102), 100 * MS, 20, true));
    let seen = answers(&mut spoiled, t0, &round[2..]);
    assert!(seen.iter().all(|&m| (m - 60.0).abs() <= 3.0), "{seen:?}");
}

#[test]
fn a_slower_first_round_leaves_the_low_levels_estimate() {
    // An upstream with fewer workers than the initial limit queued the round's upper levels:
    // the low levels' 10 ms stands.
    let t0 = Instant::now();
    let mut l = live(&live_cfg(), t0);
    let seen = answers(&mut l, t0, &first_round(10, 50));
    assert!(seen.iter().all(|&m| (m - 10.0).abs() <= 0.5), "{seen:?}");
    // Once a measurement has completed the round plays no part: a faster answer at level 10
    // moves nothing.
    let mut done = live(&live_cfg(), t0);
    for i in 0..5u64 {
        done.on_sample(&sample(at(t0, 10 + i), 30 * MS, 2, false));
    }
    for i in 0..40u64 {
        done.on_sample(&sample(at(t0, 20 + i), 5 * MS, 10, false));
    }
    assert!((done.min_rtt_nanos() / 1e6 - 30.0).abs() <= 1.5);
}

#[test]
fn a_start_does_not_end_on_its_first_answers_back() {
    let cfg = zero_config_envoy();
    let t0 = Instant::now();
    let mut l = live(&cfg, t0);
    // The first two answers back of the five requests a start admits at up to 5 in flight:
    // 10 ms each, the fastest of a variable service's five.
    l.on_sample(&sample(at(t0, 10), 10 * MS, 1, false));
    l.on_sample(&sample(at(t0, 11), 10 * MS, 2, false));
    assert!((l.min_rtt_nanos() / 1e6 - 10.0).abs() <= 0.5);
    // A window of the service's typical 48 ms, admitted at 16 in flight: past twice the
    // tolerance of a 10 ms minRTT. Its first eight were admitted before the first answer came
    // back, in the start's first round, which is not all in (ten of its sixteen answered).
    let window = |l: &mut EnvoyGradientLimit, from: u64| {
        for i in 0..30u64 {
            l.on_sample(&sample(at(t0, from + i), 48 * MS, 16, false));
        }
    };
    window(&mut l, 50);
    assert_eq!(l.limit(), 20, "no cut on the first two answers back alone");
    // With three of the five in, the median rests on more than the fastest two: the same
    // window ends slow start and cuts, as before.
    l.on_sample(&sample(at(t0, 95), 30 * MS, 3, false));
    assert!((l.min_rtt_nanos() / 1e6 - 10.0).abs() <= 0.5);
    window(&mut l, 100);
    assert!(l.limit() < 20, "limit {}", l.limit());
}

#[test]
fn the_low_levels_median_at_a_start_counts_the_ones_still_out_as_slower() {
    // A start's first round: 20 requests admitted before any answer, levels 1..=20. A
    // variable upstream with workers for all answers them in order of latency, so of the
    // three low levels (1..=3) the first two back are the fastest two; the median of the
    // three is the second back, not the first.
    let t0 = Instant::now();
    let mut l = live(&live_cfg(), t0);
    let seen = answers(&mut l, t0, &[(15, 5), (1, 10), (9, 20), (2, 30)]);
    assert_eq!(seen[0], 0.0, "no low level back: no minRTT");
    assert!((seen[1] - 10.0).abs() <= 0.5, "one of three back: {seen:?}");
    assert!(
        (seen[3] - 30.0).abs() <= 1.0,
        "the median's rank is in: {seen:?}"
    );
    // The same answers with the round seen to reach only level 2 (a light start): both low
    // levels it holds are back, and their plain median stands.
    let mut light = live(&live_cfg(), t0);
    let seen = answers(&mut light, t0, &[(1, 10), (2, 30)]);
    assert!((seen[1] - 10.0).abs() <= 0.5, "{seen:?}");
}

#[test]
fn answers_back_before_min_rtt_count_towards_slow_starts_ceiling() {
    // The zero-config start at a large, variable upstream: the first two answers back came
    // from levels 15 and 11 (10 and 40 ms), before the first low level's (60 ms) gave a
    // minRTT. They ran well within its tolerance, so the limit of 20 is no ceiling yet: the
    // limit still probes (its queue is not an overload's), and the level-15 answer, admitted
    // with more than half the limit in use, grows it as if minRTT had been known.
    let t0 = Instant::now();
    let mut l = live(&zero_config_envoy(), t0);
    answers(&mut l, t0, &[(15, 10), (11, 40)]);
    assert!(l.probing(), "before any minRTT");
    answers(&mut l, t0, &[(1, 60)]);
    assert!((l.min_rtt_nanos() / 1e6 - 60.0).abs() <= 1.0);
    assert!(l.probing(), "twice level 15 is past the initial 20");
    assert_eq!(
        l.limit(),
        23,
        "one fast answer at a level using the limit, gain 3"
    );
}

#[test]
fn a_start_probes_while_min_rtt_rests_on_its_first_answers_back() {
    // The lowest level's answer came back first (19 ms), then answers from levels 7 and 11
    // (37 and 42 ms) of the same first round: minRTT rests on the fastest answer of five
    // low levels, and twice the highest level answered within an eighth of it (1) is no
    // ceiling: the limit is still probing.
    let t0 = Instant::now();
    let mut l = live(&zero_config_envoy(), t0);
    answers(&mut l, t0, &[(1, 19), (7, 37), (11, 42)]);
    assert!((l.min_rtt_nanos() / 1e6 - 19.0).abs() <= 0.5);
    assert!(l.probing(), "minRTT rests on one answer of five");
    // Levels 2 and 3 back (230 and 330 ms): the third of the five is the median. The ceiling
    // counts again: level 3 answered within an eighth of it, and twice that is below 20.
    answers(&mut l, t0, &[(2, 230), (3, 330)]);
    assert!((l.min_rtt_nanos() / 1e6 - 330.0).abs() <= 5.0);
    assert!(!l.probing());
}

#[test]
fn a_start_stops_waiting_for_its_first_round_once_one_of_it_is_abandoned_or_after_64_answers() {
    // As above, minRTT rests on the lowest level's answer alone while the round is out …
    let t0 = Instant::now();
    let start = |l: &mut EnvoyGradientLimit| {
        answers(l, t0, &[(1, 19), (7, 37)]);
        assert!(l.probing());
    };
    // … until the caller of one of the round's requests gives up, even within minRTT's
    // tolerance (25 ms, admitted before the first answer came back): its latency is unknown,
    // so is the round's median, and the lowest level's answer is judged as any provisional
    // minRTT (the limit of 20 is past twice level 1).
    let mut l = live(&zero_config_envoy(), t0);
    start(&mut l);
    l.on_abandoned(&sample(at(t0, 110), 25 * MS, 12, false));
    assert!(!l.probing(), "the round is spoiled");
    // … or until 64 answers have come back (a request of the round may end with no sample at
    // all: a connection that failed): here from a round of 100 never all in.
    let mut l = live(&zero_config_envoy(), t0);
    start(&mut l);
    let more: Vec<(usize, u32)> = (0..61).map(|_| (100, 300)).collect();
    answers(&mut l, t0, &more);
    assert!(l.probing(), "63 answers");
    answers(&mut l, t0, &[(100, 300)]);
    assert!(!l.probing(), "64 answers");
}

#[test]
fn new_fields_validate() {
    let bad = |cfg: EnvoyGradientConfig| cfg.validate().expect_err("invalid").field;
    assert_eq!(
        bad(EnvoyGradientConfig {
            initial_limit: Some(2),
            ..live_cfg()
        }),
        "limit.envoy_gradient.initial_limit"
    );
    assert_eq!(
        bad(EnvoyGradientConfig {
            initial_limit: Some(5000),
            ..live_cfg()
        }),
        "limit.envoy_gradient.initial_limit"
    );
    assert_eq!(
        bad(EnvoyGradientConfig {
            latency_slack: 1.5,
            ..live_cfg()
        }),
        "limit.envoy_gradient.latency_slack"
    );
    assert!(live_cfg().validate().is_ok());
}
