//! Wakers that name a queued request by its node's index and generation, and the list their
//! wakes land in.
//!
//! Why not a waker built on an `Arc`: the core wakes a queued admission when a release grants
//! or drops it, ~10 ms of simulated time — thousands of events — after it queued. An `Arc`
//! waker is a heap object the wake reads first, and at fleet scale it has left every cache by
//! then: the wake stalled on it (2.8% of a 10⁴-task run, `perf annotate`), and every queued
//! request paid an allocation, a free and a shared count for it. A run's fleet lives on one
//! thread and the core is called only from that thread (no policy spawns a thread or wakes
//! from elsewhere), so a wake can carry its node in the waker's data word and land in a list
//! that thread owns: nothing allocated, nothing read but the list's end.
//!
//! A wake from another thread would land in that thread's list, lost to the run (memory-safe,
//! but a grant nobody polls): [`Wakes`], the engine's handle on its thread's list, is neither
//! `Send` nor `Sync`, so an engine cannot leave the thread its wakers feed.

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::task::Waker;

use super::NONE;

thread_local! {
    /// Nodes woken since the engine last looked, as `(index, generation)`.
    static LIST: RefCell<Vec<(u32, u32)>> = const { RefCell::new(Vec::new()) };
    /// Where the running engine's slab arrays start (`Slab::bases`), for the prefetch a wake
    /// starts; `(0, 0)` when unknown.
    static SLAB_AT: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// The running engine's handle on this thread's wake list (one engine per thread at a time).
pub(super) struct Wakes {
    /// Ties the handle to this thread (see the module docs).
    _here: PhantomData<*const ()>,
}

impl Wakes {
    /// Claims this thread's list for a new run: anything a previous run left is dropped.
    pub fn claim() -> Wakes {
        LIST.with(|l| l.borrow_mut().clear());
        SLAB_AT.with(|s| s.set((0, 0)));
        Wakes { _here: PhantomData }
    }

    /// A waker that names node `id` at generation `gen` (`NONE`: names nothing, its wakes are
    /// ignored).
    pub fn waker(&self, id: u32, gen: u32) -> Waker {
        named::waker(id, gen)
    }

    /// Whether anything was woken since the last [`take`](Self::take).
    #[inline]
    pub fn any(&self) -> bool {
        LIST.with(|l| !l.borrow().is_empty())
    }

    /// Swaps the woken nodes into `into` (which must be empty), in the order they were woken.
    #[inline]
    pub fn take(&self, into: &mut Vec<(u32, u32)>) {
        LIST.with(|l| std::mem::swap(&mut *l.borrow_mut(), into));
    }

    /// Notes where the slab's arrays are now (called when the slab grows: only then do they
    /// move), for the prefetch each wake starts.
    pub fn note_slab(&self, bases: (usize, usize)) {
        SLAB_AT.with(|s| s.set(bases));
    }
}

/// A wake of node `id` at generation `gen`: the loop polls that node once the event that woke
/// it is done, so its phase and held slot start loading now (see `prefetch.rs`).
fn woke(id: u32, gen: u32) {
    if id == NONE {
        return;
    }
    super::prefetch::woken_node(SLAB_AT.with(Cell::get), id);
    LIST.with(|l| l.borrow_mut().push((id, gen)));
}

/// The data word holds the node: index in the high half, generation in the low half.
#[cfg(target_pointer_width = "64")]
mod named {
    #![allow(unsafe_code)]

    use std::task::{RawWaker, RawWakerVTable, Waker};

    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, wake, wake, drop);

    pub(super) fn waker(id: u32, gen: u32) -> Waker {
        let word = (u64::from(id) << 32 | u64::from(gen)) as usize;
        // SAFETY: the data pointer is a number, never dereferenced; `clone` copies it and `drop`
        // has nothing to release, so every `RawWaker` made from it is valid for as long as
        // anyone holds it. The functions are callable from any thread (a wake from another
        // thread lands in that thread's list: see the module docs).
        unsafe { Waker::from_raw(raw(word as *const ())) }
    }

    fn raw(data: *const ()) -> RawWaker {
        RawWaker::new(data, &VTABLE)
    }

    fn clone(data: *const ()) -> RawWaker {
        raw(data)
    }

    fn wake(data: *const ()) {
        let word = data as usize as u64;
        super::woke((word >> 32) as u32, word as u32);
    }

    fn drop(_: *const ()) {}
}

/// Where a pointer cannot hold both halves: a small shared object per waker.
#[cfg(not(target_pointer_width = "64"))]
mod named {
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    struct Named(u32, u32);

    impl Wake for Named {
        fn wake(self: Arc<Self>) {
            super::woke(self.0, self.1);
        }
    }

    pub(super) fn waker(id: u32, gen: u32) -> Waker {
        Waker::from(Arc::new(Named(id, gen)))
    }
}

#[cfg(test)]
mod tests;
