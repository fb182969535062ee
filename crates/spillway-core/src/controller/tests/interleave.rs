//! Deterministic interleavings around `enqueue`: another thread's release lands between the
//! enqueuing thread's own dispatch and its look at the waiter. The multi-threaded stress test
//! reaches this window only by chance (it once hung in CI on a waiter lost there); here the
//! other thread's work is injected at that point on the same thread, so every run takes it.

use std::cell::RefCell;
use std::rc::Rc;
use std::task::Poll;

use super::super::interleave;
use super::*;

/// Limit 1 held by `a`; a second request queues; `in_window` runs between the enqueuing
/// dispatch (which found no slot) and the answer.
fn queue_behind_a_held_slot(
    ctl: &AdmissionController,
    in_window: impl FnOnce(Permit) + 'static,
) -> Admission {
    let a = admitted(ctl.admit(&req(Critical)));
    let mut once = Some((a, in_window));
    interleave::set(move || {
        if let Some((a, f)) = once.take() {
            f(a);
        }
    });
    ctl.admit(&req(Critical))
}

#[test]
fn a_grant_in_the_window_is_answered_at_once() {
    let (ctl, _clock) = controller(config(1, 4));
    // The holder's release dispatches to the waiter before `enqueue` looks at it: the answer
    // must be that grant, not a queued admission nobody will resolve.
    let b = admitted(queue_behind_a_held_slot(&ctl, drop));
    let snap = ctl.snapshot();
    assert_eq!((snap.in_flight, snap.queued), (1, 0), "{snap:?}");
    assert_eq!(b.criticality(), Critical);
    drop(b);
    let snap = ctl.snapshot();
    assert_eq!((snap.in_flight, snap.queued), (0, 0), "{snap:?}");
    assert_eq!(snap.admitted.0.iter().sum::<u64>(), 2, "{snap:?}");
    assert_eq!(snap.enqueued.0.iter().sum::<u64>(), 1, "{snap:?}");
}

#[test]
fn a_refusal_in_the_window_is_answered_at_once() {
    let (ctl, clock) = controller(config(1, 4));
    // Time passes beyond the queue's 1 s max wait, then the holder releases: that dispatch
    // drops the waiter as timed out, and `enqueue` must answer with that refusal.
    let r = refused(queue_behind_a_held_slot(&ctl, move |a| {
        clock.advance(Duration::from_secs(2));
        drop(a);
    }));
    assert_eq!(r.reason, RefusalReason::QueueTimeout);
    let snap = ctl.snapshot();
    assert_eq!((snap.in_flight, snap.queued), (0, 0), "{snap:?}");
    assert_eq!(snap.refused.total(), 1, "{snap:?}");
}

#[test]
fn a_release_after_the_window_reaches_the_queued_admission() {
    let (ctl, _clock) = controller(config(1, 4));
    // Nothing happens in the window: the request is queued, and the slot released later is
    // handed to it through its future.
    let held: Rc<RefCell<Option<Permit>>> = Rc::default();
    let keep = Rc::clone(&held);
    let mut q = queued(queue_behind_a_held_slot(&ctl, move |a| {
        *keep.borrow_mut() = Some(a);
    }));
    let waker = noop();
    assert!(poll(&mut q, &waker).is_pending());
    drop(held.borrow_mut().take());
    let b = match poll(&mut q, &waker) {
        Poll::Ready(Ok(p)) => p,
        other => panic!("expected the released slot, got {other:?}"),
    };
    let snap = ctl.snapshot();
    assert_eq!((snap.in_flight, snap.queued), (1, 0), "{snap:?}");
    drop(b);
}
