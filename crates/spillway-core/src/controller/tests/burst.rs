//! A sheddable level's overload is a burst until it has been refused for overload for a
//! second on end, or more often than admitted: meanwhile its work with a deadline waits as
//! that deadline allows, and in flight above the limit (a cut's leftover) does not shed it.

use super::*;
use crate::controller::refusal::BURST_REFUSALS;

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

/// Notes SHEDDABLE refused for overload over 1.1 s, ending now: its overload is sustained.
fn sustain_sheddable(ctl: &AdmissionController, clock: &ManualClock) {
    for _ in 0..12 {
        ctl.inner
            .episode
            .refused(Sheddable, ctl.now(), &ctl.inner.counters);
        clock.advance(100 * MS);
    }
    ctl.inner
        .episode
        .refused(Sheddable, ctl.now(), &ctl.inner.counters);
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
            .refuse(RefusalReason::QueueFull, Sheddable, ctl.now());
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
    let _ = ctl.inner.refuse(RefusalReason::QueueFull, Sheddable, now);
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
    let _ = ctl.inner.refuse(RefusalReason::QueueFull, Sheddable, now);
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
    // Refused for over a second on end: sustained, however much was admitted.
    refuse_sheddable(&ctl, &clock, 0, 90);
    assert!(ctl.inner.episode.is_sustained(Sheddable, ctl.now()));
    assert!(!burst(&ctl, ctl.now()));
}
