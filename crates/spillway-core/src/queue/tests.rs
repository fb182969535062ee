use std::cell::Cell;

use proptest::prelude::*;

use super::*;
use Criticality::*;

mod burst;

const MS: Duration = Duration::from_millis(1);

/// A slot counter standing in for the limiter.
struct Slots {
    free: Cell<usize>,
}

impl Slots {
    fn new(n: usize) -> Self {
        Slots { free: Cell::new(n) }
    }
}

impl SlotSource for Slots {
    fn has_slot(&self, _: Criticality) -> bool {
        self.free.get() > 0
    }
    fn take_slot(&self, _: Criticality) -> bool {
        let n = self.free.get();
        if n == 0 {
            return false;
        }
        self.free.set(n - 1);
        true
    }
}

fn queue(discipline: QueueDiscipline) -> AdmissionQueue<u32> {
    AdmissionQueue::new(QueueConfig {
        max_len: Some(100),
        max_wait: Duration::from_secs(10),
        discipline,
    })
    .expect("valid")
}

/// Dequeues everything it can with unlimited slots; returns the served items and the drops.
fn drain(q: &mut AdmissionQueue<u32>, now: Instant) -> (Vec<u32>, Vec<(u32, DropReason)>) {
    let slots = Slots::new(usize::MAX);
    let mut served = Vec::new();
    let mut dropped = Vec::new();
    while let Some(e) = q.dequeue(now, Duration::ZERO, &slots, |e, r| {
        dropped.push((e.item, r))
    }) {
        served.push(e.item);
    }
    (served, dropped)
}

fn push(q: &mut AdmissionQueue<u32>, now: Instant, item: u32, c: Criticality, cont: bool) {
    q.push(now, item, c, cont, None, 100).expect("room");
}

#[test]
fn order_is_criticality_then_continuation_then_fifo() {
    let t0 = Instant::now();
    let mut q = queue(QueueDiscipline::Fifo);
    push(&mut q, t0, 1, Sheddable, false);
    push(&mut q, t0, 2, Critical, false);
    push(&mut q, t0, 3, Sheddable, true);
    push(&mut q, t0, 4, Critical, true);
    push(&mut q, t0, 5, CriticalPlus, false);
    push(&mut q, t0, 6, Critical, false);
    push(&mut q, t0, 7, Critical, true);
    let (served, dropped) = drain(&mut q, t0);
    assert_eq!(served, vec![5, 4, 7, 2, 6, 3, 1]);
    assert!(dropped.is_empty());
    assert!(q.is_empty());
}

#[test]
fn adaptive_lifo_switches_once_the_queue_has_been_building() {
    let t0 = Instant::now();
    let mut q = queue(QueueDiscipline::AdaptiveLifo {
        depth: 0,
        after: 100 * MS,
    });
    for i in 1..=4 {
        push(&mut q, t0, i, Critical, false);
    }
    let slots = Slots::new(1);
    let first = q.dequeue(t0 + 50 * MS, Duration::ZERO, &slots, |_, _| {});
    assert_eq!(
        first.map(|e| e.item),
        Some(1),
        "FIFO while the queue is young"
    );
    assert!(q.is_lifo(t0 + 100 * MS));
    let (served, _) = drain(&mut q, t0 + 100 * MS);
    assert_eq!(
        served,
        vec![4, 3, 2],
        "LIFO once it has been non-empty for 100 ms"
    );
    assert!(!q.is_lifo(t0 + 200 * MS), "draining resets to FIFO");
    // Criticality still comes first in LIFO mode.
    push(&mut q, t0 + 200 * MS, 10, CriticalPlus, false);
    push(&mut q, t0 + 200 * MS, 11, Sheddable, false);
    push(&mut q, t0 + 200 * MS, 12, Sheddable, false);
    let (served, _) = drain(&mut q, t0 + 400 * MS);
    assert_eq!(served, vec![10, 12, 11]);
}

#[test]
fn codel_drops_after_an_interval_above_target() {
    let t0 = Instant::now();
    let mut q = queue(QueueDiscipline::codel());
    for i in 0..20 {
        push(&mut q, t0 + i * MS, i, Sheddable, false);
    }
    let slots = Slots::new(usize::MAX);
    let mut dropped = Vec::new();
    // 10 ms later the head has waited 10 ms > 5 ms target: CoDel arms but does not drop.
    let e = q.dequeue(t0 + 10 * MS, Duration::ZERO, &slots, |e, r| {
        dropped.push((e.item, r))
    });
    assert_eq!(e.map(|e| e.item), Some(0));
    assert!(dropped.is_empty());
    // Still above target a full interval later: the head is dropped, the next one served.
    let e = q.dequeue(t0 + 110 * MS, Duration::ZERO, &slots, |e, r| {
        dropped.push((e.item, r))
    });
    assert_eq!(dropped, vec![(1, DropReason::Codel)]);
    assert_eq!(e.map(|e| e.item), Some(2));
    // Next drop only after interval/sqrt(1) = 100 ms more.
    let e = q.dequeue(t0 + 150 * MS, Duration::ZERO, &slots, |e, r| {
        dropped.push((e.item, r))
    });
    assert_eq!(e.map(|e| e.item), Some(3));
    assert_eq!(dropped.len(), 1);
    let e = q.dequeue(t0 + 210 * MS, Duration::ZERO, &slots, |e, r| {
        dropped.push((e.item, r))
    });
    assert_eq!(dropped.len(), 2);
    assert_eq!(e.map(|e| e.item), Some(5));
}

#[test]
fn codel_drops_the_least_critical_waiter_not_the_head() {
    // SRE book ch. 21: shed the least critical first. A SHEDDABLE and a CRITICAL have both
    // waited past target for an interval: CoDel drops the SHEDDABLE and grants the CRITICAL.
    let t0 = Instant::now();
    let mut q = queue(QueueDiscipline::codel());
    push(&mut q, t0, 1, Sheddable, false);
    push(&mut q, t0, 2, Critical, false);
    let one = Slots::new(1);
    let mut dropped = Vec::new();
    // 10 ms: above target, CoDel arms (no drop yet) and the CRITICAL head is served.
    let e = q.dequeue(t0 + 10 * MS, Duration::ZERO, &one, |e, r| {
        dropped.push((e.item, r))
    });
    assert_eq!(e.map(|e| e.item), Some(2), "CRITICAL served first");
    assert!(dropped.is_empty());
    // Refill: a CRITICAL behind the SHEDDABLE, an interval later both past target.
    push(&mut q, t0 + 20 * MS, 3, Critical, false);
    let one = Slots::new(1);
    let e = q.dequeue(t0 + 120 * MS, Duration::ZERO, &one, |e, r| {
        dropped.push((e.item, r))
    });
    assert_eq!(
        dropped,
        vec![(1, DropReason::Codel)],
        "the SHEDDABLE is the victim"
    );
    assert_eq!(e.map(|e| e.item), Some(3), "the CRITICAL is granted");
    assert!(q.is_empty());
}

#[test]
fn codel_drops_critical_only_when_nothing_less_critical_waits() {
    let t0 = Instant::now();
    let mut q = queue(QueueDiscipline::codel());
    for i in 0..4 {
        push(&mut q, t0, i, Critical, false);
    }
    push(&mut q, t0, 10, SheddablePlus, true);
    push(&mut q, t0, 11, Sheddable, true);
    push(&mut q, t0, 12, Sheddable, false);
    let slots = Slots::new(usize::MAX);
    let mut dropped = Vec::new();
    let mut served = Vec::new();
    // Arm at 10 ms (serving one CRITICAL), then drop at 110 and 210 ms (the control law:
    // interval / sqrt(count)), serving one entry at each step.
    for ms in [10, 110, 210, 281] {
        if let Some(e) = q.dequeue(t0 + ms * MS, Duration::ZERO, &slots, |e, r| {
            dropped.push((e.item, r))
        }) {
            served.push(e.item);
        }
    }
    let victims: Vec<u32> = dropped.iter().map(|d| d.0).collect();
    // Lowest class first: SHEDDABLE new work, then SHEDDABLE continuation (the same level's
    // standing delay). The SHEDDABLE_PLUS left is not judged by the state SHEDDABLE built: it
    // waited behind CRITICAL work, not behind a backlog of its own, and is served.
    assert_eq!(victims, vec![12, 11]);
    assert_eq!(served, vec![0, 1, 2, 3]);
    assert_eq!(
        q.standing(),
        None,
        "no SHEDDABLE queued: none refused at the door"
    );
    let e = q.dequeue(t0 + 400 * MS, Duration::ZERO, &slots, |e, r| {
        dropped.push((e.item, r))
    });
    assert_eq!(e.map(|e| e.item), Some(10));
    assert_eq!(q.standing(), None, "empty: no standing queue");
}

#[test]
fn codel_judges_a_higher_level_afresh_over_its_own_interval() {
    let t0 = Instant::now();
    let mut q = queue(QueueDiscipline::codel());
    push(&mut q, t0, 1, Sheddable, false);
    push(&mut q, t0, 2, SheddablePlus, false);
    for i in 0..3 {
        push(&mut q, t0, 10 + i, Critical, false);
    }
    let slots = Slots::new(usize::MAX);
    let dropped = std::cell::RefCell::new(Vec::new());
    let step = |q: &mut AdmissionQueue<u32>, ms: u32| {
        q.dequeue(t0 + ms * MS, Duration::ZERO, &slots, |e, r| {
            dropped.borrow_mut().push((e.item, r))
        })
        .map(|e| e.item)
    };
    assert_eq!(step(&mut q, 10), Some(10), "arms on SHEDDABLE's delay");
    assert_eq!(step(&mut q, 110), Some(11), "drops the SHEDDABLE");
    assert_eq!(
        q.standing(),
        None,
        "no SHEDDABLE queued: none refused at the door"
    );
    // The dropping state is SHEDDABLE's; it ends only when nothing droppable waits.
    assert_eq!(step(&mut q, 300), Some(12));
    assert_eq!(
        step(&mut q, 320),
        Some(2),
        "SHEDDABLE_PLUS served, not dropped"
    );
    assert_eq!(*dropped.borrow(), vec![(1, DropReason::Codel)]);
    // A standing queue of SHEDDABLE_PLUS itself is judged over its own interval.
    for i in 0..4 {
        push(&mut q, t0 + 400 * MS, 20 + i, SheddablePlus, false);
    }
    assert_eq!(
        step(&mut q, 410),
        Some(20),
        "arms on SHEDDABLE_PLUS's own delay"
    );
    assert_eq!(q.standing(), None);
    assert_eq!(
        step(&mut q, 510),
        Some(22),
        "a full interval later: drops 21"
    );
    assert_eq!(q.standing(), Some(SheddablePlus));
    assert_eq!(dropped.borrow().last(), Some(&(21, DropReason::Codel)));
}

#[test]
fn codel_never_drops_critical_work() {
    // A cut of the limit can hold CRITICAL waiters for a round trip while CRITICAL demand is
    // well within capacity: they wait out their own budget (max wait, deadline), never a
    // 5 ms target (issue 28).
    let t0 = Instant::now();
    let mut q = queue(QueueDiscipline::codel());
    for i in 0..6 {
        push(&mut q, t0, i, Critical, false);
    }
    push(&mut q, t0, 10, SheddablePlus, false);
    let mut dropped = Vec::new();
    let mut served = Vec::new();
    for ms in [10, 200, 400, 600, 800, 1000, 1200] {
        let slot = Slots::new(1);
        if let Some(e) = q.dequeue(t0 + ms * MS, Duration::ZERO, &slot, |e, r| {
            dropped.push((e.item, r))
        }) {
            served.push(e.item);
        }
    }
    assert_eq!(
        dropped,
        vec![(10, DropReason::Codel)],
        "only the sheddable one"
    );
    assert_eq!(served, vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(q.standing(), None, "no standing sheddable work");
}

#[test]
fn codel_does_not_drop_without_a_free_slot() {
    let t0 = Instant::now();
    let mut q = queue(QueueDiscipline::codel());
    for i in 0..5 {
        push(&mut q, t0, i, Critical, false);
    }
    let none = Slots::new(0);
    for ms in [10, 200, 400] {
        assert!(q
            .dequeue(t0 + ms * MS, Duration::ZERO, &none, |_, _| panic!(
                "no drop"
            ))
            .is_none());
    }
    assert_eq!(q.len(), 5);
}

#[test]
fn deadline_passed_is_dropped_at_dequeue() {
    let t0 = Instant::now();
    let mut q = queue(QueueDiscipline::Fifo);
    q.push(t0, 1, Critical, false, Some(t0 + 20 * MS), 10)
        .expect("room");
    q.push(t0, 2, Critical, false, None, 10).expect("room");
    let (served, dropped) = drain(&mut q, t0 + 20 * MS);
    assert_eq!(served, vec![2]);
    assert_eq!(dropped, vec![(1, DropReason::DeadlineExceeded)]);
}

#[test]
fn cannot_meet_deadline_given_expected_service_time_is_dropped() {
    let t0 = Instant::now();
    let mut q = queue(QueueDiscipline::Fifo);
    // Deadline 50 ms away; service takes ~30 ms: at t0+30ms it would finish at +60 > +50.
    q.push(t0, 1, Critical, false, Some(t0 + 50 * MS), 10)
        .expect("room");
    q.push(t0, 2, Critical, false, Some(t0 + 100 * MS), 10)
        .expect("room");
    let slots = Slots::new(10);
    let mut dropped = Vec::new();
    let e = q.dequeue(t0 + 30 * MS, 30 * MS, &slots, |e, r| {
        dropped.push((e.item, r))
    });
    assert_eq!(dropped, vec![(1, DropReason::DeadlineExceeded)]);
    assert_eq!(e.map(|e| e.item), Some(2), "+30 + 30 = +60 <= +100: served");
}

#[test]
fn max_wait_drops_old_entries_even_behind_higher_criticality() {
    let t0 = Instant::now();
    let mut q = AdmissionQueue::new(QueueConfig {
        max_len: None,
        max_wait: 100 * MS,
        discipline: QueueDiscipline::Fifo,
    })
    .expect("valid");
    q.push(t0, 1, Sheddable, false, None, 10).expect("room");
    q.push(t0 + 50 * MS, 2, Critical, false, None, 10)
        .expect("room");
    let mut dropped = Vec::new();
    q.purge(t0 + 100 * MS, MS, |e, r| dropped.push((e.item, r)));
    assert_eq!(dropped, vec![(1, DropReason::QueueTimeout)]);
    assert_eq!(q.len(), 1);
    for c in [Sheddable, Critical] {
        assert_eq!(q.give_up_at(t0, None, 3 * MS, c), t0 + 100 * MS);
        assert_eq!(
            q.give_up_at(t0, Some(t0 + 10 * MS), 3 * MS, c),
            t0 + 7 * MS,
            "a deadline's budget less the expected service time"
        );
        assert_eq!(q.give_up_at(t0, Some(t0 + MS), 3 * MS, c), t0);
    }
    assert_eq!(
        q.give_up_at(t0, Some(t0 + 1000 * MS), 3 * MS, Sheddable),
        t0 + 100 * MS,
        "a far deadline is the whole call's, not this attempt's: max_wait still bounds"
    );
    assert_eq!(
        q.give_up_at(t0, Some(t0 + 1000 * MS), 3 * MS, Critical),
        t0 + 997 * MS,
        "CRITICAL waits as long as its deadline allows"
    );
}

#[test]
fn a_timeout_drops_everything_less_critical() {
    // Strict criticality order: once a CRITICAL waiter has given up, SHEDDABLE ones queued
    // behind it (even younger, or with a far deadline) would be served in its place.
    let t0 = Instant::now();
    let mut q = AdmissionQueue::new(QueueConfig {
        max_len: None,
        max_wait: 100 * MS,
        discipline: QueueDiscipline::Fifo,
    })
    .expect("valid");
    q.push(t0, 1, Critical, false, None, 10).expect("room");
    q.push(t0 + 90 * MS, 2, Sheddable, false, None, 10)
        .expect("room");
    q.push(
        t0 + 90 * MS,
        3,
        SheddablePlus,
        true,
        Some(t0 + 5000 * MS),
        10,
    )
    .expect("room");
    q.push(t0 + 90 * MS, 4, CriticalPlus, false, None, 10)
        .expect("room");
    let mut dropped = Vec::new();
    q.purge(t0 + 100 * MS, MS, |e, r| dropped.push((e.item, r)));
    assert_eq!(
        dropped,
        vec![
            (1, DropReason::QueueTimeout),
            (2, DropReason::Evicted),
            (3, DropReason::Evicted)
        ]
    );
    assert_eq!(q.len(), 1, "CRITICAL_PLUS keeps waiting");
}

#[test]
fn full_queue_over_a_shrunk_capacity_still_admits_the_more_critical() {
    let t0 = Instant::now();
    let mut q = queue(QueueDiscipline::Fifo);
    for i in 0..4 {
        q.push(t0, i, Critical, false, None, 10).expect("room");
    }
    q.push(t0, 9, Sheddable, false, None, 10).expect("room");
    // The capacity fell to 2 with the limit: one SHEDDABLE is all there is to evict, and it is.
    let p = q.push(t0, 10, Critical, true, None, 2).expect("evicts");
    assert_eq!(
        p.evicted.iter().map(|e| e.item).collect::<Vec<_>>(),
        vec![9]
    );
    assert_eq!(q.len(), 5, "never longer than before the push");
    assert_eq!(q.push(t0, 11, Critical, true, None, 2).err(), Some(11));
}

#[test]
fn pushed_back_entries_that_cannot_start_in_time_are_dropped() {
    let t0 = Instant::now();
    let mut q = queue(QueueDiscipline::Fifo);
    q.push(t0, 1, Sheddable, false, None, 10).expect("room");
    q.push(t0, 2, Sheddable, false, Some(t0 + 45 * MS), 10)
        .expect("room");
    for i in 3..6 {
        q.push(t0, i, Critical, false, None, 10).expect("room");
    }
    let mut dropped = Vec::new();
    // 5 queued × 10 ms per slot: the last SHEDDABLE (deadline +45, 5 ms service) would start
    // at +50, too late; the first (no deadline, 100 ms max wait) still can at +40.
    q.drop_pushed_back(t0, Critical, None, 10 * MS, 5 * MS, |e, r| {
        dropped.push((e.item, r))
    });
    assert_eq!(dropped, vec![(2, DropReason::Evicted)]);
    assert_eq!(q.len(), 4);
    // Nothing is dropped for an arrival of its own class, or without an estimate.
    q.drop_pushed_back(t0, Sheddable, None, 50 * MS, 5 * MS, |_, _| {
        panic!("own class")
    });
    q.drop_pushed_back(t0, Critical, None, Duration::ZERO, 5 * MS, |_, _| {
        panic!("no estimate")
    });
    assert_eq!(q.ahead_of(Critical, false), 3);
    assert_eq!(q.ahead_of(Sheddable, false), 4);
    assert_eq!(q.ahead_of(CriticalPlus, false), 0);
}

/// Id of the SHEDDABLE request `dispatch_mix` keeps waiting (its replacements count up from it).
const WAITING: u32 = 1_000_000;

/// Dispatches `n` requests from `q`, CRITICAL except every `every`-th (SHEDDABLE). With
/// `sheddable_waits`, a SHEDDABLE request waits all along (the older of two is served, a new one
/// takes its place), so every dispatch is a slot SHEDDABLE saw go above it or come to it;
/// one is left waiting at the end.
fn dispatch_mix(
    q: &mut AdmissionQueue<u32>,
    t0: Instant,
    n: u32,
    every: u32,
    sheddable_waits: bool,
) {
    let slots = Slots::new(usize::MAX);
    let mut waiting = sheddable_waits.then(|| {
        let id = WAITING + q.len() as u32;
        push(q, t0, id, Sheddable, false);
        id
    });
    for i in 0..n {
        let sheddable = every > 0 && i % every == every - 1;
        let expect = match (sheddable, waiting) {
            (true, Some(w)) => {
                let next = w + 1;
                push(q, t0, next, Sheddable, false);
                waiting = Some(next);
                w
            }
            (true, None) => {
                push(q, t0, i, Sheddable, false);
                i
            }
            (false, _) => {
                push(q, t0, i, Critical, false);
                i
            }
        };
        let served = q.dequeue(t0, Duration::ZERO, &slots, |_, _| panic!("nothing to drop"));
        assert_eq!(served.map(|e| e.item), Some(expect));
    }
}

/// A level drains at the share of the slots the levels above it leave: after dispatches that
/// went 3 in 4 to CRITICAL while SHEDDABLE waited, a SHEDDABLE wait is about four times the
/// plain estimate, and one that CRITICAL alone was served at is bounded at 16 times it.
#[test]
fn a_level_waits_longer_while_the_levels_above_take_most_slots() {
    let t0 = Instant::now();
    let mut q = queue(QueueDiscipline::Fifo);
    // Before any dispatch: the plain estimate, for every level.
    assert_eq!(q.expected_wait(Sheddable, 4, 10 * MS, true), 40 * MS);
    dispatch_mix(&mut q, t0, 200, 4, true);
    let w = q.expected_wait(Sheddable, 4, 10 * MS, true);
    // While no level is being shed, the plain estimate (module docs of `served.rs`).
    assert_eq!(q.expected_wait(Sheddable, 4, 10 * MS, false), 40 * MS);
    // 40 ms / (1 - 3/4) = 160 ms; the record weighs the last few dozen dispatches.
    assert!(w > 120 * MS && w < 220 * MS, "{w:?}");
    // Nothing is above CRITICAL_PLUS, and CRITICAL_PLUS took none: both keep the plain one.
    assert_eq!(q.expected_wait(CriticalPlus, 4, 10 * MS, true), 40 * MS);
    assert_eq!(q.expected_wait(Critical, 4, 10 * MS, true), 40 * MS);
    dispatch_mix(&mut q, t0, 400, 0, true);
    assert_eq!(q.expected_wait(Sheddable, 1, 10 * MS, true), 160 * MS);
    assert_eq!(q.expected_wait(Sheddable, 0, 10 * MS, true), Duration::ZERO);
}

/// Slots that go above a level while none of it waits say nothing of how fast it would drain:
/// a level refused at the door because the levels above took every slot would otherwise never
/// wait again, and so never see a slot (`spillway demo` with throttling clients: SHEDDABLE,
/// 30 % of a 4-worker backend, refused with nothing of it queued while the backend idled).
#[test]
fn slots_taken_while_a_level_is_absent_do_not_lengthen_its_wait() {
    let t0 = Instant::now();
    let mut q = queue(QueueDiscipline::Fifo);
    dispatch_mix(&mut q, t0, 400, 0, false);
    assert_eq!(q.expected_wait(Sheddable, 4, 10 * MS, true), 40 * MS);
    assert_eq!(q.expected_wait(SheddablePlus, 4, 10 * MS, true), 40 * MS);
    // Contested slots count: SHEDDABLE waiting, CRITICAL served, SHEDDABLE_PLUS absent.
    dispatch_mix(&mut q, t0, 400, 0, true);
    assert_eq!(q.expected_wait(Sheddable, 1, 10 * MS, true), 160 * MS);
    assert_eq!(q.expected_wait(SheddablePlus, 4, 10 * MS, true), 40 * MS);
}

/// What a level saw of the slots is trusted while it has work waiting and for a second after
/// the last slot it contested; then an arrival of it is judged on the plain estimate again.
#[test]
fn a_levels_share_is_current_for_a_second_after_it_last_waited() {
    let t0 = Instant::now();
    let mut q = queue(QueueDiscipline::Fifo);
    assert!(!q.share_is_current(Sheddable, t0), "never seen");
    dispatch_mix(&mut q, t0, 40, 0, true);
    assert!(q.share_is_current(Sheddable, t0 + 5000 * MS), "waiting");
    assert!(!q.share_is_current(SheddablePlus, t0), "never waited");
    // The one left waiting is served (the slot it contests is its own).
    let slots = Slots::new(usize::MAX);
    let last = q.dequeue(t0 + 10 * MS, Duration::ZERO, &slots, |_, _| {
        panic!("no drop")
    });
    assert_eq!(last.map(|e| e.item), Some(WAITING));
    assert!(q.share_is_current(Sheddable, t0 + 1009 * MS));
    assert!(!q.share_is_current(Sheddable, t0 + 1010 * MS));
}

/// The pushed-back drop judges a waiter on its level's share too: a SHEDDABLE entry behind
/// three CRITICAL ones would start at +40 ms if the slots were shared evenly (in time for its
/// 100 ms budget), but CRITICAL has been taking every slot, so it would not start for 640 ms.
#[test]
fn pushed_back_entries_are_judged_at_their_levels_share_of_the_slots() {
    let t0 = Instant::now();
    let mut even = queue(QueueDiscipline::Fifo);
    let mut starved = queue(QueueDiscipline::Fifo);
    dispatch_mix(&mut starved, t0, 400, 0, true);
    for q in [&mut even, &mut starved] {
        q.push(t0, 100, Sheddable, false, Some(t0 + 105 * MS), 10)
            .expect("room");
        for i in 101..104 {
            q.push(t0, i, Critical, false, None, 10).expect("room");
        }
    }
    let mut dropped = Vec::new();
    even.drop_pushed_back(t0, Critical, None, 10 * MS, 5 * MS, |e, r| {
        dropped.push((e.item, r))
    });
    assert!(dropped.is_empty(), "{dropped:?}");
    // Nothing is being shed: the plain estimate, as for the even queue.
    starved.drop_pushed_back(t0, Critical, None, 10 * MS, 5 * MS, |e, r| {
        dropped.push((e.item, r))
    });
    assert!(dropped.is_empty(), "{dropped:?}");
    starved.drop_pushed_back(t0, Critical, Some(Sheddable), 10 * MS, 5 * MS, |e, r| {
        dropped.push((e.item, r))
    });
    assert_eq!(dropped, vec![(100, DropReason::Evicted)]);
    // The SHEDDABLE entry that waited through the starving dispatches stays: no deadline, and
    // the test queue's 10 s max wait is beyond its 640 ms.
    assert_eq!((even.len(), starved.len()), (4, 4));
}

#[test]
fn full_queue_evicts_lowest_criticality_newest() {
    let t0 = Instant::now();
    let mut q = queue(QueueDiscipline::Fifo);
    q.push(t0, 1, Sheddable, false, None, 3).expect("room");
    q.push(t0, 2, Sheddable, false, None, 3).expect("room");
    q.push(t0, 3, SheddablePlus, false, None, 3).expect("room");
    // Equal-or-lower criticality arrivals are refused and handed back.
    assert_eq!(q.push(t0, 4, Sheddable, false, None, 3).err(), Some(4));
    let p = q.push(t0, 5, Critical, false, None, 3).expect("evicts");
    let evicted: Vec<u32> = p.evicted.iter().map(|e| e.item).collect();
    assert_eq!(evicted, vec![2], "the newest SHEDDABLE goes");
    assert_eq!(q.len(), 3);
    let p = q
        .push(t0, 6, SheddablePlus, false, None, 3)
        .expect("evicts");
    assert_eq!(
        p.evicted.iter().map(|e| e.item).collect::<Vec<_>>(),
        vec![1]
    );
    assert_eq!(q.push(t0, 7, SheddablePlus, true, None, 3).err(), Some(7));
    let (served, _) = drain(&mut q, t0);
    assert_eq!(served, vec![5, 3, 6]);
}

#[test]
fn remove_by_ticket_cancels() {
    let t0 = Instant::now();
    let mut q = queue(QueueDiscipline::Fifo);
    let tickets: Vec<Ticket> = (0..5)
        .map(|i| {
            q.push(t0, i, Critical, false, None, 10)
                .expect("room")
                .ticket
        })
        .collect();
    assert_eq!(q.remove(t0, tickets[2]).map(|e| e.item), Some(2));
    assert!(q.remove(t0, tickets[2]).is_none(), "removed once");
    let (served, _) = drain(&mut q, t0);
    assert_eq!(served, vec![0, 1, 3, 4]);
    assert!(q.remove(t0, tickets[0]).is_none());
}

#[test]
fn zero_capacity_refuses_everything() {
    let t0 = Instant::now();
    let mut q = queue(QueueDiscipline::Fifo);
    assert_eq!(q.push(t0, 1, CriticalPlus, true, None, 0).err(), Some(1));
    assert_eq!(QueueConfig::default().capacity(41), 20, "half the limit");
}

#[test]
fn config_errors_name_the_field() {
    let mut c = QueueConfig::default();
    assert!(c.validate().is_ok());
    c.max_wait = Duration::ZERO;
    assert_eq!(c.validate().unwrap_err().field, "queue.max_wait");
    c = QueueConfig {
        discipline: QueueDiscipline::Codel {
            target: 200 * MS,
            interval: 100 * MS,
        },
        ..QueueConfig::default()
    };
    assert_eq!(c.validate().unwrap_err().field, "queue.discipline.target");
    c.max_len = Some(usize::MAX);
    assert_eq!(c.validate().unwrap_err().field, "queue.max_len");
}

#[derive(Debug, Clone)]
enum Op {
    Push(u8, bool, u8),
    Dequeue(u8),
    Remove(u8),
    Advance(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..4, any::<bool>(), 0u8..200).prop_map(|(c, k, d)| Op::Push(c, k, d)),
        (0u8..4).prop_map(Op::Dequeue),
        any::<u8>().prop_map(Op::Remove),
        any::<u8>().prop_map(Op::Advance),
    ]
}

fn discipline() -> impl Strategy<Value = QueueDiscipline> {
    prop_oneof![
        Just(QueueDiscipline::Fifo),
        Just(QueueDiscipline::adaptive_lifo()),
        Just(QueueDiscipline::codel()),
    ]
}

proptest! {
    /// Whatever happens, the queue never holds more than its bound, every entry leaves exactly
    /// once (served, dropped, evicted, removed or still queued), and a served entry is never of
    /// lower criticality than one still waiting that was not dropped; the set of non-empty
    /// classes stays exact.
    #[test]
    fn bounded_and_conserving(
        cap in 0usize..8,
        disc in discipline(),
        ops in proptest::collection::vec(op(), 0..200),
    ) {
        let t0 = Instant::now();
        let mut q: AdmissionQueue<u32> = AdmissionQueue::new(QueueConfig {
            max_len: Some(cap),
            max_wait: 100 * MS,
            discipline: disc,
        }).expect("valid");
        let mut now = t0;
        let mut next = 0u32;
        let mut tickets = Vec::new();
        let (mut out, mut refused) = (0usize, 0usize);
        for op in ops {
            match op {
                Op::Push(c, k, d) => {
                    let c = Criticality::ALL[usize::from(c)];
                    let deadline = (d < 100).then(|| now + u32::from(d) * MS);
                    match q.push(now, next, c, k, deadline, cap) {
                        Ok(p) => {
                            for e in &p.evicted {
                                prop_assert!(e.criticality < c);
                            }
                            out += p.evicted.len();
                            tickets.push(p.ticket);
                        }
                        Err(item) => { prop_assert_eq!(item, next); refused += 1; }
                    }
                    next += 1;
                }
                Op::Dequeue(n) => {
                    let slots = Slots::new(usize::from(n));
                    while let Some(e) = q.dequeue(now, 5 * MS, &slots, |_, _| out += 1) {
                        out += 1;
                        // Nothing of higher criticality was left waiting.
                        let waiting = q.len_by_criticality();
                        for higher in Criticality::ALL.iter().filter(|h| **h > e.criticality) {
                            prop_assert_eq!(waiting[higher.index()], 0);
                        }
                    }
                }
                Op::Remove(i) => {
                    if !tickets.is_empty() {
                        let t = tickets[usize::from(i) % tickets.len()];
                        if q.remove(now, t).is_some() { out += 1; }
                    }
                }
                Op::Advance(ms) => now += u32::from(ms) * MS,
            }
            prop_assert!(q.len() <= cap);
            prop_assert_eq!(q.len() + out + refused, next as usize);
            prop_assert_eq!(q.len_by_criticality().iter().sum::<usize>(), q.len());
            // The set a dequeue reads instead of every deque names exactly the non-empty ones.
            let set = (0..CLASSES)
                .filter(|&c| !q.classes[c].is_empty())
                .fold(0u32, |s, c| s | 1 << c);
            prop_assert_eq!(q.nonempty, set);
        }
    }
}
