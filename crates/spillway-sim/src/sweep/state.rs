//! A request's state in a cell: what the proxy holds for it, and the waker that names it.

use std::sync::{Arc, Mutex};
use std::task::Wake;

use spillway_core::controller::{Permit, QueuedAdmission};

/// What the proxy holds for a request.
pub(super) enum Held {
    None,
    Queued(QueuedAdmission),
    Permit(Permit),
    /// Waiting in the tuned baseline's (or the oracle's) priority queue.
    Waiting,
    /// Holding one of the tuned baseline's (or the oracle's) concurrency slots.
    Slot,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Free,
    Queued,
    Backend,
}

pub(super) struct Req {
    pub(super) gen: u32,
    pub(super) phase: Phase,
    pub(super) arrival: u64,
    pub(super) deadline: u64,
    pub(super) service: u64,
    pub(super) critical: bool,
    /// The closed-loop client that sent it (`u32::MAX`: open loop).
    pub(super) client: u32,
    pub(super) held: Held,
    /// The backend started its work within the offering window (R3 counts only such answers).
    pub(super) started_in_window: bool,
}

/// A waker that records which request a release granted (or the queue refused).
pub(super) struct Wakeup {
    pub(super) id: u32,
    pub(super) gen: u32,
    pub(super) woken: Arc<Mutex<Vec<(u32, u32)>>>,
}

impl Wake for Wakeup {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.woken
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((self.id, self.gen));
    }
}

#[derive(Clone, Copy)]
pub(super) enum End {
    Ok,
    Refused,
    TimedOut,
}
