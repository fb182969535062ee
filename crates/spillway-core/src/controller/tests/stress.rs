//! Threads admitting, queueing and releasing at once: in-flight never exceeds the limit and
//! everything is returned.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;

use super::*;

#[test]
fn concurrent_admit_and_release_never_exceed_the_limit() {
    const LIMIT: usize = 6;
    const THREADS: usize = 4;
    const ROUNDS: usize = 3000;
    /// Each thread holds up to this many permits: more than SHEDDABLE's share (4 of 6) alone,
    /// so the queue is exercised even without parallelism.
    const HOLD: usize = 5;
    // Time stands still: no waiter times out, so every queued one must eventually be granted.
    let (ctl, _clock) = controller(config(LIMIT, 4));
    let active = Arc::new(AtomicUsize::new(0));
    let max_active = Arc::new(AtomicUsize::new(0));
    let max_reported = Arc::new(AtomicUsize::new(0));
    let from_queue = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let ctl = ctl.clone();
            let (active, max_active, max_reported, from_queue) = (
                active.clone(),
                max_active.clone(),
                max_reported.clone(),
                from_queue.clone(),
            );
            std::thread::spawn(move || {
                let waker = noop();
                let mut held: Vec<Permit> = Vec::with_capacity(HOLD);
                let take = |held: &mut Vec<Permit>, p: Permit| {
                    // `active` is raised after the slot is taken and lowered before it is
                    // returned, so it never exceeds the true in-flight count.
                    let n = active.fetch_add(1, Ordering::SeqCst) + 1;
                    max_active.fetch_max(n, Ordering::SeqCst);
                    max_reported.fetch_max(p.in_flight_at_start(), Ordering::SeqCst);
                    held.push(p);
                };
                let release_all = |held: &mut Vec<Permit>| {
                    for p in held.drain(..) {
                        active.fetch_sub(1, Ordering::SeqCst);
                        drop(p);
                    }
                };
                for i in 0..ROUNDS {
                    let c = Criticality::ALL[(i * 7 + t) % Criticality::COUNT];
                    match ctl.admit(&req(c)) {
                        Admission::Admitted(p) => take(&mut held, p),
                        Admission::Queued(mut q) => {
                            // Never wait while holding slots (that could deadlock the test).
                            release_all(&mut held);
                            if i % 7 == 0 {
                                drop(q); // cancellation
                                continue;
                            }
                            for spin in 0.. {
                                // Others release within a few rounds; this bound only turns a
                                // lost waiter (which would spin forever) into a clear failure.
                                assert!(spin < 50_000_000, "queued admission never answered");
                                match poll(&mut q, &waker) {
                                    Poll::Ready(Ok(p)) => {
                                        from_queue.fetch_add(1, Ordering::Relaxed);
                                        take(&mut held, p);
                                        break;
                                    }
                                    Poll::Ready(Err(_)) => break,
                                    Poll::Pending => std::thread::yield_now(),
                                }
                            }
                        }
                        Admission::Refused(_) => {}
                    }
                    if held.len() >= HOLD || i % 11 == 0 {
                        release_all(&mut held);
                    }
                }
                release_all(&mut held);
            })
        })
        .collect();
    for h in handles {
        assert!(h.join().is_ok(), "worker panicked");
    }
    let snap = ctl.snapshot();
    assert!(max_active.load(Ordering::SeqCst) <= LIMIT);
    assert!(max_reported.load(Ordering::SeqCst) <= LIMIT);
    assert_eq!(snap.in_flight, 0, "{snap:?}");
    assert_eq!(snap.queued, 0, "{snap:?}");
    assert_eq!(
        snap.in_flight_by_criticality,
        PerCriticality([0; Criticality::COUNT])
    );
    assert!(
        snap.enqueued.0.iter().sum::<u64>() > 0,
        "queue exercised: {snap:?}"
    );
    assert!(
        from_queue.load(Ordering::Relaxed) > 0,
        "waiters granted: {snap:?}"
    );
    let admitted: u64 = snap.admitted.0.iter().sum();
    assert_eq!(
        admitted + snap.refused.total() + snap.cancelled.0.iter().sum::<u64>(),
        (THREADS * ROUNDS) as u64,
        "every request admitted, refused or cancelled exactly once: {snap:?}"
    );
}
