//! Refusing early: a request that cannot start in time is refused on arrival, not after
//! waiting out the queue.

use super::*;

/// Limit 2 (no headroom), queue of 10, 100 ms max wait, FIFO; service time learnt as 50 ms
/// and both slots taken: a slot frees about every 25 ms.
fn saturated() -> (AdmissionController, ManualClock, Vec<Permit>) {
    saturated_with_queue(10)
}

/// [`saturated`] with room for `queue` waiters.
fn saturated_with_queue(queue: usize) -> (AdmissionController, ManualClock, Vec<Permit>) {
    let mut cfg = config(2, queue);
    cfg.queue.max_wait = 100 * MS;
    cfg.headroom = PerCriticality([1.0; Criticality::COUNT]);
    let (ctl, clock) = controller(cfg);
    let warm = admitted(ctl.admit(&req(Critical)));
    clock.advance(50 * MS);
    drop(warm);
    let held = vec![
        admitted(ctl.admit(&req(Sheddable))),
        admitted(ctl.admit(&req(Sheddable))),
    ];
    (ctl, clock, held)
}

#[test]
fn refused_on_arrival_when_the_wait_ahead_exceeds_the_max_wait() {
    let (ctl, _clock, _held) = saturated();
    assert_eq!(ctl.snapshot().expected_service_time, 50 * MS);
    // Expected waits 25, 50, 75, 100 ms: queued; 125 ms: refused at once.
    let queued: Vec<_> = (0..4)
        .map(|_| match ctl.admit(&req(Sheddable)) {
            Admission::Queued(q) => q,
            other => panic!("expected queued, got {other:?}"),
        })
        .collect();
    let r = refused(ctl.admit(&req(Sheddable)));
    assert_eq!(r.reason, RefusalReason::QueueFull);
    assert_eq!(ctl.snapshot().queued, 4);
    // A CRITICAL arrival goes first; the SHEDDABLE it pushes past 100 ms is refused now.
    let c = ctl.admit(&req(Critical));
    assert!(c.is_queued(), "{c:?}");
    let snap = ctl.snapshot();
    assert_eq!(snap.queued, 4);
    assert_eq!(snap.refused.get(RefusalReason::QueueFull, Sheddable), 2);
    drop(queued);
}

/// While CRITICAL takes every slot that frees and SHEDDABLE is being shed, a SHEDDABLE arrival
/// would not be served however short the queue: once that has been seen, it is refused at the
/// door, not after waiting out its budget. Seen means seen while SHEDDABLE waited: slots that
/// CRITICAL took while none of it was queued say nothing of what it would get, and judging on
/// them refused the level at the door for good (`spillway demo` with throttling clients, a
/// 4-worker backend idling while SHEDDABLE, owed 30 % of it, was refused with none queued).
#[test]
fn a_sheddable_arrival_is_refused_at_once_while_critical_takes_every_slot() {
    let (ctl, clock, held) = saturated();
    let mut running: std::collections::VecDeque<Permit> = held.into();
    let critical_round = |running: &mut std::collections::VecDeque<Permit>| {
        let mut q = queued(ctl.admit(&req(Critical)));
        clock.advance(25 * MS);
        drop(running.pop_front());
        match poll(&mut q, &noop()) {
            Poll::Ready(Ok(p)) => running.push_back(p),
            other => panic!("expected a grant, got {other:?}"),
        }
    };
    for _ in 0..40 {
        critical_round(&mut running);
    }
    let snap = ctl.snapshot();
    assert_eq!(snap.queued, 0);
    // Each permit is held for two rounds: about 50 ms of service, a slot every 25 ms.
    assert!(snap.expected_service_time > 45 * MS, "{snap:?}");
    // Nothing shed yet: the plain estimate queues SHEDDABLE (25, 50, 75, 100 ms), and refuses
    // the fifth (125 ms) — now SHEDDABLE is being shed.
    let waiting: Vec<_> = (0..4).map(|_| queued(ctl.admit(&req(Sheddable)))).collect();
    assert_eq!(
        refused(ctl.admit(&req(Sheddable))).reason,
        RefusalReason::QueueFull
    );
    drop(waiting);
    assert_eq!(ctl.snapshot().queued, 0);
    // The queue is empty again and no slot went while SHEDDABLE waited: its share is not known,
    // and one arrival waits on the plain estimate (one slot to free, 25 ms). While it waits
    // CRITICAL takes every slot, and another arrival joins behind it each round while the share
    // of the slots seen says it could start in time — until it says not.
    let mut waiting = queued(ctl.admit(&req(Sheddable)));
    let mut timed_out = 0;
    let mut refused_in_round = None;
    for round in 0..40 {
        critical_round(&mut running);
        match poll(&mut waiting, &noop()) {
            Poll::Pending => {}
            Poll::Ready(Err(r)) => {
                // Out of time, or pushed back past it by the CRITICAL arrival.
                assert!(
                    matches!(
                        r.reason,
                        RefusalReason::QueueTimeout | RefusalReason::QueueFull
                    ),
                    "{r:?}"
                );
                timed_out += 1;
                waiting = queued(ctl.admit(&req(Sheddable)));
                continue;
            }
            Poll::Ready(Ok(_)) => panic!("SHEDDABLE served while CRITICAL took every slot"),
        }
        match ctl.admit(&req(Sheddable)) {
            Admission::Refused(r) => {
                assert_eq!(r.reason, RefusalReason::QueueFull);
                refused_in_round = Some(round);
                break;
            }
            Admission::Queued(behind) => drop(behind),
            other => panic!("expected queued or refused, got {other:?}"),
        }
    }
    // Learnt within a second of contested slots, at the cost of some waits.
    let round = refused_in_round.expect("refused at the door once its share was seen");
    assert!(
        timed_out >= 1 && timed_out < round,
        "round {round}, {timed_out} out of time"
    );
    drop(waiting);
    // CRITICAL has nothing above it: it still queues for the next slot.
    let _c = queued(ctl.admit(&req(Critical)));
    drop(running);
}

#[test]
fn work_above_a_level_being_shed_waits_out_its_max_wait_instead_of_the_estimate() {
    let (ctl, clock, _held) = saturated();
    let queue = |a: Admission| match a {
        Admission::Queued(q) => q,
        other => panic!("expected queued, got {other:?}"),
    };
    let mut waiting: Vec<_> = (0..4)
        .map(|_| queue(ctl.admit(&req(SheddablePlus))))
        .collect();
    // Nothing less critical is being shed: SHEDDABLE_PLUS is refused on the estimate (125 ms).
    let r = refused(ctl.admit(&req(SheddablePlus)));
    assert_eq!(r.reason, RefusalReason::QueueFull);
    // SHEDDABLE is refused for overload (on the estimate too): it is the level being shed.
    let r = refused(ctl.admit(&req(Sheddable)));
    assert_eq!(r.reason, RefusalReason::QueueFull);
    // Now SHEDDABLE_PLUS waits: the slots SHEDDABLE gives up come to it first.
    waiting.push(queue(ctl.admit(&req(SheddablePlus))));
    // A CRITICAL arrival pushes the SHEDDABLE_PLUS back without dropping them on the estimate.
    waiting.push(queue(ctl.admit(&req(Critical))));
    let snap = ctl.snapshot();
    assert_eq!(snap.queued, 6);
    assert_eq!(snap.refused.get(RefusalReason::QueueFull, SheddablePlus), 1);
    // A max wait after SHEDDABLE was last refused, the estimate applies again.
    clock.advance(102 * MS);
    let r = refused(ctl.admit(&req(SheddablePlus)));
    assert_eq!(r.reason, RefusalReason::QueueFull);
    drop(waiting);
}

#[test]
fn with_a_deadline_the_wait_ends_when_it_could_no_longer_finish() {
    let (ctl, clock, _held) = saturated();
    // 60 ms left, 50 of them needed for service: 10 ms to wait, less than a slot's 25 ms.
    let r = refused(ctl.admit(&AdmissionRequest {
        deadline: Some(ctl.now() + 60 * MS),
        ..req(Critical)
    }));
    assert_eq!(r.reason, RefusalReason::DeadlineExceeded);
    // 130 ms left: queued, and given up at 80 ms (deadline less the 50 ms service time),
    // before the 100 ms max wait.
    let q = match ctl.admit(&AdmissionRequest {
        deadline: Some(ctl.now() + 130 * MS),
        ..req(Critical)
    }) {
        Admission::Queued(q) => q,
        other => panic!("expected queued, got {other:?}"),
    };
    assert_eq!(q.give_up_at(), ctl.now() + 80 * MS);
    clock.advance(60 * MS);
    let mut q = q;
    assert!(
        poll(&mut q, &noop()).is_pending(),
        "still within its budget"
    );
    clock.advance(20 * MS);
    match poll(&mut q, &noop()) {
        Poll::Ready(Err(r)) => assert_eq!(r.reason, RefusalReason::DeadlineExceeded),
        other => panic!("expected a deadline refusal, got {other:?}"),
    }
    // 400 ms left: CRITICAL waits as long as its deadline allows (350 ms), not the flat max
    // wait; it is refused for queueing when that runs out.
    let q = match ctl.admit(&AdmissionRequest {
        deadline: Some(ctl.now() + 400 * MS),
        ..req(Critical)
    }) {
        Admission::Queued(q) => q,
        other => panic!("expected queued, got {other:?}"),
    };
    assert_eq!(q.give_up_at(), ctl.now() + 350 * MS);
    clock.advance(200 * MS);
    let mut q = q;
    assert!(
        poll(&mut q, &noop()).is_pending(),
        "past the max wait, within its deadline's budget"
    );
    clock.advance(150 * MS);
    match poll(&mut q, &noop()) {
        Poll::Ready(Err(r)) => assert_eq!(r.reason, RefusalReason::QueueTimeout),
        other => panic!("expected a queue timeout, got {other:?}"),
    }
}

#[test]
fn a_level_refused_for_seconds_is_sustained_while_a_level_refused_once_is_momentary() {
    // Limit 1, no queue: with the slot held, every request is refused for overload.
    let (ctl, clock) = controller(config(1, 0));
    let _held = admitted(ctl.admit(&req(Critical)));
    for _ in 0..11 {
        assert!(refused(ctl.admit(&req(Sheddable))).retry_after.is_some());
        clock.advance(100 * MS);
    }
    let s = refused(ctl.admit(&req(Sheddable)));
    assert!(
        s.sustained && !s.retry_can_help(),
        "SHEDDABLE refused for 1.1 s"
    );
    // CRITICAL's first refusal in that surge: its own overload is momentary, retry elsewhere.
    let c = refused(ctl.admit(&req(Critical)));
    assert!(
        !c.sustained && c.retry_can_help(),
        "CRITICAL refused once: {c:?}"
    );
    // And SHEDDABLE stays sustained meanwhile.
    assert!(refused(ctl.admit(&req(Sheddable))).sustained);
}

#[test]
fn overload_refusals_become_sustained_after_a_second_and_momentary_after_a_pause() {
    // Limit 1, no queue: every second request is refused `concurrency_limit`.
    let (ctl, clock) = controller(config(1, 0));
    let _held = admitted(ctl.admit(&req(Critical)));
    let first = refused(ctl.admit(&req(Critical)));
    assert_eq!(first.reason, RefusalReason::ConcurrencyLimit);
    assert!(
        !first.sustained && first.retry_can_help(),
        "momentary: retry elsewhere"
    );
    for _ in 0..9 {
        clock.advance(100 * MS);
        assert!(
            !refused(ctl.admit(&req(Critical))).sustained,
            "under a second"
        );
    }
    clock.advance(100 * MS);
    let r = refused(ctl.admit(&req(Critical)));
    assert!(
        r.sustained && !r.retry_can_help(),
        "1 s of refusals: sustained"
    );
    assert_eq!(r.retry_after, Some(DEFAULT_OVERLOAD_RETRY_AFTER));
    // A pause longer than the episode gap: momentary again.
    clock.advance(EPISODE_GAP + MS);
    assert!(!refused(ctl.admit(&req(Critical))).sustained);
    // Refusals that are not about overload never are.
    clock.advance(2 * SUSTAINED_AFTER);
    let d = refused(ctl.admit(&AdmissionRequest {
        deadline: Some(ctl.now()),
        ..req(Critical)
    }));
    assert_eq!(d.reason, RefusalReason::DeadlineExceeded);
    assert!(!d.sustained && !d.retry_can_help());
}

#[test]
fn critical_waits_for_its_deadline_only_when_expected_to_start_in_time() {
    let (ctl, _clock, _held) = saturated();
    // A slot frees every 25 ms. 250 ms left, 200 of them to wait: behind 7 queued (8 slots to
    // free, 200 ms) it may wait for all of them, past the 100 ms max wait.
    let _ahead: Vec<_> = (0..7).map(|_| queued(ctl.admit(&req(Critical)))).collect();
    let with_deadline = || AdmissionRequest {
        deadline: Some(ctl.now() + 250 * MS),
        ..req(Critical)
    };
    let fits = queued(ctl.admit(&with_deadline()));
    assert_eq!(fits.give_up_at(), ctl.now() + 200 * MS);
    // Behind 8 (225 ms) it is not expected to start in time: the max wait bounds it, so a
    // CRITICAL queue that outgrew its callers' deadlines is not held until they run out.
    let late = queued(ctl.admit(&with_deadline()));
    assert_eq!(late.give_up_at(), ctl.now() + 100 * MS);
}

/// CRITICAL work not expected to start within its deadline's budget waits out the max wait
/// (above) — unless even a drain twice as fast as estimated would not start it in time: then it
/// is refused at once, not after waiting in vain.
#[test]
fn critical_is_refused_at_once_when_twice_the_drain_would_still_be_too_late() {
    let (ctl, _clock, _held) = saturated_with_queue(40);
    // A slot frees every 25 ms; 250 ms left, 200 of them to wait.
    let with_deadline = || AdmissionRequest {
        deadline: Some(ctl.now() + 250 * MS),
        ..req(Critical)
    };
    let mut ahead: Vec<_> = (0..15).map(|_| queued(ctl.admit(&req(Critical)))).collect();
    // Behind 15 (16 slots, 400 ms): twice as fast would start it at 200 ms, in time: it waits,
    // bounded by the max wait.
    let edge = queued(ctl.admit(&with_deadline()));
    assert_eq!(edge.give_up_at(), ctl.now() + 100 * MS);
    ahead.push(edge);
    // Behind 16 (425 ms): not even then.
    let r = refused(ctl.admit(&with_deadline()));
    assert_eq!(r.reason, RefusalReason::QueueFull);
    assert_eq!(ctl.snapshot().queued, 16);
    // Without a deadline nothing says when it is too late: it waits out the max wait.
    let patient = queued(ctl.admit(&req(Critical)));
    assert_eq!(patient.give_up_at(), ctl.now() + 100 * MS);
    drop(ahead);
}

/// At a cold start no service time is known, so a waiter with a deadline is armed to wait
/// until it. Once an answer shows the service takes 50 ms, its give-up time moves to its
/// deadline less that and its future is woken, so that the caller re-arms its timer; a waiter
/// without a deadline keeps the max wait.
#[test]
fn a_waiters_give_up_time_is_brought_forward_when_the_service_time_grows() {
    let mut cfg = config(2, 10);
    cfg.headroom = PerCriticality([1.0; Criticality::COUNT]);
    let (ctl, clock) = controller(cfg);
    let start = ctl.now();
    let mut running = vec![
        admitted(ctl.admit(&req(Critical))),
        admitted(ctl.admit(&req(Critical))),
    ];
    // Served first when a slot frees, so the waiter below stays queued.
    let mut first = queued(ctl.admit(&req(CriticalPlus)));
    let deadline = start + 200 * MS;
    let mut q = queued(ctl.admit(&AdmissionRequest {
        deadline: Some(deadline),
        ..req(Critical)
    }));
    let patient = queued(ctl.admit(&req(Sheddable)));
    assert_eq!(q.give_up_at(), deadline, "no service time known yet");
    let wakes = Arc::new(CountingWaker::default());
    assert!(poll(&mut q, &Waker::from(Arc::clone(&wakes))).is_pending());

    clock.advance(50 * MS);
    drop(running.pop());
    let _served = match poll(&mut first, &noop()) {
        Poll::Ready(Ok(p)) => p,
        other => panic!("expected a grant, got {other:?}"),
    };
    assert_eq!(ctl.snapshot().expected_service_time, 50 * MS);
    assert_eq!(q.give_up_at(), deadline - 50 * MS);
    assert_eq!(
        wakes.0.load(Ordering::SeqCst),
        1,
        "woken to re-arm its timer"
    );
    assert_eq!(patient.give_up_at(), start + Duration::from_secs(1));
    assert!(poll(&mut q, &noop()).is_pending(), "100 ms still to wait");

    clock.advance(100 * MS);
    match poll(&mut q, &noop()) {
        Poll::Ready(Err(r)) => assert_eq!(r.reason, RefusalReason::DeadlineExceeded),
        other => panic!("expected a deadline refusal, got {other:?}"),
    }
}

/// `saturated()`'s steps behind `limit`: two 50 ms answers that ran together, every slot of
/// the limit then taken, then as many SHEDDABLE arrivals as the wait estimate (a slot every
/// 50 ms ÷ limit) admits within the 100 ms max wait, and one more. Returns how many were
/// refused, and the limit.
fn one_past_the_estimate_behind(limit: LimitConfig) -> (u64, usize) {
    let mut cfg = config(2, 100);
    cfg.limit = limit;
    cfg.queue.max_wait = 100 * MS;
    cfg.headroom = PerCriticality([1.0; Criticality::COUNT]);
    let (ctl, clock) = controller(cfg);
    let warm = [
        admitted(ctl.admit(&req(Critical))),
        admitted(ctl.admit(&req(Critical))),
    ];
    clock.advance(50 * MS);
    drop(warm);
    let limit = ctl.snapshot().limit;
    let _held: Vec<_> = (0..limit)
        .map(|_| admitted(ctl.admit(&req(Sheddable))))
        .collect();
    let arrivals: Vec<_> = (0..=2 * limit)
        .map(|_| ctl.admit(&req(Sheddable)))
        .collect();
    let snap = ctl.snapshot();
    drop(arrivals);
    (snap.refused.get(RefusalReason::QueueFull, Sheddable), limit)
}

/// A cold limit (`Limit::probing`: the Envoy gradient's slow start, its answers still at
/// minRTT and the limit below twice the level they came back from) is a floor of what the
/// upstream runs, so the wait estimate divided by it refuses no one: the arrival that the
/// same limit, known, refuses at the door waits instead.
#[test]
fn a_cold_limit_refuses_no_one_on_the_wait_estimate() {
    let cold = crate::limit::EnvoyGradientConfig {
        live_min_rtt: true,
        initial_limit: Some(2),
        min_concurrency: 2,
        request_count: 5,
        jitter: 0.0,
        interval: Duration::from_secs(60),
        update_interval: Duration::from_secs(600),
        ..Default::default()
    };
    let (refused, limit) = one_past_the_estimate_behind(LimitConfig::EnvoyGradient(cold));
    assert!(limit > 2 && limit < 4, "slow start grew the limit: {limit}");
    assert_eq!(refused, 0);
    let known = one_past_the_estimate_behind(LimitConfig::Fixed(FixedConfig { limit }));
    assert_eq!(known, (1, limit));
}
