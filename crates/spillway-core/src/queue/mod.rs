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
//!   that deadline alone ([`AdmissionQueue::give_up_at`]). Past that it is dropped rather than served, because its caller has given up or
//!   will have by the time the answer is ready. The controller refuses on arrival a request
//!   whose expected wait ([`AdmissionQueue::ahead_of`] × the time between two slots freeing)
//!   already exceeds that budget, and drops entries a more critical arrival pushed past theirs
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
//!   (SRE book ch. 21: shed the least critical first).
//!
//! The queue is a plain data structure driven by `now` arguments and a [`SlotSource`], so its
//! ordering and dropping logic is unit-tested on its own; the controller keeps it behind a mutex.
//! Entries live in one `VecDeque` per (criticality, continuation) class, in arrival order, so
//! FIFO pops a front, LIFO a back and eviction a back — all O(1).

mod codel;
mod hints;
mod service;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::criticality::Criticality;
use crate::error::ConfigError;

use codel::Codel;
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

/// The order in which waiting requests of the same class are served, and when they are dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "serde",
    serde(tag = "discipline", rename_all = "snake_case", deny_unknown_fields)
)]
pub enum QueueDiscipline {
    /// First in, first out.
    Fifo,
    /// FIFO until the queue has held more than `depth` entries for `after`, then LIFO until it
    /// drains to `depth` (Facebook's adaptive LIFO, "Fail at Scale", ACM Queue 2015).
    AdaptiveLifo {
        /// Queue length above which the queue counts as building (default 0: non-empty).
        depth: usize,
        /// How long it must have been building before switching to LIFO (default 100 ms).
        #[cfg_attr(
            feature = "serde",
            serde(rename = "after_ms", with = "crate::queue::millis")
        )]
        after: Duration,
    },
    /// FIFO, dropping at dequeue while the sojourn time stays above `target` (CoDel).
    Codel {
        /// Acceptable standing queue delay (default 5 ms).
        #[cfg_attr(
            feature = "serde",
            serde(rename = "target_ms", with = "crate::queue::millis")
        )]
        target: Duration,
        /// Window over which the delay must stay above target before dropping (default 100 ms).
        #[cfg_attr(
            feature = "serde",
            serde(rename = "interval_ms", with = "crate::queue::millis")
        )]
        interval: Duration,
    },
}

impl QueueDiscipline {
    /// Adaptive LIFO with its defaults: LIFO once the queue has been non-empty for 100 ms.
    pub const fn adaptive_lifo() -> Self {
        QueueDiscipline::AdaptiveLifo {
            depth: 0,
            after: CODEL_INTERVAL,
        }
    }

    /// CoDel with the paper's defaults (5 ms / 100 ms).
    pub const fn codel() -> Self {
        QueueDiscipline::Codel {
            target: CODEL_TARGET,
            interval: CODEL_INTERVAL,
        }
    }
}

impl Default for QueueDiscipline {
    /// CoDel: it bounds standing delay without a hand-tuned timeout.
    fn default() -> Self {
        QueueDiscipline::codel()
    }
}

/// Queue bounds and discipline.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct QueueConfig {
    /// Maximum entries; `None` (default) = half the current concurrency limit (SRE book ch. 22:
    /// at most 50% of the worker pool). `Some(0)` disables queueing.
    pub max_len: Option<usize>,
    /// Longest an entry may wait (default 100 ms); one with a deadline gives up earlier if it
    /// could no longer finish by it.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "max_wait_ms", with = "crate::queue::millis")
    )]
    pub max_wait: Duration,
    /// Service order and dropping (default CoDel 5 ms / 100 ms).
    pub discipline: QueueDiscipline,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            max_len: None,
            max_wait: DEFAULT_MAX_WAIT,
            discipline: QueueDiscipline::default(),
        }
    }
}

/// Upper bound on `max_wait` and discipline durations: a queue wait of an hour is a unit mistake.
const MAX_SETTING: Duration = Duration::from_secs(3600);
/// Upper bound on `max_len`: far above any useful queue, low enough to catch typos.
const MAX_LEN: usize = 1 << 24;

impl QueueConfig {
    /// Checks every setting; the error names the field and what it accepts.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(n) = self.max_len {
            if n > MAX_LEN {
                return Err(ConfigError::new(
                    "queue.max_len",
                    n,
                    "an integer in [0, 16777216] (0 disables queueing), or unset for half the limit",
                ));
            }
        }
        check_duration("queue.max_wait", self.max_wait, false)?;
        match self.discipline {
            QueueDiscipline::Fifo => {}
            QueueDiscipline::AdaptiveLifo { depth, after } => {
                if depth > MAX_LEN {
                    return Err(ConfigError::new(
                        "queue.discipline.depth",
                        depth,
                        "an integer in [0, 16777216]",
                    ));
                }
                check_duration("queue.discipline.after", after, true)?;
            }
            QueueDiscipline::Codel { target, interval } => {
                check_duration("queue.discipline.target", target, false)?;
                check_duration("queue.discipline.interval", interval, false)?;
                if target >= interval {
                    return Err(ConfigError::new(
                        "queue.discipline.target",
                        format_args!("{target:?}"),
                        "a duration shorter than queue.discipline.interval",
                    ));
                }
            }
        }
        Ok(())
    }

    /// The entry bound for a concurrency limit of `limit`.
    pub fn capacity(&self, limit: usize) -> usize {
        self.max_len.unwrap_or(limit / 2)
    }
}

fn check_duration(field: &'static str, d: Duration, zero_ok: bool) -> Result<(), ConfigError> {
    if d > MAX_SETTING || (!zero_ok && d.is_zero()) {
        Err(ConfigError::new(
            field,
            format_args!("{d:?}"),
            if zero_ok {
                "a duration in [0, 1 h]"
            } else {
                "a duration in (0, 1 h]"
            },
        ))
    } else {
        Ok(())
    }
}

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

    /// Entries waiting, per criticality.
    pub fn len_by_criticality(&self) -> [usize; Criticality::COUNT] {
        let mut out = [0; Criticality::COUNT];
        for (i, q) in self.classes.iter().enumerate() {
            out[i / 2] += q.len();
        }
        out
    }

    /// When an entry of `criticality` enqueued at `enqueued_at` with `deadline` should give
    /// up waiting, given the `expected` service time: `deadline - expected` — the last moment
    /// it could still start and finish in time — and for sheddable work no later than
    /// `enqueued_at + max_wait`; without a deadline, `enqueued_at + max_wait`.
    ///
    /// Why still `max_wait` with a far deadline for sheddable work: a deadline says when the
    /// caller gives up on the whole call, not on this attempt. `spillway demo`'s clients give
    /// each of 3 attempts a third of a 1 s deadline; waiting up to the deadline kept abandoned
    /// attempts queued and goodput fell to 24 % of capacity at 5× in one run; and in front of
    /// a 4-worker service closed-loop callers kept in the queue longer instead of being
    /// refused lost 12 % of the goodput (issue 28's sweep).
    ///
    /// Why not for CRITICAL (and CRITICAL_PLUS): it is served before everything less
    /// critical, so it waits only while the limit is full of work at least as critical or a
    /// cut of the limit leaves more in flight than it allows — a round trip or two, not a
    /// standing queue. A flat 100 ms refused it `queue_timeout` where its caller would still
    /// have been served in time (issue 28's sweep, R2: a 4-worker, 10 ms service under on/off
    /// bursts whose callers allow 200 ms, CRITICAL 95.4 % at 2×; 100 % waiting to its
    /// deadline): issue 28's R4 — a queued request waits as long as its remaining deadline
    /// allows, not a flat limit. The controller still bounds by `max_wait` CRITICAL work not
    /// expected to start in time (its wait estimate past this), so that a CRITICAL queue
    /// that outgrew its callers' deadlines is not held until they run out.
    pub fn give_up_at(
        &self,
        enqueued_at: Instant,
        deadline: Option<Instant>,
        expected: Duration,
        criticality: Criticality,
    ) -> Instant {
        let by_wait = enqueued_at + self.cfg.max_wait;
        match deadline {
            Some(d) => {
                let by_deadline = d.checked_sub(expected).unwrap_or(enqueued_at);
                if criticality >= Criticality::Critical {
                    by_deadline.max(enqueued_at)
                } else {
                    by_deadline.clamp(enqueued_at, by_wait)
                }
            }
            None => by_wait,
        }
    }

    /// Whether an entry of `criticality` with `deadline` waits at most `max_wait`
    /// ([`give_up_at`](Self::give_up_at)).
    fn max_wait_bounds(criticality: Criticality, deadline: Option<Instant>) -> bool {
        deadline.is_none() || criticality < Criticality::Critical
    }

    /// Entries that would be served before a new arrival of `criticality` / `continuation`
    /// (those of its class and above; FIFO order assumed).
    pub fn ahead_of(&self, criticality: Criticality, continuation: bool) -> usize {
        let class = class_of(criticality, continuation);
        classes_in(self.nonempty)
            .filter(|&k| k >= class)
            .map(|k| self.classes[k].len())
            .sum()
    }

    /// The criticality CoDel holds to be a standing queue (its dropping state: the level whose
    /// own waiters stood above target for an interval, see `codel.rs`); `None` otherwise. The
    /// controller refuses arrivals of that criticality or below at the door (they would join
    /// the back of a queue CoDel is already dropping from — PIE, RFC 8033, likewise drops at
    /// enqueue on the queue's delay): under sustained overload the refusal comes at once
    /// instead of after a wait. More critical arrivals are queued: they wait behind none of
    /// that level's backlog.
    ///
    /// Only while some of that level's work is queued: once it has all left, an arrival of
    /// it waits (and restarts its judgement) as it did before the standing queue formed.
    pub fn standing(&self) -> Option<Criticality> {
        let level = self.codel.as_ref().and_then(Codel::standing)?;
        let at_or_below = (1u32 << (class_of(level, true) + 1)) - 1;
        (self.nonempty & at_or_below != 0).then_some(level)
    }

    /// Removes every entry of criticality below `criticality`, handing each to `on_drop` as
    /// [`DropReason::Evicted`]: once a request of `criticality` has given up waiting, nothing
    /// less critical may keep waiting to be served in its place.
    pub fn drop_below(
        &mut self,
        now: Instant,
        criticality: Criticality,
        mut on_drop: impl FnMut(QueueEntry<T>, DropReason),
    ) {
        let below = class_of(criticality, false);
        let mut dropped = 0;
        for class in classes_in(self.nonempty).filter(|&k| k < below) {
            while let Some(e) = self.classes[class].pop_back() {
                dropped += 1;
                on_drop(e, DropReason::Evicted);
            }
            self.note_class(class);
        }
        if dropped > 0 {
            self.len -= dropped;
            self.note_len(now);
        }
    }

    /// After an arrival of `criticality` joined, drops the entries it pushed back so far that
    /// they can no longer start in time: the newest of the lowest class below `criticality`,
    /// while its expected wait (`len × per_slot`, it being served last) ends after its
    /// give-up time. Each goes to `on_drop` as [`DropReason::Evicted`] (a more critical
    /// request took its place) — refused now rather than after waiting in vain.
    ///
    /// With `shed_level` (a level being refused for overload), only entries of that level or
    /// below are dropped on the estimate: those above it are first in line for the slots the
    /// shed level gives up, and wait out their own budget instead.
    pub fn drop_pushed_back(
        &mut self,
        now: Instant,
        criticality: Criticality,
        shed_level: Option<Criticality>,
        per_slot: Duration,
        expected: Duration,
        mut on_drop: impl FnMut(QueueEntry<T>, DropReason),
    ) {
        if per_slot.is_zero() {
            return;
        }
        let below =
            class_of(criticality, false).min(shed_level.map_or(CLASSES, |s| class_of(s, true) + 1));
        while let Some(class) = classes_in(self.nonempty).next().filter(|&k| k < below) {
            let Some(back) = self.classes[class].back() else {
                break;
            };
            let give_up =
                self.give_up_at(back.enqueued_at, back.deadline, expected, back.criticality);
            let wait = per_slot.saturating_mul(u32::try_from(self.len).unwrap_or(u32::MAX));
            if now.checked_add(wait).is_some_and(|t| t <= give_up) {
                break;
            }
            if let Some(e) = self.classes[class].pop_back() {
                self.note_class(class);
                self.len -= 1;
                self.note_len(now);
                on_drop(e, DropReason::Evicted);
            }
        }
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

    /// Drops every entry at the front of its class that has run out of time: once it can no
    /// longer finish by its deadline given `expected` service time (`DeadlineExceeded`), or
    /// has waited `max_wait` where that bounds it (`QueueTimeout`, see
    /// [`give_up_at`](Self::give_up_at)). A
    /// `QueueTimeout` at criticality `c` also drops everything queued below `c`
    /// ([`drop_below`](Self::drop_below)): it would be served in the timed-out entry's place.
    pub fn purge(
        &mut self,
        now: Instant,
        expected: Duration,
        mut on_drop: impl FnMut(QueueEntry<T>, DropReason),
    ) {
        let max_wait = self.cfg.max_wait;
        let mut dropped = 0;
        let mut timed_out: Option<Criticality> = None;
        // Highest class first, so that a timeout's cascade covers every class below it.
        let mut set = self.nonempty;
        while let Some(class) = highest(set) {
            set &= !(1 << class);
            if timed_out.is_some_and(|c| class < class_of(c, false)) {
                break;
            }
            let q = &mut self.classes[class];
            while let Some(front) = q.front() {
                let reason = if cannot_finish(now, expected, front.deadline) {
                    DropReason::DeadlineExceeded
                } else if Self::max_wait_bounds(front.criticality, front.deadline)
                    && now.saturating_duration_since(front.enqueued_at) >= max_wait
                {
                    DropReason::QueueTimeout
                } else {
                    break;
                };
                if let Some(e) = q.pop_front() {
                    dropped += 1;
                    if reason == DropReason::QueueTimeout && timed_out.is_none() {
                        timed_out = Some(e.criticality);
                    }
                    on_drop(e, reason);
                }
            }
            self.note_class(class);
        }
        if dropped > 0 {
            self.len -= dropped;
            self.note_len(now);
        }
        if let Some(c) = timed_out {
            self.drop_below(now, c, &mut on_drop);
        }
    }

    /// The class and position of the entry to serve next: the highest class, its oldest
    /// (FIFO) or newest (LIFO) entry.
    fn head(&self, now: Instant) -> Option<(usize, usize)> {
        let lifo = self.is_lifo(now);
        let class = highest(self.nonempty)?;
        let pos = if lifo {
            self.classes[class].len() - 1
        } else {
            0
        };
        Some((class, pos))
    }

    /// Criticality of the entry that would be served next.
    pub fn peek_criticality(&self, now: Instant) -> Option<Criticality> {
        let (class, pos) = self.head(now)?;
        self.classes[class].get(pos).map(|e| e.criticality)
    }

    fn take(&mut self, now: Instant, class: usize, pos: usize) -> Option<QueueEntry<T>> {
        let e = self.classes[class].remove(pos)?;
        self.note_class(class);
        self.len -= 1;
        self.note_len(now);
        Some(e)
    }

    /// Dequeues the next entry to serve, if `slots` has a slot for it — and takes that slot.
    ///
    /// On the way, entries that should not be served are removed and handed to `on_drop`:
    /// any that waited `max_wait` or whose deadline passed ([`purge`](Self::purge)), a head
    /// that cannot finish by its deadline given `expected_service`, and CoDel's victims. CoDel
    /// is only consulted when a slot is free (a drop is a dequeue decision).
    pub fn dequeue<S: SlotSource + ?Sized>(
        &mut self,
        now: Instant,
        expected_service: Duration,
        slots: &S,
        mut on_drop: impl FnMut(QueueEntry<T>, DropReason),
    ) -> Option<QueueEntry<T>> {
        self.purge(now, expected_service, &mut on_drop);
        loop {
            let (class, pos) = self.head(now)?;
            let e = self.classes[class].get(pos)?;
            let (c, enqueued_at, deadline) = (e.criticality, e.enqueued_at, e.deadline);
            if cannot_finish(now, expected_service, deadline) {
                let e = self.take(now, class, pos)?;
                on_drop(e, DropReason::DeadlineExceeded);
                continue;
            }
            if !slots.has_slot(c) {
                return None;
            }
            let len = self.len;
            // CoDel drops only *sheddable* work (SHEDDABLE, SHEDDABLE_PLUS), the oldest entry of
            // the lowest class present, and judges that class's standing delay — how long its
            // oldest entry has waited. The SRE book (ch. 21, "Handling Overload") sheds the
            // least critical work first; dropping the head (the most critical waiter) made
            // CRITICAL requests fail while SHEDDABLE ones still waited behind them. And
            // CRITICAL work is not CoDel's to drop at all: when a cut of the limit leaves more
            // in flight than CRITICAL may use, CRITICAL waiters stand for a round trip though
            // CRITICAL demand is well within capacity; judged on a 5 ms target they were
            // dropped (issue 28: CRITICAL refused `queue_timeout`). CRITICAL work waits until
            // its own budget runs out (its deadline, else `max_wait`) and is refused on
            // arrival when it could not start in time.
            let sheddable = self.nonempty & SHEDDABLE_CLASSES;
            if let Some(codel) = self.codel.as_mut() {
                match classes_in(sheddable).next() {
                    None => codel.on_empty(),
                    Some(victim) => {
                        let (oldest, level) = self.classes[victim]
                            .front()
                            .map_or((enqueued_at, c), |e| (e.enqueued_at, e.criticality));
                        let sojourn = now.saturating_duration_since(oldest);
                        if codel.should_drop_from(level, sojourn, now, len) {
                            let e = self.take(now, victim, 0)?;
                            on_drop(e, DropReason::Codel);
                            continue;
                        }
                    }
                }
            }
            if !slots.take_slot(c) {
                return None;
            }
            return self.take(now, class, pos);
        }
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

/// Serde helper: a `Duration` as float milliseconds (fields suffixed `_ms`).
#[cfg(feature = "serde")]
pub(crate) mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64() * 1e3)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let ms = f64::deserialize(d)?;
        Duration::try_from_secs_f64(ms / 1e3).map_err(|_| {
            serde::de::Error::custom(format_args!(
                "invalid duration {ms} ms: expected a finite number of milliseconds >= 0"
            ))
        })
    }

    /// The same for `Option<Duration>` (absent or null = `None`).
    pub mod option {
        use serde::{Deserialize, Deserializer, Serializer};
        use std::time::Duration;

        pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
            match d {
                Some(d) => s.serialize_some(&(d.as_secs_f64() * 1e3)),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
            match Option::<f64>::deserialize(d)? {
                None => Ok(None),
                Some(ms) => {
                    super::deserialize(serde::de::value::F64Deserializer::<D::Error>::new(ms))
                        .map(Some)
                }
            }
        }
    }
}
