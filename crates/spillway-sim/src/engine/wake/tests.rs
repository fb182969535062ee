use std::task::Waker;

use super::Wakes;
use crate::model::NONE;

fn taken(w: &Wakes) -> Vec<(u32, u32)> {
    let mut got = Vec::new();
    w.take(&mut got);
    got
}

#[test]
fn a_wake_names_its_node_and_generation_in_the_order_woken() {
    let w = Wakes::claim();
    let a = w.waker(7, 2);
    let b = w.waker(u32::MAX - 1, u32::MAX - 1);
    assert!(!w.any());
    b.wake_by_ref();
    // The consuming `wake` (a clone's) and `wake_by_ref` are separate vtable entries.
    #[allow(clippy::waker_clone_wake)]
    a.clone().wake();
    a.wake_by_ref();
    assert!(w.any());
    assert_eq!(
        taken(&w),
        vec![(u32::MAX - 1, u32::MAX - 1), (7, 2), (7, 2)]
    );
    assert!(!w.any(), "taking empties the list");
}

#[test]
fn clones_wake_alike_and_the_unnamed_waker_wakes_nothing() {
    let w = Wakes::claim();
    let a = w.waker(3, 4);
    let c: Waker = a.clone();
    assert!(a.will_wake(&c), "a clone is the same waker");
    assert!(
        !a.will_wake(&w.waker(3, 6)),
        "another generation is another waker"
    );
    w.waker(NONE, 0).wake();
    assert!(!w.any());
    drop(a);
    c.wake();
    assert_eq!(taken(&w), vec![(3, 4)]);
}

#[test]
fn a_new_run_does_not_inherit_the_last_ones_wakes() {
    {
        let w = Wakes::claim();
        w.waker(1, 0).wake();
        assert!(w.any());
    }
    let fresh = Wakes::claim();
    assert!(!fresh.any());
}
