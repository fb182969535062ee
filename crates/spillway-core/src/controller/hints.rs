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
use crate::Criticality;

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

    /// When an admission of criticality `c` now would join the queue — requests are queued
    /// already, or `c` has no free slot — passes `f` the addresses that enqueueing reads
    /// first: the queue's configuration, the lock word and head, `c`'s deque, and the
    /// counter it bumps; nothing when a slot is free. Read from the fast-path lines (ask once
    /// [`hot_lines`](Self::hot_lines) has had time to arrive); nothing is dereferenced.
    pub fn enqueue_hints(&self, c: Criticality, mut f: impl FnMut(*const u8)) {
        let inner = &*self.inner;
        let limiter = &inner.limiter;
        if inner.queued.load(Ordering::Relaxed) == 0 && limiter.in_flight() < limiter.allowed(c) {
            return;
        }
        f(&inner.queue_cfg as *const _ as *const u8);
        let (mutex, data) = self.queue_lock_and_data(&mut f);
        crate::hint::lines(
            mutex.wrapping_add(data),
            AdmissionQueue::<Arc<Waiter>>::HEAD_BYTES,
            &mut f,
        );
        f(mutex.wrapping_add(data + AdmissionQueue::<Arc<Waiter>>::class_offset(c)));
        if let Some(n) = inner.counters.enqueued.get(c.index()) {
            f(n as *const _ as *const u8);
        }
    }

    /// Passes `f` the queue's lock word; returns where the `Mutex` starts and the offset of
    /// the queue inside it.
    fn queue_lock_and_data(&self, f: &mut impl FnMut(*const u8)) -> (*const u8, usize) {
        let inner = &*self.inner;
        let mutex = &inner.queue as *const Mutex<AdmissionQueue<Arc<Waiter>>> as *const u8;
        // The lock word sits before the data or, if the data comes first, after it.
        let data = usize::from(inner.queue_data);
        f(if data == 0 {
            mutex.wrapping_add(size_of::<Mutex<AdmissionQueue<Arc<Waiter>>>>() - 1)
        } else {
            mutex
        });
        (mutex, data)
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
        let (mutex, data) = self.queue_lock_and_data(&mut f);
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
