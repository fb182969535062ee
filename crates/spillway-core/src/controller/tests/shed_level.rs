//! Work above a level being shed is first in line for the slots that level gives up: it is
//! not refused at the door as part of a standing queue, nor dropped by CoDel, while it waits
//! behind more critical work — it waits out its own budget.

use super::*;

/// Limit 2 (no headroom), CoDel, 1 s max wait; SHEDDABLE is shed at a utilisation of 0.5;
/// two CRITICAL permits hold both slots and two SHEDDABLE_PLUS requests queue behind them.
fn behind_critical() -> (
    AdmissionController,
    ManualClock,
    Vec<Permit>,
    Vec<QueuedAdmission>,
) {
    let mut cfg = config(2, 10);
    cfg.queue.discipline = QueueDiscipline::codel();
    cfg.headroom = PerCriticality([1.0; Criticality::COUNT]);
    cfg.shed.thresholds = PerCriticality([Some(0.5), None, None, None]);
    let (ctl, clock) = controller(cfg);
    let running = vec![
        admitted(ctl.admit(&req(Critical))),
        admitted(ctl.admit(&req(Critical))),
    ];
    let waiting = vec![
        queued(ctl.admit(&req(SheddablePlus))),
        queued(ctl.admit(&req(SheddablePlus))),
    ];
    (ctl, clock, running, waiting)
}

/// For 300 ms every slot that frees goes to a CRITICAL request queued ahead of the
/// SHEDDABLE_PLUS ones (their wait stands far above CoDel's 5 ms target for three of its
/// intervals); with `shedding`, a SHEDDABLE arrival each step is shed. Returns the SHEDDABLE_PLUS waiters
/// still queued and the CRITICAL permits running.
fn critical_takes_every_slot(
    ctl: &AdmissionController,
    clock: &ManualClock,
    mut running: Vec<Permit>,
    mut waiting: Vec<QueuedAdmission>,
    shedding: bool,
) -> (Vec<Permit>, Vec<QueuedAdmission>) {
    let waker = noop();
    for _ in 0..30 {
        clock.advance(10 * MS);
        if shedding {
            let s = ctl.admit(&req(Sheddable));
            assert_eq!(refused(s).reason, RefusalReason::Shed);
        }
        let mut c = queued(ctl.admit(&req(Critical)));
        drop(running.remove(0)); // the oldest CRITICAL completes: a slot frees
        match poll(&mut c, &waker) {
            Poll::Ready(Ok(p)) => running.push(p),
            other => panic!("CRITICAL is served first, got {other:?}"),
        }
        waiting.retain_mut(|w| poll(w, &waker).is_pending());
    }
    (running, waiting)
}

#[test]
fn above_a_shed_level_codel_neither_drops_nor_refuses_at_the_door() {
    let (ctl, clock, running, waiting) = behind_critical();
    let (mut running, mut waiting) =
        critical_takes_every_slot(&ctl, &clock, running, waiting, true);
    let snap = ctl.snapshot();
    assert_eq!(waiting.len(), 2, "{snap:?}");
    assert_eq!(
        snap.refused.get(RefusalReason::QueueTimeout, SheddablePlus),
        0
    );
    // A SHEDDABLE_PLUS arrival joins the queue rather than being refused as part of a
    // standing queue.
    waiting.push(queued(ctl.admit(&req(SheddablePlus))));
    assert_eq!(
        ctl.snapshot()
            .refused
            .get(RefusalReason::QueueFull, SheddablePlus),
        0
    );
    // The slots CRITICAL gives back go to them, in order.
    let waker = noop();
    drop(running.drain(..));
    let mut served = Vec::new();
    for w in &mut waiting {
        if let Poll::Ready(Ok(p)) = poll(w, &waker) {
            served.push(p);
        }
    }
    assert_eq!(served.len(), 2, "the two slots freed");
    drop(waiting);
    drop(served);
    assert_eq!(ctl.snapshot().in_flight, 0);
}

/// The same queue with no SHEDDABLE arriving, so none shed: SHEDDABLE_PLUS is the lowest level,
/// and CoDel drops from it once its wait has stood above target for an interval.
#[test]
fn the_lowest_level_is_still_codels_to_drop() {
    let (ctl, clock, running, waiting) = behind_critical();
    let (running, waiting) = critical_takes_every_slot(&ctl, &clock, running, waiting, false);
    let snap = ctl.snapshot();
    assert!(waiting.len() < 2, "{snap:?}");
    assert!(snap.refused.get(RefusalReason::QueueTimeout, SheddablePlus) >= 1);
    drop(waiting);
    drop(running);
}
