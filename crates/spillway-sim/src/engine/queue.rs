//! The event queue: a timing wheel of 1 ms buckets, plus FIFO lanes for timers of a fixed delay.
//!
//! Why not one binary heap: at fleet scale tens of thousands of events are pending (a worker
//! completion per busy worker), and a heap pays `log n` levels — most of them cache misses —
//! per pop; it was the simulator's largest single cost (12% of a 10⁴-task run, 17% of its L1
//! misses). Pending events are instead dropped into the wheel bucket of their millisecond (a
//! push is an append), and a bucket is sorted only when time reaches it, while it is small and
//! hot in the cache. Events due within the current millisecond (the next arrival, mostly) go to
//! a small heap beside it. Events beyond the wheel's 4 s horizon wait in an overflow heap and
//! move into the wheel as it turns. (The calendar queue idea: R. Brown, "Calendar queues",
//! CACM 31(10), 1988; here with a fixed bucket width.)
//!
//! Why lanes: almost every attempt arms a timeout that almost never fires (the answer comes
//! first). A timer armed at `now + d` for a fixed `d` (a caller's timeout, a queue's maximum
//! wait) arrives in time order because `now` never goes back, so each distinct `d` gets a FIFO
//! lane, already sorted: push and pop are O(1). A layer's network delay is such a `d` too: an
//! attempt's delivery, its answer and a cancellation are each due one delay after they are
//! sent, so they share the delay's lane (in the wheel, most would land in the current
//! millisecond's heap or be sorted with their bucket).
//!
//! Pops take the smallest `(time, sequence)` over the wheel and the lane fronts, so the order is
//! exactly the one a single heap would give: results do not depend on this structure (a test
//! below checks it against a plain heap).

use std::collections::{BinaryHeap, VecDeque};

use super::{Ev, Kind};

/// At most this many lanes (distinct delays); further delays go to the wheel.
const MAX_LANES: usize = 16;
/// How far past a lane's look-ahead slot its next line is prefetched: 8 events of 24 bytes
/// span three lines, so each line is asked for before any of its events is read.
const LANE_LINE: usize = 8;
/// Width of a wheel bucket, ns.
const WIDTH: u64 = 1_000_000;
/// Buckets in the wheel (a power of two): a horizon of 4.096 s.
const BUCKETS: u64 = 4096;

#[derive(Default)]
pub(super) struct EventQueue {
    lanes: Vec<(u64, VecDeque<Ev>)>,
    wheel: Wheel,
    seq: u64,
}

impl EventQueue {
    /// Schedules `kind` for `(id, gen)` at `at`; `now` is the current time (`at >= now`).
    /// Timers and network crossings due a fixed delay after `now` go to that delay's lane.
    pub fn push(&mut self, now: u64, at: u64, kind: Kind, id: u32, gen: u32) {
        self.seq += 1;
        let ev = Ev::new(at, self.seq, kind, id, gen);
        let fixed_delay = matches!(
            kind,
            Kind::AttemptTimeout | Kind::QueueGiveUp | Kind::Deliver | Kind::Answer | Kind::Cancel
        );
        if fixed_delay && at >= now {
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
        self.wheel.push(ev);
    }

    /// Schedules `kind` for `(id, gen)` at `at`, a time not of the form `now + a fixed delay`
    /// (a message from another shard: due one delay after the sender's time, not this one's).
    pub fn push_unlaned(&mut self, at: u64, kind: Kind, id: u32, gen: u32) {
        self.seq += 1;
        self.wheel.push(Ev::new(at, self.seq, kind, id, gen));
    }

    /// The earliest event.
    pub fn pop(&mut self) -> Option<Ev> {
        // `Ev`'s order is reversed (for max-heaps): the greatest is the earliest.
        let mut best: Option<(usize, Ev)> = None;
        for (i, (_, lane)) in self.lanes.iter().enumerate() {
            if let Some(&front) = lane.front() {
                if best.is_none_or(|(_, b)| front > b) {
                    best = Some((i, front));
                }
            }
        }
        match (best, self.wheel.peek()) {
            (Some((_, b)), Some(w)) if w > b => Some(self.wheel.take(w)),
            (Some((i, _)), _) => self.lanes[i].1.pop_front(),
            (None, w) => w.map(|w| self.wheel.take(w)),
        }
    }

    /// Returns `ev`, just popped, to the queue: it comes out first again (its time and
    /// sequence are kept, and it goes to the wheel, whose current bucket it belongs to).
    pub fn put_back(&mut self, ev: Ev) {
        self.wheel.push(ev);
    }

    /// The `k`-th event after the next in the wheel's current bucket, if it holds that many (a
    /// look ahead for prefetching; lanes and late pushes may come first).
    #[inline]
    pub fn ahead(&self, k: usize) -> Option<Ev> {
        let c = &self.wheel.current;
        c.len().checked_sub(k + 1).map(|i| c[i])
    }

    /// Events left in the wheel's current bucket (it shrinks by one whenever the next event
    /// comes from there).
    #[inline]
    pub fn current_len(&self) -> usize {
        self.wheel.current.len()
    }

    /// Each fixed-delay lane's `k`-th event after its front, with the address of its slot
    /// `LANE_LINE` places further on (for the caller to prefetch, so that a later call's read
    /// of slot `k` finds its line in the cache). A look ahead for prefetching.
    #[inline]
    pub fn lanes_ahead(
        &self,
        k: usize,
    ) -> impl Iterator<Item = (Option<Ev>, Option<*const Ev>)> + '_ {
        self.lanes.iter().map(move |(_, l)| {
            (
                l.get(k).copied(),
                l.get(k + LANE_LINE).map(|e| e as *const Ev),
            )
        })
    }

    /// Events held (wheel and lanes).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.wheel.len() + self.lanes.iter().map(|(_, l)| l.len()).sum::<usize>()
    }
}

/// The wheel. Invariant: `current` and `soon` hold the events of bucket `cur` (`at / WIDTH`),
/// `buckets[b % BUCKETS]` those of bucket `b` for `cur < b < cur + BUCKETS`, `far` the later
/// ones — so the earliest event is always in `current` or `soon`.
struct Wheel {
    /// Bucket `cur`'s events as sorted when time reached it, latest first (pop from the end).
    current: Vec<Ev>,
    /// Events pushed into bucket `cur` after it was sorted.
    soon: BinaryHeap<Ev>,
    cur: u64,
    buckets: Vec<Vec<Ev>>,
    in_buckets: usize,
    far: BinaryHeap<Ev>,
}

impl Default for Wheel {
    fn default() -> Self {
        Wheel {
            current: Vec::new(),
            soon: BinaryHeap::new(),
            cur: 0,
            buckets: (0..BUCKETS).map(|_| Vec::new()).collect(),
            in_buckets: 0,
            far: BinaryHeap::new(),
        }
    }
}

impl Wheel {
    fn push(&mut self, ev: Ev) {
        let b = ev.at / WIDTH;
        if b <= self.cur {
            self.soon.push(ev);
        } else if b < self.cur + BUCKETS {
            self.buckets[(b % BUCKETS) as usize].push(ev);
            self.in_buckets += 1;
        } else {
            self.far.push(ev);
        }
    }

    /// The earliest event, turning the wheel to it if bucket `cur` is spent.
    fn peek(&mut self) -> Option<Ev> {
        while self.current.is_empty() && self.soon.is_empty() {
            if !self.turn() {
                return None;
            }
        }
        match (self.current.last(), self.soon.peek()) {
            (Some(&c), Some(&s)) => Some(if s > c { s } else { c }),
            (Some(&c), None) => Some(c),
            (None, s) => s.copied(),
        }
    }

    /// Removes `ev`, the event [`peek`](Self::peek) just returned.
    fn take(&mut self, ev: Ev) -> Ev {
        if self.current.last() == Some(&ev) {
            self.current.pop();
        } else {
            self.soon.pop();
        }
        ev
    }

    /// Moves to the next bucket that holds anything (jumping straight to the overflow's first
    /// event when the wheel is empty) and sorts it; `false` when nothing is left at all.
    fn turn(&mut self) -> bool {
        if self.in_buckets == 0 {
            match self.far.peek() {
                Some(ev) => self.cur = ev.at / WIDTH,
                None => return false,
            }
        } else {
            self.cur += 1;
        }
        // Overflow events now within the horizon join the wheel (or the current bucket).
        while let Some(ev) = self.far.peek() {
            if ev.at / WIDTH >= self.cur + BUCKETS {
                break;
            }
            let ev = *ev;
            self.far.pop();
            if ev.at / WIDTH == self.cur {
                self.soon.push(ev);
            } else {
                self.buckets[((ev.at / WIDTH) % BUCKETS) as usize].push(ev);
                self.in_buckets += 1;
            }
        }
        // `current` is empty here: swap it in so both buffers keep their capacity.
        let slot = &mut self.buckets[(self.cur % BUCKETS) as usize];
        std::mem::swap(&mut self.current, slot);
        self.in_buckets -= self.current.len();
        // Ascending in `Ev`'s reversed order = latest first; the earliest is popped off the end.
        self.current.sort_unstable();
        true
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.current.len() + self.soon.len() + self.in_buckets + self.far.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pushes and pops a random mix through the queue and a plain heap in step: every pop must
    /// agree. Delays cover the current millisecond, the wheel, past its horizon, and lanes.
    fn agrees_with_a_heap(seed: u64, steps: u32) {
        let mut q = EventQueue::default();
        let mut reference = BinaryHeap::new();
        let mut seq = 0;
        let mut now = 0;
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut popped = 0;
        for step in 0..steps {
            let kind = match step % 5 {
                0 => Kind::AttemptTimeout,
                1 | 4 => Kind::WorkerDone,
                2 => Kind::QueueGiveUp,
                _ => Kind::Deliver,
            };
            let delay = match (kind, rng.u32(0..6)) {
                (Kind::WorkerDone, 0) => 0,
                (Kind::WorkerDone, 1) => rng.u64(0..WIDTH),
                (Kind::WorkerDone, 2) => rng.u64(0..BUCKETS * WIDTH * 3),
                (Kind::WorkerDone, _) => rng.u64(0..200 * WIDTH),
                // A network delay's lane, shared with a timer of the same delay.
                (Kind::Deliver, _) => [WIDTH / 2, 7 * WIDTH][rng.usize(0..2)],
                // More distinct delays than lanes: some timers go to the wheel too.
                _ => [100, 250, 7 * WIDTH, 5_000 * WIDTH][rng.usize(0..4)] + rng.u64(0..20),
            };
            // Every fifth a message from another shard: due a delay after the sender's time.
            let kind = if step % 5 == 4 { Kind::Answer } else { kind };
            if kind == Kind::Answer {
                q.push_unlaned(now + delay, kind, step, 0);
            } else {
                q.push(now, now + delay, kind, step, 0);
            }
            seq += 1;
            reference.push(Ev::new(now + delay, seq, kind, step, 0));
            if step % 2 == 0 {
                let ev = q.pop().expect("non-empty");
                assert_eq!(Some(ev), reference.pop(), "step {step}");
                now = ev.at;
                popped += 1;
            }
        }
        while let Some(ev) = q.pop() {
            assert_eq!(Some(ev), reference.pop());
            popped += 1;
        }
        assert_eq!(q.len(), 0);
        assert!(reference.is_empty());
        assert_eq!(popped, steps);
    }

    #[test]
    fn pops_in_time_then_sequence_order_across_wheel_overflow_and_lanes() {
        for seed in 0..8 {
            agrees_with_a_heap(seed, 20_000);
        }
    }

    #[test]
    fn ahead_names_the_events_that_follow_in_the_bucket() {
        let mut q = EventQueue::default();
        for i in 0..5u32 {
            q.push(0, 2 * WIDTH + u64::from(i), Kind::WorkerDone, i, 0);
        }
        assert_eq!(q.pop().map(|e| e.id), Some(0));
        assert_eq!(q.ahead(0).map(|e| e.id), Some(1), "the next pop");
        assert_eq!(q.ahead(3).map(|e| e.id), Some(4));
        assert_eq!(q.ahead(4), None);
        for want in 1..5 {
            assert_eq!(q.pop().map(|e| e.id), Some(want));
        }
    }

    #[test]
    fn lanes_ahead_names_each_lanes_kth_event_and_a_later_slot() {
        let mut q = EventQueue::default();
        let n = 3 + LANE_LINE as u32 + 1;
        for i in 0..n {
            q.push(
                u64::from(i),
                u64::from(i) + 1_000,
                Kind::AttemptTimeout,
                i,
                0,
            );
            q.push(
                u64::from(i),
                u64::from(i) + 50,
                Kind::QueueGiveUp,
                100 + i,
                0,
            );
        }
        let ahead: Vec<_> = q.lanes_ahead(3).collect();
        let ids: Vec<_> = ahead.iter().map(|(e, _)| e.map(|e| e.id)).collect();
        assert_eq!(ids, [Some(3), Some(103)], "each lane's 4th event");
        for ((_, slot), (_, lane)) in ahead.iter().zip(&q.lanes) {
            let want = lane.get(3 + LANE_LINE).map(|e| e as *const Ev);
            assert_eq!(*slot, want, "the slot LANE_LINE places further");
        }
        let past: Vec<_> = q.lanes_ahead(n as usize - 2).collect();
        assert!(past.iter().all(|(e, s)| e.is_some() && s.is_none()));
        assert!(q
            .lanes_ahead(n as usize)
            .all(|(e, s)| e.is_none() && s.is_none()));
    }

    #[test]
    fn jumps_over_a_long_silence() {
        let mut q = EventQueue::default();
        q.push(0, 3_600 * 1_000_000_000, Kind::Retry, 1, 0);
        q.push(0, 5, Kind::Retry, 2, 0);
        assert_eq!(q.pop().map(|e| e.id), Some(2));
        assert_eq!(q.pop().map(|e| (e.id, e.at)), Some((1, 3_600_000_000_000)));
        assert_eq!(q.pop(), None);
    }
}
