//! Controller tests: every refusal reachable, queue hand-off, cancellation, eviction,
//! property tests over random operation sequences, and a multi-threaded stress test.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use super::*;
use crate::clock::ManualClock;
use crate::criticality::{Criticality, PerCriticality};
use crate::limit::{AimdConfig, FixedConfig, LimitConfig};
use crate::queue::QueueDiscipline;
use crate::quota::{CustomerQuota, QuotaEnforcement};
use crate::random::FixedRandom;
use crate::shed::ShedConfig;
use crate::signal::ManualSignal;
use Criticality::*;

mod burst;
mod early;
mod interleave;
mod order;
mod preset;
mod props;
mod shed_level;
mod stress;
mod sustained;

const MS: Duration = Duration::from_millis(1);

/// A waker that counts its wakes (std only; `Waker::noop` needs Rust 1.85, above our MSRV).
#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn poll(q: &mut QueuedAdmission, waker: &Waker) -> Poll<Result<Permit, Refusal>> {
    let mut cx = Context::from_waker(waker);
    std::pin::Pin::new(q).poll(&mut cx)
}

fn noop() -> Waker {
    Waker::from(Arc::new(CountingWaker::default()))
}

/// Fixed limit, FIFO queue of `queue` entries with 1 s max wait, no shedding.
fn config(limit: usize, queue: usize) -> AdmissionConfig {
    AdmissionConfig {
        limit: LimitConfig::Fixed(FixedConfig { limit }),
        queue: QueueConfig {
            max_len: Some(queue),
            max_wait: Duration::from_secs(1),
            discipline: QueueDiscipline::Fifo,
        },
        shed: ShedConfig {
            thresholds: PerCriticality([None; Criticality::COUNT]),
            ramp: 0.1,
        },
        ..AdmissionConfig::default()
    }
}

fn controller(cfg: AdmissionConfig) -> (AdmissionController, ManualClock) {
    let clock = ManualClock::new();
    let ctl = AdmissionController::new(cfg, Arc::new(clock.clone()))
        .expect("valid config")
        .with_random(Arc::new(FixedRandom(0.5)));
    (ctl, clock)
}

fn req(c: Criticality) -> AdmissionRequest<'static> {
    AdmissionRequest::new("alice", c)
}

#[track_caller]
fn admitted(a: Admission) -> Permit {
    match a {
        Admission::Admitted(p) => p,
        other => panic!("expected admitted, got {other:?}"),
    }
}

#[track_caller]
fn queued(a: Admission) -> QueuedAdmission {
    match a {
        Admission::Queued(q) => q,
        other => panic!("expected queued, got {other:?}"),
    }
}

#[track_caller]
fn refused(a: Admission) -> Refusal {
    match a {
        Admission::Refused(r) => r,
        other => panic!("expected refused, got {other:?}"),
    }
}

#[test]
fn refusal_reason_properties() {
    use RefusalReason::*;
    let names: Vec<&str> = RefusalReason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        names,
        [
            "over_quota",
            "shed",
            "concurrency_limit",
            "queue_full",
            "queue_timeout",
            "deadline_exceeded",
            "too_many_attempts"
        ]
    );
    for r in RefusalReason::ALL {
        assert_eq!(
            r.index(),
            RefusalReason::ALL
                .iter()
                .position(|x| *x == r)
                .unwrap_or(99)
        );
        let helps = matches!(r, Shed | ConcurrencyLimit | QueueFull | QueueTimeout);
        assert_eq!(r.retry_elsewhere_can_help(), helps, "{r}");
        assert_eq!(r.is_customer_over_quota(), r == OverQuota, "{r}");
    }
}

#[test]
fn over_quota_is_refused_with_retry_after_and_refusals_refund() {
    let mut cfg = config(10, 0);
    cfg.quota.enforcement = QuotaEnforcement::Always;
    cfg.quota = cfg
        .quota
        .with_customer("alice", CustomerQuota::uniform(1.0));
    let (ctl, _clock) = controller(cfg);
    let p = admitted(ctl.admit(&req(Critical)));
    let r = refused(ctl.admit(&req(Critical)));
    assert_eq!(r.reason, RefusalReason::OverQuota);
    assert!(r.retry_after.is_some_and(|d| d > Duration::ZERO));
    assert!(r.reason.is_customer_over_quota());
    // Other customers (default account: unlimited) are unaffected.
    drop(admitted(ctl.admit(&AdmissionRequest::new("bob", Critical))));
    drop(p);
    assert_eq!(
        ctl.snapshot()
            .refused
            .get(RefusalReason::OverQuota, Critical),
        1
    );
}

#[test]
fn actual_cost_settles_the_quota() {
    let mut cfg = config(10, 0);
    cfg.quota.enforcement = QuotaEnforcement::Always;
    cfg.quota = cfg
        .quota
        .with_customer("alice", CustomerQuota::uniform(1.0));
    let (ctl, _clock) = controller(cfg);
    let mut p = admitted(ctl.admit(&req(Critical)));
    p.set_actual_cost(0.0); // turned out free: the whole estimate comes back
    drop(p);
    let p = admitted(ctl.admit(&req(Critical)));
    drop(p);
    assert_eq!(
        refused(ctl.admit(&req(Critical))).reason,
        RefusalReason::OverQuota
    );
}

#[test]
fn shed_on_a_signal_lowest_criticality_first_and_refunds_quota() {
    let mut cfg = config(10, 0);
    cfg.shed = ShedConfig::default();
    cfg.quota.enforcement = QuotaEnforcement::Always;
    cfg.quota = cfg
        .quota
        .with_customer("alice", CustomerQuota::uniform(1.0));
    let signal = Arc::new(ManualSignal::new("cpu"));
    let (ctl, _clock) = controller(cfg);
    let ctl = ctl.with_signal(signal.clone());
    signal.set(0.95); // SHEDDABLE fully shed (0.8 + ramp 0.1), SHEDDABLE_PLUS at p = 0.5
    let r = refused(ctl.admit(&req(Sheddable)));
    assert_eq!(r.reason, RefusalReason::Shed);
    assert!(r.reason.retry_elsewhere_can_help());
    assert_eq!(r.retry_after, Some(DEFAULT_OVERLOAD_RETRY_AFTER));
    // The shed request's quota charge was refunded: alice can still spend her 1 unit.
    drop(admitted(ctl.admit(&req(Critical))));
    let snap = ctl.snapshot();
    assert_eq!(snap.utilisation, 0.95);
    assert!(snap.overloaded);
    assert_eq!(snap.signals, vec![("cpu".to_owned(), 0.95)]);
}

#[test]
fn headroom_refuses_sheddable_while_critical_is_admitted() {
    // At a limit of 10 SHEDDABLE may hold 8 (its share, limiter::allowed_ladder).
    let (ctl, _clock) = controller(config(10, 0));
    let held: Vec<Permit> = (0..8)
        .map(|_| admitted(ctl.admit(&req(Sheddable))))
        .collect();
    let r = refused(ctl.admit(&req(Sheddable)));
    assert_eq!(r.reason, RefusalReason::ConcurrencyLimit);
    let c = admitted(ctl.admit(&req(Critical)));
    assert_eq!(c.in_flight_at_start(), 9);
    let snap = ctl.snapshot();
    assert_eq!(snap.in_flight, 9);
    assert_eq!(snap.in_flight_by_criticality[Sheddable], 8);
    assert_eq!(snap.in_flight_by_criticality[Critical], 1);
    drop(held);
    drop(c);
    assert_eq!(ctl.snapshot().in_flight, 0);
}

#[test]
fn health_checks_are_never_refused() {
    let mut cfg = config(1, 0);
    cfg.shed = ShedConfig::default();
    let signal = Arc::new(ManualSignal::new("cpu"));
    let (ctl, _clock) = controller(cfg);
    let ctl = ctl.with_signal(signal.clone());
    signal.set(5.0);
    let _held = admitted(ctl.admit(&req(CriticalPlus)));
    assert_eq!(
        refused(ctl.admit(&req(Critical))).reason,
        RefusalReason::Shed
    );
    let mut hc = AdmissionRequest::health_check();
    hc.attempt = 99;
    hc.deadline = Some(ctl.now());
    let checks: Vec<Permit> = (0..5).map(|_| admitted(ctl.admit(&hc))).collect();
    assert!(checks.iter().all(Permit::is_health_check));
    let snap = ctl.snapshot();
    assert_eq!(snap.in_flight, 1, "health checks hold no slot");
    assert_eq!(snap.health_checks_in_flight, 5);
    drop(checks);
    let snap = ctl.snapshot();
    assert_eq!(snap.health_checks_in_flight, 0);
    assert_eq!(snap.health_checks, 5);
    assert_eq!(snap.in_flight, 1);
}

#[test]
fn too_many_attempts_only_while_overloaded() {
    let (ctl, _clock) = controller(config(1, 0));
    let mut retry = req(Critical);
    retry.attempt = 4;
    let p = admitted(ctl.admit(&retry)); // not overloaded: a 4th attempt is fine
    let r = refused(ctl.admit(&retry)); // limiter full: overloaded
    assert_eq!(r.reason, RefusalReason::TooManyAttempts);
    assert!(!r.reason.retry_elsewhere_can_help());
    assert_eq!(r.retry_after, None);
    retry.attempt = 3;
    assert_eq!(
        refused(ctl.admit(&retry)).reason,
        RefusalReason::ConcurrencyLimit
    );
    drop(p);
}

#[test]
fn deadline_already_passed_is_refused() {
    let (ctl, clock) = controller(config(1, 4));
    let mut r = req(Critical);
    r.deadline = Some(ctl.now());
    clock.advance(MS);
    let refusal = refused(ctl.admit(&r));
    assert_eq!(refusal.reason, RefusalReason::DeadlineExceeded);
    assert!(!refusal.reason.retry_elsewhere_can_help());
}

#[test]
fn queue_full_and_queue_timeout() {
    let (ctl, clock) = controller(config(1, 1));
    let _p = admitted(ctl.admit(&req(Critical)));
    let mut w = queued(ctl.admit(&req(Critical)));
    assert_eq!(w.give_up_at(), ctl.now() + Duration::from_secs(1));
    assert_eq!(
        refused(ctl.admit(&req(Critical))).reason,
        RefusalReason::QueueFull
    );
    assert!(poll(&mut w, &noop()).is_pending());
    clock.advance(Duration::from_secs(1));
    let r = w.expire();
    assert_eq!(r.reason, RefusalReason::QueueTimeout);
    let snap = ctl.snapshot();
    assert_eq!(snap.queued, 0);
    assert_eq!(snap.refused.get(RefusalReason::QueueTimeout, Critical), 1);
    assert_eq!(snap.refused.get(RefusalReason::QueueFull, Critical), 1);
    // A poll past give_up_at expires by itself too.
    let mut w = queued(ctl.admit(&req(Critical)));
    clock.advance(Duration::from_secs(2));
    match poll(&mut w, &noop()) {
        Poll::Ready(Err(r)) => assert_eq!(r.reason, RefusalReason::QueueTimeout),
        other => panic!("{other:?}"),
    }
    assert_eq!(ctl.snapshot().queued, 0);
}

#[test]
fn queued_deadline_expires_as_deadline_exceeded() {
    let (ctl, clock) = controller(config(1, 4));
    let _p = admitted(ctl.admit(&req(Critical)));
    let mut r = req(Critical);
    r.deadline = Some(ctl.now() + 50 * MS);
    let w = queued(ctl.admit(&r));
    assert_eq!(w.give_up_at(), ctl.now() + 50 * MS);
    clock.advance(50 * MS);
    assert_eq!(w.expire().reason, RefusalReason::DeadlineExceeded);
}

#[test]
fn waiter_is_granted_on_permit_drop_and_woken() {
    let (ctl, clock) = controller(config(1, 4));
    let p = admitted(ctl.admit(&req(Critical)));
    let mut w = queued(ctl.admit(&req(Critical)));
    let counter = Arc::new(CountingWaker::default());
    let waker = Waker::from(counter.clone());
    assert!(poll(&mut w, &waker).is_pending());
    clock.advance(7 * MS);
    drop(p);
    assert_eq!(counter.0.load(Ordering::SeqCst), 1, "woken once");
    let permit = match poll(&mut w, &waker) {
        Poll::Ready(Ok(p)) => p,
        other => panic!("{other:?}"),
    };
    assert_eq!(permit.queue_time(), 7 * MS);
    assert_eq!(ctl.snapshot().in_flight, 1);
    drop(permit);
    drop(w);
    let snap = ctl.snapshot();
    assert_eq!((snap.in_flight, snap.queued), (0, 0));
    assert_eq!(snap.admitted[Critical], 2);
    assert_eq!(snap.enqueued[Critical], 1);
}

#[test]
fn queue_order_is_criticality_then_continuation_then_fifo() {
    let (ctl, _clock) = controller(config(1, 10));
    let holder = admitted(ctl.admit(&req(Critical)));
    let mk = |c, cont| AdmissionRequest {
        continuation: cont,
        ..req(c)
    };
    let mut waiters: Vec<(&str, QueuedAdmission)> = vec![
        ("s", queued(ctl.admit(&mk(Sheddable, false)))),
        ("c1", queued(ctl.admit(&mk(Critical, false)))),
        ("c-cont", queued(ctl.admit(&mk(Critical, true)))),
        ("c2", queued(ctl.admit(&mk(Critical, false)))),
        ("cp", queued(ctl.admit(&mk(CriticalPlus, false)))),
    ];
    let waker = noop();
    let mut order = Vec::new();
    drop(holder);
    while !waiters.is_empty() {
        // Exactly one waiter holds the slot; dropping its permit (at the end of `matches!`)
        // grants the next one in queue order.
        let i = waiters
            .iter_mut()
            .position(|(_, w)| matches!(poll(w, &waker), Poll::Ready(Ok(_))))
            .expect("one waiter granted");
        order.push(waiters.remove(i).0);
    }
    assert_eq!(order, ["cp", "c-cont", "c1", "c2", "s"]);
    assert_eq!(ctl.snapshot().in_flight, 0);
}

#[test]
fn more_critical_arrival_goes_ahead_of_a_blocked_waiter() {
    let (ctl, _clock) = controller(config(10, 10));
    let held: Vec<Permit> = (0..9)
        .map(|_| admitted(ctl.admit(&req(CriticalPlus))))
        .collect();
    // CRITICAL may fill 9 of 10: it waits.
    let mut w = queued(ctl.admit(&req(Critical)));
    // A CRITICAL_PLUS arrival joins the queue (someone is waiting) and, being first in queue
    // order, takes the last slot at once.
    let cp = admitted(ctl.admit(&req(CriticalPlus)));
    assert_eq!(cp.in_flight_at_start(), 10);
    assert!(poll(&mut w, &noop()).is_pending());
    // Another CRITICAL arrival queues behind the first one (FIFO within the class).
    let mut w2 = queued(ctl.admit(&req(Critical)));
    drop(cp);
    drop(held);
    assert!(matches!(poll(&mut w, &noop()), Poll::Ready(Ok(_))));
    assert!(matches!(poll(&mut w2, &noop()), Poll::Ready(Ok(_))));
    assert_eq!(ctl.snapshot().in_flight, 0);
}

#[test]
fn cancelled_waiter_leaves_the_queue() {
    let (ctl, _clock) = controller(config(1, 4));
    let p = admitted(ctl.admit(&req(Critical)));
    let w = queued(ctl.admit(&req(Critical)));
    assert_eq!(ctl.snapshot().queued, 1);
    drop(w);
    let snap = ctl.snapshot();
    assert_eq!(snap.queued, 0);
    assert_eq!(snap.cancelled[Critical], 1);
    drop(p);
    assert_eq!(ctl.snapshot().in_flight, 0);
}

#[test]
fn a_handed_over_permit_holds_the_slot_until_it_is_released() {
    let (ctl, clock) = controller(config(1, 4));
    let mut lent = admitted(ctl.admit(&req(Critical)));
    lent.set_outcome(Outcome::Abandoned);
    let held = lent.hand_over();
    drop(lent);
    assert_eq!(
        ctl.snapshot().in_flight,
        1,
        "the lender's drop released nothing"
    );
    let w = queued(ctl.admit(&req(Critical)));
    clock.advance(10 * MS);
    drop(held);
    assert_eq!(ctl.snapshot().in_flight, 1, "the slot went to the waiter");
    drop(w);
    assert_eq!(ctl.snapshot().in_flight, 0);
    // Handed over after its release, nothing is held twice.
    let mut p = admitted(ctl.admit(&req(Critical)));
    p.release_at(clock.now());
    drop(p.hand_over());
    let snap = ctl.snapshot();
    assert_eq!(snap.in_flight, 0);
    assert_eq!(snap.in_flight_by_criticality[Critical], 0);
}

#[test]
fn cancelled_waiters_granted_permit_is_released() {
    let (ctl, _clock) = controller(config(1, 4));
    let p = admitted(ctl.admit(&req(Critical)));
    let w = queued(ctl.admit(&req(Critical)));
    drop(p); // grants the slot to `w`, which nobody polls
    assert_eq!(ctl.snapshot().in_flight, 1);
    drop(w);
    assert_eq!(ctl.snapshot().in_flight, 0, "the granted slot came back");
    drop(admitted(ctl.admit(&req(Critical))));
    // Same through expire(): a grant that raced the timer is released.
    let p = admitted(ctl.admit(&req(Critical)));
    let w = queued(ctl.admit(&req(Critical)));
    drop(p);
    assert_eq!(w.expire().reason, RefusalReason::QueueTimeout);
    assert_eq!(ctl.snapshot().in_flight, 0);
}

#[test]
fn higher_criticality_evicts_lowest_newest() {
    let (ctl, _clock) = controller(config(1, 2));
    let _p = admitted(ctl.admit(&req(Critical)));
    let mut s_old = queued(ctl.admit(&req(Sheddable)));
    let mut s_new = queued(ctl.admit(&req(Sheddable)));
    let _c = queued(ctl.admit(&req(Critical)));
    match poll(&mut s_new, &noop()) {
        Poll::Ready(Err(r)) => assert_eq!(r.reason, RefusalReason::QueueFull),
        other => panic!("{other:?}"),
    }
    assert!(poll(&mut s_old, &noop()).is_pending());
    assert_eq!(
        refused(ctl.admit(&req(Sheddable))).reason,
        RefusalReason::QueueFull
    );
    assert_eq!(ctl.snapshot().queued_by_criticality[Sheddable], 1);
}

#[test]
fn deadline_that_cannot_be_met_is_dropped() {
    let mut cfg = config(1, 4);
    cfg.queue.max_wait = Duration::from_secs(5);
    let (ctl, clock) = controller(cfg);
    // Teach the controller a 40 ms service time.
    let p = admitted(ctl.admit(&req(Critical)));
    clock.advance(40 * MS);
    drop(p);
    assert_eq!(ctl.snapshot().expected_service_time, 40 * MS);
    let p = admitted(ctl.admit(&req(Critical)));
    // Cannot finish 30 ms from now if serving takes 40: refused at once.
    let mut r = req(Critical);
    r.deadline = Some(ctl.now() + 30 * MS);
    assert_eq!(
        refused(ctl.admit(&r)).reason,
        RefusalReason::DeadlineExceeded
    );
    // Feasible when queued (100 ms away) ...
    r.deadline = Some(ctl.now() + 100 * MS);
    let mut w = queued(ctl.admit(&r));
    let mut other = queued(ctl.admit(&req(Critical)));
    // ... but after 70 ms in the queue 70 + 40 > 100: dropped at dequeue, the next one served.
    clock.advance(70 * MS);
    drop(p);
    match poll(&mut w, &noop()) {
        Poll::Ready(Err(r)) => assert_eq!(r.reason, RefusalReason::DeadlineExceeded),
        other => panic!("{other:?}"),
    }
    assert!(matches!(poll(&mut other, &noop()), Poll::Ready(Ok(_))));
}

#[test]
fn codel_drops_waiters_once_delay_stands_above_target() {
    let mut cfg = config(1, 10);
    cfg.queue.discipline = QueueDiscipline::codel();
    let (ctl, clock) = controller(cfg);
    let mut p = Some(admitted(ctl.admit(&req(Critical))));
    // Sheddable work: CoDel drops nothing more critical (CRITICAL waits out its own budget).
    let mut ws: Vec<QueuedAdmission> = (0..6).map(|_| queued(ctl.admit(&req(Sheddable)))).collect();
    let waker = noop();
    let mut outcomes = Vec::new();
    // Each service takes 60 ms: sojourn times stay far above 5 ms for longer than 100 ms.
    for _ in 0..6 {
        clock.advance(60 * MS);
        drop(p.take());
        for w in ws.iter_mut() {
            if let Poll::Ready(r) = poll(w, &waker) {
                match r {
                    Ok(permit) => {
                        outcomes.push("served");
                        p = Some(permit);
                    }
                    Err(r) => outcomes.push(r.reason.as_str()),
                }
            }
        }
        ws.retain_mut(|w| poll(w, &waker).is_pending());
    }
    assert!(outcomes.contains(&"queue_timeout"), "{outcomes:?}");
    assert_eq!(
        outcomes.first(),
        Some(&"served"),
        "first dequeue only arms CoDel"
    );
    drop(p);
    drop(ws);
    assert_eq!(ctl.snapshot().in_flight, 0);
}

#[test]
fn dropped_outcome_is_a_congestion_signal_and_ignore_is_no_sample() {
    let cfg = AdmissionConfig {
        limit: LimitConfig::Aimd(AimdConfig {
            initial_limit: 20,
            min_limit: 1,
            max_limit: 100,
            ..AimdConfig::default()
        }),
        ..config(1, 0)
    };
    let (ctl, _clock) = controller(cfg);
    let mut p = admitted(ctl.admit(&req(Critical)));
    p.set_outcome(Outcome::Ignore);
    drop(p);
    assert_eq!(ctl.snapshot().limit, 20, "no sample");
    let mut p = admitted(ctl.admit(&req(Critical)));
    p.set_outcome(Outcome::Dropped);
    drop(p);
    assert!(ctl.snapshot().limit < 20, "multiplicative decrease");
}

#[test]
fn config_validation_names_fields() {
    let mut cfg = AdmissionConfig::default();
    assert!(cfg.validate().is_ok());
    cfg.max_attempts = 0;
    assert_eq!(cfg.validate().unwrap_err().field, "max_attempts");
    cfg = AdmissionConfig::default();
    cfg.headroom[Sheddable] = 2.0;
    assert_eq!(cfg.validate().unwrap_err().field, "headroom.sheddable");
    cfg = AdmissionConfig::default();
    cfg.queue.max_wait = Duration::ZERO;
    let e = AdmissionController::new(cfg, Arc::new(ManualClock::new())).unwrap_err();
    assert_eq!(e.field, "queue.max_wait");
}

#[test]
fn signals_beyond_the_maximum_are_counted() {
    let (mut ctl, _clock) = controller(config(4, 0));
    for i in 0..MAX_SIGNALS + 2 {
        ctl = ctl.with_signal(Arc::new(ManualSignal::new(format!("s{i}"))));
    }
    let snap = ctl.snapshot();
    assert_eq!(snap.signals.len(), MAX_SIGNALS);
    assert_eq!(snap.signals_ignored, 2);
}

#[test]
fn admit_at_and_release_at_use_the_callers_reading() {
    let (ctl, clock) = controller(config(2, 0));
    let arrived = ctl.now();
    clock.advance(5 * MS);
    // Admitted at the reading taken on arrival, not at the clock's present.
    let mut p = admitted(ctl.admit_at(&req(Critical), arrived));
    assert_eq!(p.started_at(), arrived);
    clock.advance(100 * MS);
    // Released at the caller's reading: a 40 ms service time, not the clock's 105.
    p.release_at(arrived + 40 * MS);
    let snap = ctl.snapshot();
    assert_eq!(snap.in_flight, 0);
    assert_eq!(snap.expected_service_time, 40 * MS);
    // Released once: the drop (and a second call) change nothing more.
    let held = admitted(ctl.admit(&req(Critical)));
    p.release_at(ctl.now());
    drop(p);
    assert_eq!(ctl.snapshot().in_flight, 1, "only `held` is in flight");
    drop(held);
    assert_eq!(ctl.snapshot().in_flight, 0);
    // A health check's permit released early is not counted twice either.
    let mut hc = admitted(ctl.admit(&AdmissionRequest::health_check()));
    hc.release_at(ctl.now());
    assert_eq!(ctl.snapshot().health_checks_in_flight, 0);
    drop(hc);
    assert_eq!(ctl.snapshot().health_checks_in_flight, 0);
}
