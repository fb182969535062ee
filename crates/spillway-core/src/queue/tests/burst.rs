//! Sheddable work whose level's overload is a burst (`AdmissionQueue::set_burst_levels`):
//! it waits as its deadline allows, less a second service time, and CoDel leaves it alone;
//! once its level's overload is sustained the max wait bounds it again.

use super::*;

const BURST_SHEDDABLE: u8 = 1 << Sheddable.index();

fn max_wait_100ms(discipline: QueueDiscipline) -> AdmissionQueue<u32> {
    AdmissionQueue::new(QueueConfig {
        max_len: None,
        max_wait: 100 * MS,
        discipline,
    })
    .expect("valid")
}

#[test]
fn in_a_burst_sheddable_waits_for_its_deadline_less_two_service_times() {
    let t0 = Instant::now();
    let mut q = max_wait_100ms(QueueDiscipline::Fifo);
    let far = Some(t0 + 1000 * MS);
    assert_eq!(
        q.give_up_at(t0, far, 50 * MS, Sheddable),
        t0 + 100 * MS,
        "no burst named: the max wait bounds"
    );
    q.set_burst_levels(BURST_SHEDDABLE);
    assert!(q.in_burst(Sheddable) && !q.in_burst(SheddablePlus));
    assert_eq!(q.give_up_at(t0, far, 50 * MS, Sheddable), t0 + 900 * MS);
    assert_eq!(
        q.give_up_at(t0, far, 50 * MS, SheddablePlus),
        t0 + 100 * MS,
        "only the levels named"
    );
    // Never less patient than outside a burst.
    assert_eq!(
        q.give_up_at(t0, Some(t0 + 120 * MS), 50 * MS, Sheddable),
        t0 + 70 * MS
    );
    assert_eq!(
        q.give_up_at(t0, Some(t0 + 200 * MS), 50 * MS, Sheddable),
        t0 + 100 * MS
    );
    assert_eq!(
        q.give_up_at(t0, Some(t0 + 300 * MS), 50 * MS, Sheddable),
        t0 + 200 * MS
    );
    // Before any service time is known the margin is nothing: the max wait bounds.
    assert_eq!(
        q.give_up_at(t0, far, Duration::ZERO, Sheddable),
        t0 + 100 * MS
    );
    assert_eq!(q.give_up_at(t0, None, 50 * MS, Sheddable), t0 + 100 * MS);
    // CRITICAL is not the burst mask's: it waits for its deadline less one service time.
    q.set_burst_levels(u8::MAX);
    assert!(!q.in_burst(Critical));
    assert_eq!(q.give_up_at(t0, far, 50 * MS, Critical), t0 + 950 * MS);
}

#[test]
fn purge_spares_a_burst_levels_waiters_with_a_deadline_until_it_is_sustained() {
    let t0 = Instant::now();
    let mut q = max_wait_100ms(QueueDiscipline::Fifo);
    q.set_burst_levels(BURST_SHEDDABLE);
    q.push(t0, 1, Sheddable, false, None, 10).expect("room");
    q.push(t0, 2, Sheddable, false, Some(t0 + 1000 * MS), 10)
        .expect("room");
    let mut dropped = Vec::new();
    q.purge(t0 + 150 * MS, 50 * MS, |e, r| dropped.push((e.item, r)));
    assert_eq!(
        dropped,
        vec![(1, DropReason::QueueTimeout)],
        "without a deadline the max wait still bounds"
    );
    assert_eq!(q.len(), 1);
    // Its level's overload is sustained now: the max wait bounds it again.
    q.set_burst_levels(0);
    q.purge(t0 + 160 * MS, 50 * MS, |e, r| dropped.push((e.item, r)));
    assert_eq!(dropped[1..], [(2, DropReason::QueueTimeout)]);
    assert!(q.is_empty());
}

/// Three SHEDDABLE requests queued at `t0` with a far deadline, served one every 200 ms from
/// a CoDel queue with a 10 s max wait (their sojourn far above 5 ms for longer than 100 ms);
/// what CoDel dropped.
fn codel_drops(burst: u8) -> Vec<u32> {
    let t0 = Instant::now();
    let mut q = queue(QueueDiscipline::codel());
    q.set_burst_levels(burst);
    for i in 0..3 {
        q.push(t0, i, Sheddable, false, Some(t0 + 10_000 * MS), 10)
            .expect("room");
    }
    let mut dropped = Vec::new();
    for step in 1..=3 {
        let now = t0 + step * 200 * MS;
        let slots = Slots::new(1);
        q.dequeue(now, MS, &slots, |e, r| {
            assert_eq!(r, DropReason::Codel);
            dropped.push(e.item)
        });
        if q.is_empty() {
            break;
        }
    }
    dropped
}

#[test]
fn codel_leaves_a_burst_levels_waiters_with_a_deadline_alone() {
    assert!(
        !codel_drops(0).is_empty(),
        "outside a burst the standing delay is CoDel's to drop from"
    );
    assert_eq!(codel_drops(BURST_SHEDDABLE), Vec::<u32>::new());
}
