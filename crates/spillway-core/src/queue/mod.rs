//! The admission queue: who waits for a concurrency slot, in what order, and who is dropped.
//!
//! Why it is shaped like this:
//!
//! - **Short.** A queue in front of a worker pool turns overload into latency, so it is bounded
//!   by default to half the concurrency limit — the SRE book (ch. 22 "Addressing Cascading
//!   Failures", §"Queue management") advises a queue of at most 50% of the thread pool size for
//!   steady traffic.
//! - **Bounded in time too.** An entry waits at most `max_wait` (default 100 ms, one CoDel
//!   interval: a wait longer than that is a standing queue, not a burst), and one with a
//!   deadline no longer than it could still finish by it given the expected service time (a
//!   cautious mean of recent service times). CRITICAL work with a deadline is bounded by
//!   that deadline alone ([`AdmissionQueue::give_up_at`]) while its overload is a burst, and
//!   by the max wait too once it is sustained ([`AdmissionQueue::sustained`]: a queue
//!   standing at the deadline adds latency, not goodput). Sheddable work with a deadline
//!   likewise waits past the max wait while the controller holds its level's overload to be a
//!   burst ([`AdmissionQueue::set_burst_levels`]). Past that it is dropped rather than served,
//!   because its caller has given up or will have by the time the answer is ready. The
//!   controller refuses on arrival a request whose expected wait
//!   ([`AdmissionQueue::expected_wait`]: those ahead of it, drained at its level's share of the
//!   slots — what the levels above it leave) already exceeds that budget, and drops entries a more critical arrival pushed past theirs
//!   ([`AdmissionQueue::drop_pushed_back`]): a refusal that comes at once costs the caller
//!   nothing and leaves it time to try elsewhere.
//! - **Strict criticality order.** Nothing less critical keeps waiting once a more critical
//!   entry has given up for queueing (`QueueTimeout`): it would be served in that entry's
//!   place ([`AdmissionQueue::drop_below`]).
//! - **Priority.** Higher criticality leaves first; at equal criticality a request that finishes
//!   work already started (`continuation`: the next page, the commit) goes before new work
//!   (AWS Builders' Library, "Using load shedding to avoid overload"). When full, an arrival of
//!   higher criticality evicts the newest entry of the lowest criticality present.
//! - **Fresh first under pressure.** Disciplines: FIFO; adaptive LIFO (Maurer, "Fail at Scale",
//!   ACM Queue 13(8), 2015: FIFO normally, LIFO once a queue has been building for a while, so
//!   the requests served are the ones whose callers are still waiting); and CoDel (Nichols &
//!   Jacobson 2012, RFC 8289; see `codel.rs`) which drops at dequeue once the sojourn time has
//!   stayed above target for an interval — dropping the oldest entry of the lowest criticality
//!   queued, and only sheddable work (below CRITICAL): CRITICAL work waits out its own budget
//!   (SRE book ch. 21: shed the least critical first). Nor work above a level the controller
//!   is refusing for overload ([`AdmissionQueue::set_shed_level`]): that level's slots come to
//!   it first, and dropped it saw the shed level admitted in its place.
//!
//! The queue is a plain data structure driven by `now` arguments and a [`SlotSource`], so its
//! ordering and dropping logic is unit-tested on its own; the controller keeps it behind a mutex.
//! Entries live in one `VecDeque` per (criticality, continuation) class, in arrival order, so
//! FIFO pops a front, LIFO a back and eviction a back — all O(1).

//!
//! Files: `config.rs` (settings and their validation), `give_up.rs` (when an entry stops
//! waiting and who is dropped for it), `dequeue.rs` (who is served next), `served.rs` (how
//! the slots are shared between levels, for wait estimates), `sustained.rs` (a burst of
//! CRITICAL work or sustained overload of it, and the measured drain), `codel.rs`,
//! `service.rs` (the expected service time) and `hints.rs` (prefetch addresses).

mod codel;
mod config;
mod dequeue;
mod give_up;
mod hints;
#[cfg(feature = "serde")]
pub(crate) mod millis;
mod served;
mod service;
mod sustained;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::criticality::Criticality;
use crate::error::ConfigError;

use codel::Codel;
pub use config::{QueueConfig, QueueDiscipline};
pub use service::{ServiceBudget, ServiceTimeEstimate};

/// How long an entry may wait at most, by default: one CoDel interval (100 ms, Nichols &
/// Jacobson 2012) — a wait longer than that is a standing queue rather than a burst.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_millis(100);
/// CoDel target sojourn time: 5 ms (Nichols & Jacobson 2012; folly `Codel` default).
pub const CODEL_TARGET: Duration = Duration::from_millis(5);
/// CoDel interval: 100 ms (Nichols & Jacobson 2012; folly `Codel` default).
pub const CODEL_INTERVAL: Duration = Duration::from_millis(100);

/// Number of (criticality, continuation) classes.
const CLASSES: usize = Criticality::COUNT * 2;

/// Why an entry left the queue without being served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Waited longer than `max_wait`.
    QueueTimeout,
    /// Its deadline passed, or it cannot finish by it given the expected service time.
    DeadlineExceeded,
    /// CoDel dropped it: the queue's delay has stayed above target.
    Codel,
    /// A higher-criticality arrival took its place in a full queue.
    Evicted,
}

/// Where the queue gets concurrency slots from (the limiter, or a counter in tests).
pub trait SlotSource {
    /// Whether a request of criticality `c` could take a slot now (no side effect).
    fn has_slot(&self, c: Criticality) -> bool;
    /// Takes a slot for `c`; `false` if none is free any more.
    fn take_slot(&self, c: Criticality) -> bool;
}

/// Identifies an entry for removal (cancellation); cheap to copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ticket {
    seq: u64,
    class: u8,
}

/// One waiting request.
#[derive(Debug)]
pub struct QueueEntry<T> {
    /// The caller's payload (the controller's waiter slot).
    pub item: T,
    /// Its criticality.
    pub criticality: Criticality,
    /// Whether it finishes work already started.
    pub continuation: bool,
    /// When it joined the queue.
    pub enqueued_at: Instant,
    /// Its deadline, if any.
    pub deadline: Option<Instant>,
    /// Its ticket.
    pub ticket: Ticket,
}

/// A successful [`AdmissionQueue::push`].
#[derive(Debug)]
pub struct Pushed<T> {
    /// The new entry's ticket.
    pub ticket: Ticket,
    /// Entries evicted to make room (lowest criticality, newest first); each must be refused
    /// `QueueFull`.
    pub evicted: Vec<QueueEntry<T>>,
}

/// The bounded priority queue of requests waiting for a slot.
///
/// Laid out (`repr(C)`) with what every push and dequeue reads first — the length, the set of
/// non-empty classes, CoDel's state, the discipline — and the eight class deques (32 bytes
/// each) after them: a dequeue reads only the deques the set names, so a queue used by one
/// criticality touches three or four of its cache lines instead of every class's.
#[derive(Debug)]
#[repr(C)]
pub struct AdmissionQueue<T> {
    len: usize,
    /// Bit `c` set iff `classes[c]` is non-empty.
    nonempty: u32,
    next_seq: u64,
    codel: Option<Codel>,
    /// Since when the queue has held more than the adaptive-LIFO depth.
    building_since: Option<Instant>,
    /// Per level, the share of the slots it contested (had work waiting when they went) that
    /// went to levels above it, in 1/65536ths (see `served.rs`).
    served: [u32; Criticality::COUNT],
    /// When each level last saw a slot go (to it or above it) while it had work waiting.
    contested_at: [Option<Instant>; Criticality::COUNT],
    /// Burst or sustained overload of the deadline-bound levels, and the measured drain.
    sustained: sustained::Sustained,
    /// The lowest level being refused for overload, as the controller last said
    /// ([`set_shed_level`](Self::set_shed_level)): CoDel drops nothing above it.
    shed_level: Option<Criticality>,
    /// Bit `c` set iff the controller holds sheddable level `c`'s overload, if any, to be a
    /// burst, not sustained ([`set_burst_levels`](Self::set_burst_levels)).
    burst_levels: u8,
    cfg: QueueConfig,
    /// Index `2 · criticality + continuation`: served from the highest index down.
    classes: [VecDeque<QueueEntry<T>>; CLASSES],
}

/// The classes named by a set of bits, lowest first.
#[inline]
fn classes_in(mut set: u32) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        if set == 0 {
            return None;
        }
        let c = set.trailing_zeros() as usize;
        set &= set - 1;
        Some(c)
    })
}

/// The highest class in a non-empty set.
#[inline]
fn highest(set: u32) -> Option<usize> {
    (set != 0).then(|| (u32::BITS - 1 - set.leading_zeros()) as usize)
}

const _: () = assert!(CLASSES <= u32::BITS as usize, "one bit per class");

/// The classes of sheddable work (criticality below CRITICAL), the only ones CoDel drops.
const SHEDDABLE_CLASSES: u32 = (1 << (Criticality::Critical.index() * 2)) - 1;

#[inline]
fn class_of(c: Criticality, continuation: bool) -> usize {
    c.index() * 2 + usize::from(continuation)
}

impl<T> AdmissionQueue<T> {
    /// An empty queue; fails if `cfg` does not validate.
    pub fn new(cfg: QueueConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let codel = match cfg.discipline {
            QueueDiscipline::Codel { target, interval } => Some(Codel::new(target, interval)),
            _ => None,
        };
        Ok(AdmissionQueue {
            cfg,
            classes: std::array::from_fn(|_| VecDeque::new()),
            len: 0,
            nonempty: 0,
            next_seq: 0,
            building_since: None,
            served: [0; Criticality::COUNT],
            contested_at: [None; Criticality::COUNT],
            sustained: sustained::Sustained::default(),
            shed_level: None,
            burst_levels: 0,
            codel,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &QueueConfig {
        &self.cfg
    }

    /// Entries waiting.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every waiting entry, lowest class first, each class in arrival order.
    pub fn iter(&self) -> impl Iterator<Item = &QueueEntry<T>> {
        self.classes.iter().flatten()
    }

    /// Entries waiting, per criticality.
    pub fn len_by_criticality(&self) -> [usize; Criticality::COUNT] {
        let mut out = [0; Criticality::COUNT];
        for (i, q) in self.classes.iter().enumerate() {
            out[i / 2] += q.len();
        }
        out
    }

    /// Whether the adaptive-LIFO discipline is serving newest-first at `now`.
    pub fn is_lifo(&self, now: Instant) -> bool {
        match (self.cfg.discipline, self.building_since) {
            (QueueDiscipline::AdaptiveLifo { after, .. }, Some(since)) => {
                now.saturating_duration_since(since) >= after
            }
            _ => false,
        }
    }

    /// Notes the lowest level being refused for overload (`None`: none lately). CoDel drops
    /// only entries of that level or below: those above it wait behind more critical work,
    /// not behind a backlog of their own, and the slots the shed level gives up come to them
    /// first (see `dequeue.rs`).
    pub fn set_shed_level(&mut self, level: Option<Criticality>) {
        self.shed_level = level;
    }

    /// Brings class `class`'s bit in `nonempty` in step with its deque.
    #[inline]
    fn note_class(&mut self, class: usize) {
        let bit = 1u32 << class;
        if self.classes[class].is_empty() {
            self.nonempty &= !bit;
        } else {
            self.nonempty |= bit;
        }
    }

    /// Keeps the adaptive-LIFO and CoDel "building" state in step with the length.
    fn note_len(&mut self, now: Instant) {
        if let QueueDiscipline::AdaptiveLifo { depth, .. } = self.cfg.discipline {
            if self.len > depth {
                self.building_since.get_or_insert(now);
            } else {
                self.building_since = None;
            }
        }
        if self.len == 0 {
            if let Some(c) = self.codel.as_mut() {
                c.on_empty();
            }
            self.sustained.on_empty();
        }
    }

    /// Adds a request, unless the queue already holds `capacity` entries and none of them is
    /// of lower criticality (then the item is handed back: refuse it `QueueFull`).
    ///
    /// If full, the newest entries of the lowest criticality below `criticality` are evicted
    /// (non-continuations before continuations) — as many as needed to get back to
    /// `capacity`, or every one there is if that is not enough (the capacity shrank with the
    /// limit): a request is never refused while a less critical one keeps its place. The
    /// queue never grows past `capacity` by a push.
    pub fn push(
        &mut self,
        now: Instant,
        item: T,
        criticality: Criticality,
        continuation: bool,
        deadline: Option<Instant>,
        capacity: usize,
    ) -> Result<Pushed<T>, T> {
        let mut evicted = Vec::new();
        if self.len >= capacity {
            let need = self.len + 1 - capacity;
            let lower = class_of(criticality, false);
            let evictable: usize = self.classes[..lower].iter().map(VecDeque::len).sum();
            if evictable == 0 {
                return Err(item);
            }
            let need = need.min(evictable);
            for class in 0..lower {
                while evicted.len() < need {
                    match self.classes[class].pop_back() {
                        Some(e) => evicted.push(e),
                        None => break,
                    }
                }
                self.note_class(class);
            }
            self.len -= evicted.len();
        }
        let class = class_of(criticality, continuation);
        let ticket = Ticket {
            seq: self.next_seq,
            class: class as u8,
        };
        self.next_seq += 1;
        self.classes[class].push_back(QueueEntry {
            item,
            criticality,
            continuation,
            enqueued_at: now,
            deadline,
            ticket,
        });
        self.nonempty |= 1 << class;
        self.len += 1;
        self.note_len(now);
        Ok(Pushed { ticket, evicted })
    }

    /// Removes the entry with `ticket` (cancellation or the caller's timer), if still queued.
    pub fn remove(&mut self, now: Instant, ticket: Ticket) -> Option<QueueEntry<T>> {
        let q = self.classes.get_mut(usize::from(ticket.class))?;
        // Sequence numbers increase along each deque (pushes go to the back).
        let pos = q.binary_search_by_key(&ticket.seq, |e| e.ticket.seq).ok()?;
        let e = q.remove(pos)?;
        self.note_class(usize::from(ticket.class));
        self.len -= 1;
        self.note_len(now);
        Some(e)
    }
}

/// Whether a request starting at `now` and taking `expected` would finish after `deadline`
/// (or the deadline has come already).
#[inline]
fn cannot_finish(now: Instant, expected: Duration, deadline: Option<Instant>) -> bool {
    match deadline {
        None => false,
        Some(d) => d <= now || now.checked_add(expected).map_or(true, |finish| finish > d),
    }
}
