//! [`ThreadSnapshot`]: what one request works with, made once per thread and configuration.

use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{ProxyState, Runtime};

/// What one request works with: the shared state and the runtime current when it arrived.
///
/// Why a per-thread snapshot ([`ProxyState::current`]) instead of reading the runtime's lock
/// and cloning its `Arc` per request: both are atomic writes to cache lines every data-plane
/// thread writes (the lock's reader count, the `Arc`'s count, and the state's own count when
/// the listener clones it per request), so each request on one core took those lines from the
/// other core. The snapshot is made once per thread and configuration (an epoch the reload
/// bumps) and its own count is touched by its thread only. A reload still takes effect for the
/// next request: the epoch check is a read of a line that changes only on reload.
#[derive(Debug)]
pub struct ThreadSnapshot {
    /// The proxy's shared state.
    pub state: Arc<ProxyState>,
    /// The runtime (configuration, controller, router, pool) at the snapshot's epoch.
    pub rt: Arc<Runtime>,
    epoch: u64,
}

thread_local! {
    /// This thread's snapshot (of the last state it served: one per process outside tests).
    static CURRENT: RefCell<Option<Arc<ThreadSnapshot>>> = const { RefCell::new(None) };
}

impl ProxyState {
    /// This thread's snapshot of the state and its current runtime, for one request (see
    /// [`ThreadSnapshot`]): cloned from the thread's copy, or made afresh after a reload.
    pub fn current(self: &Arc<Self>) -> Arc<ThreadSnapshot> {
        let epoch = self.epoch.load(Ordering::Acquire);
        let fresh = || {
            Arc::new(ThreadSnapshot {
                state: Arc::clone(self),
                rt: self.runtime(),
                epoch,
            })
        };
        let cached = CURRENT.try_with(|c| {
            let mut c = c.try_borrow_mut().ok()?;
            match c.as_ref() {
                Some(cur) if cur.epoch == epoch && Arc::ptr_eq(&cur.state, self) => {
                    Some((Arc::clone(cur), None))
                }
                _ => {
                    let cur = fresh();
                    // The replaced snapshot is dropped outside the borrow.
                    Some((Arc::clone(&cur), c.replace(cur)))
                }
            }
        });
        match cached {
            Ok(Some((cur, _replaced))) => cur,
            // During thread exit, or re-entered from a drop: a snapshot of its own.
            _ => fresh(),
        }
    }
}
