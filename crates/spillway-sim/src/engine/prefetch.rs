//! Prefetching what the next events will touch, so that a fleet of 10⁴ tasks runs near the
//! speed of one of 100.
//!
//! Why: at fleet scale every event visits state no cache holds — its node, its task's
//! admission controller, the caller waiting above it and that caller's throttle and retry
//! budget, each last touched ~100 ms (10⁵ events) before — and each visit was a chain of
//! dependent loads (node → task → controller → what the controller points to), paid one after
//! another: a 10⁴-task fleet ran 5× slower per request than a 100-task one for the same
//! instructions. The events about to run are known: the timing wheel holds the current
//! millisecond's events sorted. So the loop walks ahead of itself in stages, each following
//! the pointers the previous stage's prefetch has brought in by then (event `k` ahead is
//! roughly `k × 0.3` µs away at the target speed; a miss takes ~0.1 µs):
//!
//! - [`FAR`] events ahead: the event's node (and, for a worker completion, the permit it
//!   holds from the core);
//! - [`MID`]: reads the node; a completion: its task's slot and hint-table entry, its parent
//!   node, and its caller's client-side policies (the attempt names its caller itself, so no
//!   parent read is needed); a retry: its caller's client-side policies;
//! - [`NEAR`]: a completion: its task's controller state (hot lines, random source, limit
//!   state, from the hint entry MID brought in) and what the caller's policies point to
//!   (counter buckets, outcome ring); a retry: what its policies point to.
//! - [`CLOSE`]: a completion whose task has requests queued: what its release will read in
//!   the admission queue (the lock word, the queue's head, the waiting class's deque and its
//!   front entry), named by the controller from its fast-path lines, which NEAR brought in.
//!   31% of the 10⁴-task fleet's attempts queue, and the dequeue was 5–6% of the run waiting
//!   on those lines (fifth round).
//!
//! - timer lanes: [`LANE_FAR`] places behind each fixed-delay lane's front, the generation of
//!   the node a queue give-up or an attempt timeout will check, and the lane's own next line;
//!   [`LANE_NEAR`] places behind, the node's phase if the timer is still live. Nearly every
//!   timer is stale (answered, granted), but the check itself missed: 6% of a 10⁴-task run
//!   waited on the give-ups' phase reads. Stale timers' nodes (most attempt timeouts: the
//!   node was freed) are not fetched — on this host one core's misses in flight are the bound,
//!   so a line fetched for nothing delays the ones that are needed. A network delay's lane
//!   (deliveries, answers, cancellations) gets the same two hints; an answer's `gen` field is
//!   the answer, not a generation, so its check fails and only the generation line is asked
//!   for. (Staged hints for crossings — node, then task or caller, then their state — were
//!   measured and gave nothing: bench/results/sim-speed.md, tenth round.)
//! - wakes: a release that grants (or drops) a queued request names its node to the waker
//!   ([`woken_node`]); the loop polls that node only after the release and the
//!   answer it belongs to are done, so its phase and held slot load meanwhile (another 6–8%
//!   waited there).
//!
//! Every stage reads only what an earlier stage prefetched (until this round, a completion
//! read the hint entry in the stage that prefetched it, and reached its caller's policies
//! through the parent node, one stage later than now: both stalled).
//!
//! A request's first attempt finds its task prefetched already (its group's pick stream is
//! read ahead, see `picks.rs`); a retry or a call down prefetches its task's state the moment
//! it picks the task, before setting up the attempt (its timer, its node) and calling `admit`.
//!
//! Client instances take arrivals in turn, so an arrival prefetches the instances of the next
//! two. Prefetches are hints: a wrong or stale one (a node freed since, a lane event that comes
//! first) costs a load and changes nothing else — results are the same bit for bit, which
//! every shipped scenario's JSON checks.

use std::mem::size_of;
use std::time::Instant;

use super::{Engine, Ev, Kind};
use crate::model::{Caller, Held, Node, CLIENT, NONE};

/// Stage distances, in events ahead of the one being run (see the module docs).
const FAR: usize = 12;
/// Places behind each timer lane's front: a lane yields every few events (a timeout per
/// attempt, a give-up per queued attempt), so these are ~10–40 and ~3–10 events ahead.
const LANE_FAR: usize = 3;
const LANE_NEAR: usize = 1;
const MID: usize = 8;
const NEAR: usize = 4;
const CLOSE: usize = 2;

/// Every cache line of `v`.
#[inline]
fn lines_of<T>(v: &T) {
    let start = v as *const T as *const u8;
    let len = std::mem::size_of::<T>();
    let mut at = start as usize & !63;
    while at < start as usize + len {
        cpu::prefetch(at as *const u8);
        at += 64;
    }
}

impl Engine {
    /// Starts loading what the events a few places ahead will touch (see the module docs).
    /// The wheel's stages run only when its current bucket has moved since they last ran: an
    /// event taken from a lane (or from the current millisecond's heap) leaves the bucket's
    /// events where they were, and running the stages again would fetch the same lines again
    /// (10.6% of the 10⁴-task fleet's instructions, 15% with a network delay).
    #[inline]
    pub(super) fn prefetch_ahead(&mut self) {
        self.prefetch_lanes();
        let left = self.q.current_len();
        if left != self.ahead_left {
            self.ahead_left = left;
            self.prefetch_wheel();
        }
    }

    /// The timer lanes' stages (see the module docs).
    #[inline]
    fn prefetch_lanes(&self) {
        for (ev, next_line) in self.q.lanes_ahead(LANE_FAR) {
            if let Some(ev) = ev {
                self.slab.gen_hint(ev.id, cpu::prefetch);
            }
            if let Some(p) = next_line {
                cpu::prefetch(p as *const u8);
            }
        }
        for (ev, _) in self.q.lanes_ahead(LANE_NEAR) {
            if let Some(ev) = ev {
                self.slab.phase_hint(ev.id, ev.gen, cpu::prefetch);
            }
        }
    }

    /// The wheel's stages, by distance in its current bucket (see the module docs).
    #[inline]
    fn prefetch_wheel(&self) {
        if let Some((ev, i)) = self.live_ahead(CLOSE) {
            if let (Kind::WorkerDone, Some(n)) = (ev.kind(), self.slab.nodes.get(i)) {
                self.prefetch_queue(n.layer as usize, n.task);
            }
        }
        if let Some((ev, i)) = self.live_ahead(FAR) {
            if let Some(n) = self.slab.nodes.get(i) {
                lines_of(n);
            }
            if ev.kind() == Kind::WorkerDone {
                if let Some(h) = self.slab.held(ev.id) {
                    lines_of(h);
                }
            }
        }
        if let Some((ev, i)) = self.live_ahead(MID) {
            let Some(n) = self.slab.nodes.get(i) else {
                return;
            };
            if ev.kind() == Kind::WorkerDone {
                self.prefetch_task_slot(n.layer as usize, n.task);
                if let Some(p) = self.slab.nodes.get(n.parent as usize) {
                    lines_of(p);
                }
                if let Some(c) = self.caller_above(n) {
                    lines_of(c);
                }
            } else if let Some(c) = self.caller_at(n) {
                lines_of(c);
            }
        }
        if let Some((ev, i)) = self.live_ahead(NEAR) {
            let Some(n) = self.slab.nodes.get(i) else {
                return;
            };
            if ev.kind() == Kind::WorkerDone {
                self.prefetch_task_state(n.layer as usize, n.task);
                if let Some(c) = self.caller_above(n) {
                    caller_pointees(c, self.at(ev.at));
                }
            } else if let Some(c) = self.caller_at(n) {
                caller_pointees(c, self.at(ev.at));
            }
        }
    }

    /// Prefetches task `t` of layer `l`: its slot in the layer and its controller's state,
    /// from the compact hint table (no dependent miss).
    #[inline]
    pub(super) fn prefetch_task(&self, l: usize, t: u32) {
        self.prefetch_task_slot(l, t);
        self.prefetch_task_state(l, t);
    }

    /// What a release at task `t` of layer `l` will read in its controller's queue, when
    /// anyone is queued there (read from the controller's lines: best once
    /// [`prefetch_task_state`](Self::prefetch_task_state) has brought them in).
    #[inline]
    fn prefetch_queue(&self, l: usize, t: u32) {
        if let Some(c) = self.controller(l, t) {
            c.queue_hints(cpu::prefetch);
        }
    }

    /// What an admission of criticality `c` at task `t` of layer `l` would read to join the
    /// queue, if it would have to (read from the controller's lines: best once
    /// [`prefetch_task_state`](Self::prefetch_task_state) has brought them in).
    #[inline]
    pub(super) fn prefetch_enqueue(&self, l: usize, t: u32, c: spillway_core::Criticality) {
        if let Some(ctrl) = self.controller(l, t) {
            ctrl.enqueue_hints(c, cpu::prefetch);
        }
    }

    /// Task `t` of layer `l`'s admission controller (none for an unprotected task).
    #[inline]
    fn controller(
        &self,
        l: usize,
        t: u32,
    ) -> Option<&spillway_core::controller::AdmissionController> {
        self.layers
            .get(l)
            .and_then(|layer| layer.tasks.get(t as usize))
            .and_then(|task| task.controller.as_ref())
    }

    /// Task `t` of layer `l`'s slot and its hint-table entry.
    #[inline]
    pub(super) fn prefetch_task_slot(&self, l: usize, t: u32) {
        let Some(layer) = self.layers.get(l) else {
            return;
        };
        if let Some(task) = layer.tasks.get(t as usize) {
            lines_of(task);
        }
        if let Some(h) = layer.hot.get(t as usize) {
            cpu::prefetch(h as *const _ as *const u8);
        }
    }

    /// Task `t` of layer `l`'s controller state, from its hint-table entry (a load: best once
    /// [`prefetch_task_slot`](Self::prefetch_task_slot) has brought the entry in).
    #[inline]
    pub(super) fn prefetch_task_state(&self, l: usize, t: u32) {
        let Some(h) = self
            .layers
            .get(l)
            .and_then(|layer| layer.hot.get(t as usize))
        else {
            return;
        };
        for i in 0..h.lines as usize {
            cpu::prefetch(h.first.wrapping_add(i * 64) as *const u8);
        }
        for &p in &h.pointees {
            if p != 0 {
                cpu::prefetch(p as *const u8);
            }
        }
    }

    /// Node `id`'s generation and node line, which a message from another shard naming it
    /// reads first (`engine::shard`: messages are taken in a batch, so what they touch can be
    /// asked for a few messages ahead).
    #[inline]
    pub(super) fn prefetch_node(&self, id: u32) {
        self.slab.gen_hint(id, cpu::prefetch);
        if let Some(n) = self.slab.nodes.get(id as usize) {
            cpu::prefetch(n as *const Node as *const u8);
        }
    }

    /// The line holding `p` (a table entry a message will write).
    #[inline]
    pub(super) fn prefetch_at<T>(p: &T) {
        cpu::prefetch(p as *const T as *const u8);
    }

    /// The arrival at `instance` of a group of `len` instances: prefetch the next instances'
    /// policies (the one after next: its struct; the next: what it points to).
    #[inline]
    pub(super) fn prefetch_instances(&self, g: usize, instance: u32, now: Instant) {
        let Some(grp) = self.groups.get(g) else {
            return;
        };
        let len = grp.instances.len();
        if let Some(c) = grp.instances.get((instance as usize + 2) % len) {
            lines_of(c);
        }
        if let Some(c) = grp.instances.get((instance as usize + 1) % len) {
            caller_pointees(c, now);
        }
    }

    /// The event `k` places ahead and its node's index, if it is a worker completion or a
    /// retry (the events that visit cold state) and its node is still live.
    #[inline]
    fn live_ahead(&self, k: usize) -> Option<(Ev, usize)> {
        let ev = self.q.ahead(k)?;
        (matches!(ev.kind(), Kind::WorkerDone | Kind::Retry) && self.slab.is(ev.id, ev.gen))
            .then_some((ev, ev.id as usize))
    }

    /// The client-side policies of attempt `n`'s caller (a client instance or a task calling
    /// down), which its answer will update: found from the attempt alone, no parent read.
    #[inline]
    fn caller_above(&self, n: &Node) -> Option<&Caller> {
        if n.layer == CLIENT || n.parent == NONE {
            return None;
        }
        let at = n.instance as usize;
        match (n.layer as usize).checked_sub(1) {
            None => self.groups.get(n.group as usize)?.instances.get(at),
            Some(above) => self.layers.get(above)?.callers.get(at),
        }
    }

    /// The client-side policies node `p` calls down with.
    #[inline]
    fn caller_at(&self, p: &Node) -> Option<&Caller> {
        if p.layer == CLIENT {
            self.groups
                .get(p.group as usize)?
                .instances
                .get(p.instance as usize)
        } else {
            self.layers
                .get(p.layer as usize)?
                .callers
                .get(p.task as usize)
        }
    }
}

/// A queued request at node `id` was granted or dropped: the loop will read its phase and
/// what it holds once the release that woke it has finished, so start loading them now
/// (`bases`: where the slab's node and held arrays start, `(0, 0)` if unknown).
#[inline]
pub(super) fn woken_node((nodes, held): (usize, usize), id: u32) {
    if nodes == 0 {
        return;
    }
    let i = id as usize;
    let phase = std::mem::offset_of!(Node, phase);
    cpu::prefetch(nodes.wrapping_add(i.wrapping_mul(size_of::<Node>()) + phase) as *const u8);
    cpu::prefetch(held.wrapping_add(i.wrapping_mul(size_of::<Held>())) as *const u8);
}

/// What a caller's retry policy and throttle write behind them at `now`.
#[inline]
fn caller_pointees(c: &Caller, now: Instant) {
    if let Some(p) = &c.policy {
        p.hot_pointees(now, cpu::prefetch);
    }
    if let Some(t) = &c.throttle {
        t.hot_pointees(now, cpu::prefetch);
    }
}

/// The prefetch hint, one of the simulator's three unsafe operations (with the huge-page advice
/// in `pages.rs` and the wakers in `wake.rs`), kept apart for audit.
mod cpu {
    #![allow(unsafe_code)]

    /// Asks the CPU to start loading the cache line holding `p` into every cache level.
    #[inline(always)]
    pub(super) fn prefetch(p: *const u8) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: PREFETCHT0 is a hint with no architectural effect: it never faults whatever
        // the address (Intel SDM vol. 2B, "PREFETCHh"; AMD APM vol. 3, "PREFETCHlevel") and
        // changes nothing the program can read. The intrinsic is `unsafe` only because it is
        // a `target_feature(enable = "sse")` function; SSE is part of the x86_64 baseline, so
        // the instruction always exists. Measured need: see BENCHMARKS.md, "Simulator speed".
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = p;
    }
}
