//! Prefetch hints: where an admission and a release will read, for a caller that visits
//! thousands of controllers in turn and can see which comes next (the simulator's fleets).
//!
//! Why apart from the decisions: these read nothing a decision depends on and are never
//! dereferenced (see [`crate::hint`]); a stale address only wastes a load.

use std::mem::size_of;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::{AdmissionController, Waiter, HOT_BYTES};
use crate::queue::AdmissionQueue;

impl AdmissionController {
    /// Passes `f` one address in each cache line of this controller's fast-path state (the
    /// first `HOT_BYTES` (512) of its allocation), computed from its address alone: nothing is
    /// read. For a caller that visits thousands of controllers in turn and can see which one
    /// comes next — the simulator — to prefetch it (see [`crate::hint`]).
    pub fn hot_lines(&self, f: impl FnMut(*const u8)) {
        // `Arc::as_ptr` points past the two counts, which the permit's clone and drop touch.
        let start = (Arc::as_ptr(&self.inner) as *const u8).wrapping_sub(2 * size_of::<usize>());
        crate::hint::lines(start, HOT_BYTES, f);
    }

    /// Passes `f` the addresses of what the fast-path state points to: the shed ramp's random
    /// source (if set) and the limit algorithm's state. These are read from the controller, so
    /// ask once [`hot_lines`](Self::hot_lines) has had time to arrive.
    pub fn hot_pointees(&self, mut f: impl FnMut(*const u8)) {
        if let Some(r) = self.inner.random.get() {
            f(Arc::as_ptr(r) as *const u8);
        }
        f(self.inner.limiter.algorithm_addr());
    }

    /// When requests are queued, passes `f` the addresses a release's dispatch reads first:
    /// the queue's lock word and head (length, class set, CoDel state, discipline), the highest
    /// non-empty class's deque and its front entry; nothing when the queue is empty. Read from
    /// the fast-path lines (ask once [`hot_lines`](Self::hot_lines) has had time to arrive);
    /// nothing is dereferenced, and a stale address only wastes a load (see [`crate::hint`]).
    pub fn queue_hints(&self, mut f: impl FnMut(*const u8)) {
        let inner = &*self.inner;
        if inner.queued.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mutex = &inner.queue as *const Mutex<AdmissionQueue<Arc<Waiter>>> as *const u8;
        // The lock word sits before the data or, if the data comes first, after it.
        let data = usize::from(inner.queue_data);
        f(if data == 0 {
            mutex.wrapping_add(size_of::<Mutex<AdmissionQueue<Arc<Waiter>>>>() - 1)
        } else {
            mutex
        });
        crate::hint::lines(
            mutex.wrapping_add(data),
            AdmissionQueue::<Arc<Waiter>>::HEAD_BYTES,
            &mut f,
        );
        for hint in &inner.queue_next {
            let at = hint.load(Ordering::Relaxed);
            if at != 0 {
                f(at as *const u8);
            }
        }
    }
}
