//! The event queue: a binary heap, plus FIFO lanes for timers of a fixed delay.
//!
//! Why lanes: almost every attempt arms a timeout that almost never fires (the answer comes
//! first), and a heap holding all of them pays `log n` cache misses per event for timers that are
//! only discarded. A timer armed at `now + d` for a fixed `d` (a caller's timeout, a queue's
//! maximum wait) arrives in time order because `now` never goes back, so each distinct `d` gets
//! a FIFO lane, already sorted: push and pop are O(1). The heap keeps the rest (service
//! completions, arrivals, backoffs, deadline-capped timers) — about one entry per request in
//! flight. Pops take the smallest `(time, sequence)` over the heap top and the lane fronts, so
//! the order is exactly the one a single heap would give: results do not depend on the lanes.

use std::collections::{BinaryHeap, VecDeque};

use super::{Ev, Kind};

/// At most this many lanes (distinct delays); further delays go to the heap.
const MAX_LANES: usize = 16;

#[derive(Default)]
pub(super) struct EventQueue {
    heap: BinaryHeap<Ev>,
    lanes: Vec<(u64, VecDeque<Ev>)>,
    seq: u64,
}

impl EventQueue {
    /// Schedules `kind` for `(id, gen)` at `at`; `now` is the current time (`at >= now`).
    pub fn push(&mut self, now: u64, at: u64, kind: Kind, id: u32, gen: u32) {
        self.seq += 1;
        let ev = Ev::new(at, self.seq, kind, id, gen);
        if matches!(kind, Kind::AttemptTimeout | Kind::QueueGiveUp) && at >= now {
            let delay = at - now;
            if let Some((_, lane)) = self.lanes.iter_mut().find(|(d, _)| *d == delay) {
                lane.push_back(ev);
                return;
            }
            if self.lanes.len() < MAX_LANES {
                self.lanes.push((delay, VecDeque::from([ev])));
                return;
            }
        }
        self.heap.push(ev);
    }

    /// The earliest event.
    pub fn pop(&mut self) -> Option<Ev> {
        // `Ev`'s order is reversed (for the max-heap): the greatest is the earliest.
        let mut best: Option<(usize, Ev)> = None;
        for (i, (_, lane)) in self.lanes.iter().enumerate() {
            if let Some(&front) = lane.front() {
                if best.map_or(true, |(_, b)| front > b) {
                    best = Some((i, front));
                }
            }
        }
        match (best, self.heap.peek()) {
            (Some((_, b)), Some(h)) if *h > b => self.heap.pop(),
            (Some((i, _)), _) => self.lanes[i].1.pop_front(),
            (None, _) => self.heap.pop(),
        }
    }

    /// Events held (heap and lanes).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.heap.len() + self.lanes.iter().map(|(_, l)| l.len()).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_time_then_sequence_order_across_heap_and_lanes() {
        let mut q = EventQueue::default();
        let mut now = 0;
        let mut rng = fastrand::Rng::with_seed(5);
        let mut popped = Vec::new();
        for step in 0..10_000u32 {
            let kind = match step % 3 {
                0 => Kind::AttemptTimeout,
                1 => Kind::WorkerDone,
                _ => Kind::QueueGiveUp,
            };
            let delay = match kind {
                Kind::WorkerDone => rng.u64(0..1000),
                _ => [100, 250, 250, 1000][rng.usize(0..4)],
            };
            q.push(now, now + delay, kind, step, 0);
            if step % 2 == 0 {
                let ev = q.pop().expect("non-empty");
                now = ev.at;
                popped.push(ev);
            }
        }
        while let Some(ev) = q.pop() {
            popped.push(ev);
        }
        assert_eq!(q.len(), 0);
        assert_eq!(popped.len(), 10_000);
        for w in popped.windows(2) {
            assert!((w[0].at, w[0].key) < (w[1].at, w[1].key), "{w:?}");
        }
    }
}
