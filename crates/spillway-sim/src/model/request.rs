//! A request in flight: where it is ([`Phase`]), what its caller learns ([`Res`]), its node
//! and what it holds from the core, and the slab that keeps them.
//!
//! Why apart from the fleet's layers and callers: these are the per-request records, sized
//! and laid out for the requests in flight (the slab's footprint is the simulator's memory
//! bound), while the rest of the model is per task and per caller.

use spillway_core::controller::{Permit, QueuedAdmission, RefusalReason};
use spillway_core::Criticality;

use super::{CLIENT, NEVER, NONE};

/// Where a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Free,
    /// In a task's admission queue.
    Queued,
    /// Admitted, waiting for a worker.
    WaitWorker,
    /// On a worker.
    Working,
    /// Waiting on a slow dependency.
    Slow,
    /// Waiting for a downstream attempt (or a top-level request waiting for its attempt).
    Calling,
    /// Waiting to retry.
    Backoff,
    /// Sent, on its way to its task (a layer with a network delay).
    Transit,
    /// Answered; the answer is on its way to the caller (a layer with a network delay).
    Answering,
    /// A stub: the attempt was sent to a task another shard simulates, where it is served;
    /// the stub waits for the answer (or its caller's timer) on the caller's shard.
    Remote,
}

/// What an attempt's caller learns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Res {
    Ok,
    /// Refused by the admission controller.
    Refused(RefusalReason),
    /// The task failed its own downstream calls (a 503 from the handler), maybe marked.
    Failed {
        dont_retry: bool,
    },
    /// The caller's timer fired first.
    Timeout,
    /// No live task, or the task was lost.
    Conn,
    /// Refused locally by the caller's throttle; never sent.
    Throttled,
}

impl Res {
    /// As one word, for an answer travelling in an event's `gen` field (see [`Res::from_word`]).
    pub fn to_word(self) -> u32 {
        match self {
            Res::Ok => 0,
            Res::Failed { dont_retry } => 1 + u32::from(dont_retry),
            Res::Timeout => 3,
            Res::Conn => 4,
            Res::Throttled => 5,
            Res::Refused(r) => 16 + r.index() as u32,
        }
    }

    /// The answer [`to_word`](Res::to_word) wrote (`Conn` for a word it never writes).
    pub fn from_word(w: u32) -> Res {
        match w {
            0 => Res::Ok,
            1 | 2 => Res::Failed { dont_retry: w == 2 },
            3 => Res::Timeout,
            5 => Res::Throttled,
            16.. => RefusalReason::ALL
                .get((w - 16) as usize)
                .map_or(Res::Conn, |&r| Res::Refused(r)),
            _ => Res::Conn,
        }
    }
}

/// One request at one place: a top-level client request, or an attempt being served by a task.
pub(crate) struct Node {
    pub gen: u32,
    pub phase: Phase,
    pub parent: u32,
    pub parent_gen: u32,
    /// `CLIENT` for a top-level request.
    pub layer: u16,
    pub crit: Criticality,
    pub group: u16,
    pub task: u32,
    /// Top-level: its client instance (its `Caller`). An attempt: the index of the caller it
    /// answers to — the client instance (layer 0) or the task of the layer above — so that
    /// prefetching finds the caller's policies without reading the parent node.
    pub instance: u32,
    /// The attempt number this request was sent with (1 for top-level requests).
    pub attempt_in: u32,
    /// Propagated deadline (protected), `NEVER` otherwise.
    pub deadline: u64,
    /// When the caller gives up on this attempt (always set).
    pub give_up: u64,
    /// Top-level: when it was offered. Server: when it arrived at the task.
    pub since: u64,
    pub calls_left: u32,
    /// Attempts made for the current downstream call.
    pub local: u32,
    pub child: u32,
    pub child_gen: u32,
    pub last_task: u32,
    /// Top-level: attempts sent on the wire.
    pub sent: u32,
    pub work_ns: u64,
    pub wait_ns: u64,
    /// The caller left while it was on a worker: finish the CPU work, then stop.
    pub cancelled: bool,
    /// The shard simulating this attempt's caller, when it is not this one ([`LOCAL`]: here).
    pub from: u8,
}

/// What an attempt carries to its task: the fields its node there starts with (written by the
/// caller's send, or, when the task is on another shard, carried there in a message).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attempt {
    pub layer: u16,
    pub crit: Criticality,
    pub group: u16,
    pub task: u32,
    pub instance: u32,
    pub attempt_in: u32,
    pub deadline: u64,
    pub give_up: u64,
}

impl Attempt {
    /// The attempt node `n` was sent as.
    #[inline]
    pub fn of(n: &Node) -> Attempt {
        Attempt {
            layer: n.layer,
            crit: n.crit,
            group: n.group,
            task: n.task,
            instance: n.instance,
            attempt_in: n.attempt_in,
            deadline: n.deadline,
            give_up: n.give_up,
        }
    }

    /// Writes the attempt into node `n`.
    #[inline]
    pub fn write_to(self, n: &mut Node) {
        n.layer = self.layer;
        n.crit = self.crit;
        n.group = self.group;
        n.task = self.task;
        n.instance = self.instance;
        n.attempt_in = self.attempt_in;
        n.deadline = self.deadline;
        n.give_up = self.give_up;
    }
}

/// [`Node::from`] of an attempt whose caller is on the same shard.
pub(crate) const LOCAL: u8 = u8::MAX;

// A node stays within 96 bytes (a line and a half), the slab's footprint per request in flight.
const _: () = assert!(std::mem::size_of::<Node>() <= 96);

/// What a request holds from its task's admission controller (one at a time, so one field).
#[derive(Debug, Default)]
pub(crate) enum Held {
    #[default]
    Nothing,
    Permit(Permit),
    Queued(QueuedAdmission),
}

impl Node {
    pub fn blank() -> Node {
        Node {
            gen: 0,
            phase: Phase::Free,
            parent: NONE,
            parent_gen: 0,
            layer: CLIENT,
            crit: Criticality::Critical,
            group: 0,
            task: NONE,
            instance: 0,
            attempt_in: 1,
            deadline: NEVER,
            give_up: NEVER,
            since: 0,
            calls_left: 0,
            local: 0,
            child: NONE,
            child_gen: 0,
            last_task: NONE,
            sent: 0,
            work_ns: 0,
            wait_ns: 0,
            cancelled: false,
            from: LOCAL,
        }
    }
}

/// The slab of nodes, with their generations mirrored in a compact array: most timers are
/// stale by the time they fire, and checking one must not pull a node into the cache. What a
/// node holds from the core (a 96-byte permit or queued admission) is kept apart too, in
/// `held`: only attempts at a task ever hold one, and the node itself stays at two cache lines.
/// Generations are even while a node is live and odd once it is freed.
pub(crate) struct Slab {
    pub nodes: Vec<Node>,
    held: Vec<Held>,
    gens: Vec<u32>,
    free: Vec<u32>,
    pub live: usize,
    pub peak: usize,
}

impl Slab {
    pub fn new() -> Self {
        Slab {
            nodes: Vec::new(),
            held: Vec::new(),
            gens: Vec::new(),
            free: Vec::new(),
            live: 0,
            peak: 0,
        }
    }

    /// A fresh node (fields reset, generation bumped to the next even value); returns its index.
    pub fn alloc(&mut self) -> u32 {
        self.live += 1;
        self.peak = self.peak.max(self.live);
        if let Some(i) = self.free.pop() {
            let gen = self.gens[i as usize].wrapping_add(1);
            self.gens[i as usize] = gen;
            self.nodes[i as usize] = Node {
                gen,
                ..Node::blank()
            };
            i
        } else {
            self.nodes.push(Node::blank());
            self.held.push(Held::Nothing);
            self.gens.push(0);
            (self.nodes.len() - 1) as u32
        }
    }

    /// What node `i` holds from the core, read-only (for prefetching).
    #[inline]
    pub fn held(&self, i: u32) -> Option<&Held> {
        self.held.get(i as usize)
    }

    /// What node `i` holds from the core.
    #[inline]
    pub fn held_mut(&mut self, i: u32) -> &mut Held {
        &mut self.held[i as usize]
    }

    /// Takes node `i`'s permit, if it holds one.
    pub fn take_permit(&mut self, i: u32) -> Option<Permit> {
        let held = &mut self.held[i as usize];
        match std::mem::take(held) {
            Held::Permit(p) => Some(p),
            other => {
                *held = other;
                None
            }
        }
    }

    /// Takes node `i`'s queued admission, if it holds one.
    pub fn take_queued(&mut self, i: u32) -> Option<QueuedAdmission> {
        let held = &mut self.held[i as usize];
        match std::mem::take(held) {
            Held::Queued(q) => Some(q),
            other => {
                *held = other;
                None
            }
        }
    }

    /// Releases a node: drops its permit or queued admission (releasing the slot or leaving
    /// the queue, in the core) and recycles the slot.
    pub fn free(&mut self, i: u32) {
        let n = &mut self.nodes[i as usize];
        // Dropping a permit releases its slot; dropping a queued admission leaves the queue.
        // Top-level requests never hold anything, nor do attempts on their way to their task
        // or answered (the permit went with the answer) or sent to another shard: their slot,
        // often long out of the cache, is not touched.
        let holds = n.layer != CLIENT
            && !matches!(n.phase, Phase::Transit | Phase::Answering | Phase::Remote);
        n.phase = Phase::Free;
        n.gen = n.gen.wrapping_add(1);
        let gen = n.gen;
        debug_assert!(holds || matches!(self.held.get(i as usize), None | Some(Held::Nothing)));
        if holds {
            self.held[i as usize] = Held::Nothing;
        }
        self.gens[i as usize] = gen;
        self.free.push(i);
        self.live -= 1;
    }

    /// Whether `(i, gen)` still names a live node (`gen` taken from a live node is even).
    #[inline]
    pub fn is(&self, i: u32, gen: u32) -> bool {
        self.gens.get(i as usize) == Some(&gen)
    }

    /// Hands `prefetch` the address of node `i`'s generation, which a timer's check reads
    /// first (computed; nothing is read).
    #[inline]
    pub fn gen_hint(&self, i: u32, prefetch: impl Fn(*const u8)) {
        if let Some(g) = self.gens.get(i as usize) {
            prefetch(g as *const u32 as *const u8);
        }
    }

    /// If `(i, gen)` is still live (reads the generation: ask once
    /// [`gen_hint`](Self::gen_hint) has brought it in), hands `prefetch` the address of the
    /// node's phase, which the check reads next; a stale timer's node is not fetched.
    #[inline]
    pub fn phase_hint(&self, i: u32, gen: u32, prefetch: impl Fn(*const u8)) {
        if self.is(i, gen) {
            if let Some(n) = self.nodes.get(i as usize) {
                prefetch(&n.phase as *const Phase as *const u8);
            }
        }
    }

    /// Where the node and held arrays start, for hints computed away from the slab (see
    /// `Woken`): `(nodes, held)` as addresses.
    #[inline]
    pub fn bases(&self) -> (usize, usize) {
        (self.nodes.as_ptr() as usize, self.held.as_ptr() as usize)
    }
}
