//! Prefetch hints: where a dequeue reads first, for the controller's
//! `AdmissionController::queue_hints` (the `hints` feature).
//!
//! Why apart from the queue's logic: nothing here is read by a decision, and the addresses are
//! never dereferenced (see the `hint` module).

use std::collections::VecDeque;

use super::{class_of, highest, AdmissionQueue, QueueEntry};
use crate::Criticality;

impl<T> AdmissionQueue<T> {
    /// Bytes from the start of the queue to its class deques: the length, class set, CoDel
    /// state and discipline that every push and dequeue reads (for prefetch hints).
    pub const HEAD_BYTES: usize = std::mem::offset_of!(Self, classes);

    /// Bytes from the start of the queue to the deque a push of criticality `c` (a first
    /// attempt, not a continuation) appends to (for prefetch hints).
    pub fn class_offset(c: Criticality) -> usize {
        Self::HEAD_BYTES + class_of(c, false) * std::mem::size_of::<VecDeque<QueueEntry<T>>>()
    }

    /// The addresses a dequeue reads first after the queue's head, for prefetch hints: the
    /// deque of the highest non-empty class and that deque's front entry (`[0, 0]` when
    /// empty). Computed from the deque alone; no entry is read.
    pub fn next_addrs(&self) -> [usize; 2] {
        let Some(d) = highest(self.nonempty).and_then(|c| self.classes.get(c)) else {
            return [0, 0];
        };
        [
            d as *const VecDeque<QueueEntry<T>> as usize,
            d.front().map_or(0, |e| e as *const QueueEntry<T> as usize),
        ]
    }
}
