//! A sheddable level's overload is a burst until it has been refused for overload more often
//! than admitted, or for a second on end while its first attempts are refused more than a third
//! of the time: meanwhile its work with a deadline waits as that deadline allows, and in flight
//! above the limit (a cut's leftover) does not shed it.

use super::*;
use crate::controller::episode::BURST_REFUSALS;

/// Limit 1, a queue of 10 with a 100 ms max wait, SHEDDABLE shed at 1.0 (ramp 0.03, as the
/// zero-config preset); a 50 ms service time learnt and the slot held by CRITICAL.
fn held() -> (AdmissionController, ManualClock, Permit) {
    let mut cfg = config(1, 10);
    cfg.queue.max_wait = 100 * MS;
    cfg.headroom = PerCriticality([1.0; Criticality::COUNT]);
    cfg.shed.thresholds = PerCriticality([Some(1.0), None, None, None]);
    cfg.shed.ramp = 0.03;
    let (ctl, clock) = controller(cfg);
    let warm = admitted(ctl.admit(&req(Critical)));
    clock.advance(50 * MS);
    drop(warm);
    let p = admitted(ctl.admit(&req(Critical)));
    (ctl, clock, p)
}

/// Refuses SHEDDABLE first attempts for a full queue over 1.2 s, none admitted, ending now: its
/// overload is sustained.
fn sustain_sheddable(ctl: &AdmissionController, clock: &ManualClock) {
    for _ in 0..12 {
        let _ = ctl
            .inner
            .refuse(RefusalReason::QueueFull, Sheddable, false, ctl.now());
        clock.advance(100 * MS);
    }
    let _ = ctl
        .inner
        .refuse(RefusalReason::QueueFull, Sheddable, false, ctl.now());
}

#[test]
fn a_burst_sheddable_request_waits_past_the_max_wait_and_is_served() {
    let (ctl, clock, p) = held();
    let deadline = ctl.now() + 1000 * MS;
    let mut w = queued(ctl.admit(&AdmissionRequest {
        deadline: Some(deadline),
        ..req(Sheddable)
    }));
    assert!(
        w.give_up_at() > ctl.now() + 500 * MS && w.give_up_at() < deadline - 50 * MS,
        "waits for its deadline less a margin, not the 100 ms max wait: {:?} from now",
        w.give_up_at() - ctl.now()
    );
    clock.advance(300 * MS);
    drop(p);
    match poll(&mut w, &noop()) {
        Poll::Ready(Ok(permit)) => drop(permit),
        other => panic!("served after 300 ms of waiting, got {other:?}"),
    }
}

#[test]
fn once_sustained_sheddable_waits_at_most_the_max_wait() {
    let (ctl, clock, p) = held();
    sustain_sheddable(&ctl, &clock);
    let w = queued(ctl.admit(&AdmissionRequest {
        deadline: Some(ctl.now() + 1000 * MS),
        ..req(Sheddable)
    }));
    assert_eq!(w.give_up_at(), ctl.now() + 100 * MS);
    drop(w);
    drop(p);
}

#[test]
fn in_flight_over_the_limit_sheds_a_level_only_once_its_overload_is_sustained() {
    let (ctl, clock, p) = held();
    let inner = &ctl.inner;
    let now = ctl.now();
    // In flight 1.5 × the limit, no signal: read as a full limit, not past it.
    assert_eq!(inner.shed_utilisation(Sheddable, 1.5, 0.0, now), 1.0);
    // A signal past 1 is overload whatever the level's history.
    assert_eq!(inner.shed_utilisation(Sheddable, 1.5, 1.2, now), 1.2);
    assert_eq!(inner.shed_utilisation(Sheddable, 0.9, 1.2, now), 1.2);
    assert_eq!(inner.shed_utilisation(Sheddable, 0.9, 0.0, now), 0.9);
    assert_eq!(
        inner.burst_levels(now),
        1 << Sheddable.index() | 1 << SheddablePlus.index()
    );
    sustain_sheddable(&ctl, &clock);
    let now = ctl.now();
    assert_eq!(inner.shed_utilisation(Sheddable, 1.5, 0.0, now), 1.5);
    assert_eq!(
        inner.shed_utilisation(SheddablePlus, 1.5, 0.0, now),
        1.0,
        "each level by its own refusals"
    );
    assert_eq!(inner.burst_levels(now), 1 << SheddablePlus.index());
    drop(p);
}

/// SHEDDABLE, admitted `served` times, then refused for a full queue `refusals` times, 10 ms
/// apart — well inside a second.
fn refuse_sheddable(
    ctl: &AdmissionController,
    clock: &ManualClock,
    served: usize,
    refusals: usize,
) {
    for _ in 0..served {
        drop(admitted(ctl.admit(&req(Sheddable))));
    }
    for _ in 0..refusals {
        let _ = ctl
            .inner
            .refuse(RefusalReason::QueueFull, Sheddable, false, ctl.now());
        clock.advance(10 * MS);
    }
}

/// Whether SHEDDABLE's overload is a burst at `now`.
fn burst(ctl: &AdmissionController, now: Instant) -> bool {
    ctl.inner
        .episode
        .is_burst(Sheddable, now, &ctl.inner.counters)
}

#[test]
fn a_level_refused_more_often_than_admitted_is_a_step_not_a_burst() {
    let (ctl, clock) = controller(config(100, 10));
    refuse_sheddable(&ctl, &clock, 0, BURST_REFUSALS as usize - 1);
    let now = ctl.now();
    assert!(burst(&ctl, now), "a handful");
    let _ = ctl
        .inner
        .refuse(RefusalReason::QueueFull, Sheddable, false, now);
    assert!(
        !burst(&ctl, now),
        "{BURST_REFUSALS} refused, none admitted, {:?} into the episode",
        70 * MS
    );
    assert!(
        !ctl.inner.episode.is_sustained(Sheddable, now),
        "not sustained yet"
    );
    assert_eq!(ctl.inner.burst_levels(now), 1 << SheddablePlus.index());
    // The episode over, the level's next refusals are counted afresh.
    clock.advance(1100 * MS);
    let now = ctl.now();
    assert!(burst(&ctl, now));
    let _ = ctl
        .inner
        .refuse(RefusalReason::QueueFull, Sheddable, false, now);
    assert!(burst(&ctl, now));
}

#[test]
fn a_level_mostly_admitted_stays_a_burst_through_its_refusals() {
    let (ctl, clock) = controller(config(100, 10));
    // Admissions before the episode do not count towards it.
    refuse_sheddable(&ctl, &clock, 20, 1);
    refuse_sheddable(&ctl, &clock, 0, 10);
    assert!(!burst(&ctl, ctl.now()));
    clock.advance(1100 * MS);
    refuse_sheddable(&ctl, &clock, 0, 1);
    refuse_sheddable(&ctl, &clock, 30, 20);
    let now = ctl.now();
    assert!(burst(&ctl, now), "20 refused, 30 admitted");
    // Refused for over a second on end, and more than a third of the time: not a burst.
    refuse_sheddable(&ctl, &clock, 0, 90);
    assert!(ctl.inner.episode.is_sustained(Sheddable, ctl.now()));
    assert!(!burst(&ctl, ctl.now()), "111 refused, 30 admitted");
}

/// One 10 ms tick of SHEDDABLE traffic: `first` first attempts admitted, `first_refused` refused
/// for a full queue, and `retries` retries refused.
fn tick(
    ctl: &AdmissionController,
    clock: &ManualClock,
    first: usize,
    first_refused: usize,
    retries: usize,
) {
    for _ in 0..first {
        drop(admitted(ctl.admit(&req(Sheddable))));
    }
    let now = ctl.now();
    for retry in std::iter::repeat(false)
        .take(first_refused)
        .chain(std::iter::repeat(true).take(retries))
    {
        let _ = ctl
            .inner
            .refuse(RefusalReason::QueueFull, Sheddable, retry, now);
    }
    clock.advance(10 * MS);
}

#[test]
fn past_a_second_a_level_is_judged_on_its_first_attempts_and_retries_do_not_count() {
    let (ctl, clock) = controller(config(100, 10));
    // 1.2 s in which 3 first attempts are admitted per one refused, each refusal retried
    // twice (attempts 2 and 3) and refused again: all attempts counted, as many refused as
    // admitted.
    for _ in 0..120 {
        tick(&ctl, &clock, 3, 1, 2);
    }
    let now = ctl.now();
    assert!(ctl.inner.episode.is_sustained(Sheddable, now));
    assert!(burst(&ctl, now), "a quarter of its first attempts refused");
    assert_ne!(ctl.inner.burst_levels(now) & 1 << Sheddable.index(), 0);
    assert_eq!(
        ctl.inner.shed_utilisation(Sheddable, 1.5, 0.0, now),
        1.0,
        "in flight over the limit reads as a full limit while a burst"
    );
    // Half its first attempts refused, no retries: more than a third refused, over the window.
    for _ in 0..200 {
        tick(&ctl, &clock, 1, 1, 0);
    }
    let now = ctl.now();
    assert!(!burst(&ctl, now));
    assert_eq!(ctl.inner.burst_levels(now) & 1 << Sheddable.index(), 0);
    assert_eq!(ctl.inner.shed_utilisation(Sheddable, 1.5, 0.0, now), 1.5);
}

#[test]
fn a_step_up_late_in_a_long_episode_is_judged_on_the_last_seconds() {
    let (ctl, clock) = controller(config(100, 10));
    // 10 s with one first attempt refused per 5 admitted: a burst throughout.
    for i in 0..1000 {
        tick(&ctl, &clock, 5, 1, 0);
        if i % 10 == 0 {
            assert!(burst(&ctl, ctl.now()), "at {i}0 ms");
        }
    }
    // Then two refused per one admitted: since the episode began, 1,000 + 2 × n refused
    // against 5,000 + n admitted would read as a burst for another 5 s; the window that moves
    // each second says otherwise within two.
    let mut turned = None;
    for i in 0..250 {
        tick(&ctl, &clock, 1, 2, 0);
        if !burst(&ctl, ctl.now()) && turned.is_none() {
            turned = Some(i);
        }
    }
    let turned = turned.expect("the step is seen");
    assert!(turned <= 200, "seen after {turned}0 ms");
    assert!(!burst(&ctl, ctl.now()), "and stays seen");
}

#[test]
fn retries_admitted_and_refused_from_the_queue_are_counted_apart() {
    let (ctl, clock) = controller(config(1, 10));
    let held = admitted(ctl.admit(&req(Critical)));
    let retry = |c| AdmissionRequest {
        attempt: 2,
        ..req(c)
    };
    let w = queued(ctl.admit(&retry(Sheddable)));
    clock.advance(200 * MS);
    let r = w.expire();
    assert!(r.reason.retry_elsewhere_can_help(), "{r:?}");
    let mut w = queued(ctl.admit(&retry(Sheddable)));
    drop(held);
    let p = match poll(&mut w, &noop()) {
        Poll::Ready(Ok(p)) => p,
        other => panic!("granted the freed slot, got {other:?}"),
    };
    drop(p);
    drop(admitted(ctl.admit(&req(Sheddable))));
    let counters = &ctl.inner.counters;
    assert_eq!(counters.overload_refusals(Sheddable), 1);
    let level = counters.level(Sheddable);
    assert_eq!(
        (level.retries_refused, level.retries_admitted),
        (1, 1),
        "the retry's refusal and admission counted apart"
    );
    assert_eq!(ctl.snapshot().admitted[Sheddable], 2);
}

#[test]
fn retries_that_refusals_do_not_explain_are_judged_as_demand() {
    let (ctl, clock) = controller(config(100, 10));
    let retry = AdmissionRequest {
        attempt: 2,
        ..req(Sheddable)
    };
    // Every request says it is a retry, none a first attempt: one admitted per two refused.
    for _ in 0..150 {
        drop(admitted(ctl.admit(&retry)));
        for _ in 0..2 {
            let _ = ctl
                .inner
                .refuse(RefusalReason::QueueFull, Sheddable, true, ctl.now());
        }
        clock.advance(10 * MS);
    }
    let now = ctl.now();
    assert!(ctl.inner.episode.is_sustained(Sheddable, now));
    assert!(
        !burst(&ctl, now),
        "no first attempt refused explains 450 retries: judged on every attempt"
    );
}

#[test]
fn a_level_whose_work_waits_in_the_queue_counts_the_waiters_as_refused() {
    let (ctl, clock) = controller(config(4, 200));
    // 1.2 s in which 3 first attempts are admitted per one refused: a burst.
    for _ in 0..120 {
        tick(&ctl, &clock, 3, 1, 0);
    }
    assert!(burst(&ctl, ctl.now()));
    // The slots CRITICAL may take held, and 100 SHEDDABLE requests queued behind them (a
    // burst's waiters wait as their deadlines allow; none has been refused yet).
    let held: Vec<_> = (0..3)
        .map(|_| admitted(ctl.admit(&req(Critical))))
        .collect();
    let waiters: Vec<_> = (0..100)
        .map(|_| queued(ctl.admit(&req(Sheddable))))
        .collect();
    let now = ctl.now();
    assert!(
        !burst(&ctl, now),
        "100 waiting and 120 refused count against 357 admitted"
    );
    drop(waiters);
    assert!(
        burst(&ctl, now),
        "the queue emptied, its waiters no longer count"
    );
    drop(held);
}
