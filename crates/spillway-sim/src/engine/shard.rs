//! What crosses between the shards of a fleet simulated in parts (`sim::sharded`): attempts to
//! tasks another shard simulates, their answers and cancellations, and finished top-level
//! requests on their way to the one recorder.
//!
//! Why stubs: an attempt's caller keeps a child node for it — the attempt's timer is keyed
//! on it, a cancellation walks down through it, the answer comes back to it. When the task is
//! on another shard, that node stays with the caller as a *stub* ([`Phase::Remote`]) and the
//! task's shard makes a node of its own that serves the attempt and names the stub as its
//! parent (with the caller's shard in [`Node::from`](crate::model::Node)). The two are
//! joined by three messages, each sent at least one network delay ahead of when it acts —
//! `Deliver` (the attempt), `Answer` (result, queue and service time, to the stub) and
//! `Cancel` (named by the stub, found through [`Links::serving`]) — which is what lets every
//! shard simulate a window of one delay before it hears from the others: whatever arrives at
//! a window's end is due in the next window or later. Everything else — timers, admission,
//! retries — runs as it does on one shard.
//!
//! Messages go through a [`Mail`] with a slot per (window, sender, receiver), windows taken
//! modulo [`Mail::SLOTS`]: a shard posts what it sent in window `k` at the window's end, and
//! the receiver takes it at the start of window `k + LAG` (`sim::sharded`), the first in which
//! any of it can be due. Each slot is a mutex taken once per window by each side, never
//! contended mid-window. Messages are taken sender by sender in shard order, each in the
//! order sent, so a run is the same whatever the threads' timing.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use spillway_core::Criticality;

use super::{Engine, Kind, Phase, Res, NONE};
use crate::model::{Attempt, Part};
use crate::report::{Outcome as ReqOutcome, RequestRecord};

/// How many messages ahead of the one being taken its node is prefetched.
const AHEAD: usize = 6;

/// A message from one shard to another, due at `at` (ns).
#[derive(Debug, Clone, Copy)]
pub(super) enum Msg {
    /// An attempt for a task of the receiver, from stub `stub` of the sender.
    Deliver {
        at: u64,
        stub: u32,
        stub_gen: u32,
        attempt: Attempt,
    },
    /// The answer to stub `stub` of the receiver.
    Answer {
        at: u64,
        stub: u32,
        stub_gen: u32,
        res: u32,
        wait: u64,
        served: u64,
    },
    /// The caller behind stub `stub` of the sender left: drop the attempt it sent.
    Cancel { at: u64, stub: u32, stub_gen: u32 },
}

impl Msg {
    /// When it is due.
    fn at(&self) -> u64 {
        match *self {
            Msg::Deliver { at, .. } | Msg::Answer { at, .. } | Msg::Cancel { at, .. } => at,
        }
    }
}

/// A finished top-level request, owned (a shard other than 0 sends it to shard 0's recorder).
#[derive(Debug, Clone, Copy)]
pub(super) struct TopDone {
    pub offered_ns: u64,
    pub crit: Criticality,
    pub customer: u16,
    pub attempts: u32,
    pub outcome: ReqOutcome,
    pub latency_ns: u64,
    pub wait_ns: u64,
    pub work_ns: u64,
}

impl TopDone {
    fn record<'a>(&self, customers: &'a [String]) -> RequestRecord<'a> {
        let ok = self.outcome == ReqOutcome::Success;
        RequestRecord {
            offered_at: Duration::from_nanos(self.offered_ns),
            criticality: self.crit,
            customer: customers
                .get(usize::from(self.customer))
                .map_or("", String::as_str),
            attempts: self.attempts,
            outcome: self.outcome,
            latency: ok.then(|| Duration::from_nanos(self.latency_ns)),
            queue_ms: ok.then(|| self.wait_ns as f64 / 1e6),
            service_ms: ok.then(|| self.work_ns as f64 / 1e6),
        }
    }
}

/// The slots shards exchange through, shared by their threads.
pub(crate) struct Mail {
    shards: usize,
    /// `[slot][from][to]`: messages sent in a window.
    msgs: Vec<Mutex<Vec<Msg>>>,
    /// `[slot][from]`: top-level requests finished in a window.
    done: Vec<Mutex<Vec<TopDone>>>,
    /// `[slot][from]`: the seconds before which that shard had no request open, at a
    /// window's end.
    sealed: Vec<AtomicUsize>,
    /// `[slot][from]`: whether that shard offered and waited on nothing at a window's end.
    idle: Vec<AtomicBool>,
    /// `[from]`: windows that shard has completed (and posted).
    completed: Vec<AtomicU64>,
    /// A shard panicked: the others stop waiting for it.
    abandoned: AtomicBool,
}

impl Mail {
    /// Windows whose slots are in use at once: a shard runs at most `LAG - 1` windows ahead
    /// of the slowest, and reads a window's slots `LAG` windows after it was written, so no
    /// slot is written again before every shard has read it (`sim::sharded`).
    pub const SLOTS: u64 = 8;

    /// Empty slots for `shards` shards.
    pub fn new(shards: usize) -> Mail {
        let slots = Self::SLOTS as usize;
        Mail {
            shards,
            msgs: (0..slots * shards * shards)
                .map(|_| Mutex::new(Vec::new()))
                .collect(),
            done: (0..slots * shards)
                .map(|_| Mutex::new(Vec::new()))
                .collect(),
            sealed: (0..slots * shards).map(|_| AtomicUsize::new(0)).collect(),
            idle: (0..slots * shards)
                .map(|_| AtomicBool::new(false))
                .collect(),
            completed: (0..shards).map(|_| AtomicU64::new(0)).collect(),
            abandoned: AtomicBool::new(false),
        }
    }

    fn slot(window: u64) -> usize {
        (window % Self::SLOTS) as usize
    }

    fn msgs(&self, window: u64, from: usize, to: usize) -> MutexGuard<'_, Vec<Msg>> {
        lock(&self.msgs[(Self::slot(window) * self.shards + from) * self.shards + to])
    }

    fn done(&self, window: u64, from: usize) -> MutexGuard<'_, Vec<TopDone>> {
        lock(&self.done[Self::slot(window) * self.shards + from])
    }

    fn at(&self, window: u64, from: usize) -> usize {
        Self::slot(window) * self.shards + from
    }

    /// The seconds every shard had completed at the end of `window`.
    fn sealed_everywhere(&self, window: u64) -> usize {
        (0..self.shards)
            .map(|s| self.sealed[self.at(window, s)].load(Ordering::Acquire))
            .min()
            .unwrap_or(0)
    }

    /// Whether every shard was idle at the end of `window` (all have completed it).
    pub fn idle_everywhere(&self, window: u64) -> bool {
        (0..self.shards).all(|s| self.idle[self.at(window, s)].load(Ordering::Acquire))
    }

    /// Waits until every shard has completed `windows` windows; `false` if a shard panicked.
    /// Spins (a window is ~100 µs of work), then yields, as a shared machine deschedules a
    /// thread now and then.
    pub fn wait_completed(&self, windows: u64) -> bool {
        let mut spins = 0u32;
        while self
            .completed
            .iter()
            .any(|c| c.load(Ordering::Acquire) < windows)
        {
            if self.abandoned.load(Ordering::Relaxed) {
                return false;
            }
            spins = spins.saturating_add(1);
            if spins < 20_000 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        true
    }

    /// A shard is unwinding: nobody waits for it any more.
    pub fn abandon(&self) {
        self.abandoned.store(true, Ordering::Relaxed);
    }
}

/// A slot's lock. A slot holds plain data that is consistent between any two calls, so a lock
/// poisoned by another shard's panic (which `sim::sharded` re-raises anyway) is still usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A shard's side of the exchange.
pub(super) struct Links {
    /// Messages for each shard, sent this window.
    out: Vec<Vec<Msg>>,
    /// Per sending shard, by its stub's index: the node here serving that stub's attempt,
    /// its generation, and the stub's generation (how a `Cancel` finds its attempt).
    serving: Vec<Vec<(u32, u32, u32)>>,
    /// Top-level requests finished here this window (shards other than 0).
    done: Vec<TopDone>,
    /// The seconds sealed in the recorder (shard 0 of several).
    recorded_upto: usize,
    /// Messages being taken (kept for its allocation).
    scratch: Vec<Msg>,
    scratch_done: Vec<TopDone>,
}

impl Links {
    pub fn new(part: Part) -> Links {
        let n = part.shards as usize;
        Links {
            out: (0..n).map(|_| Vec::new()).collect(),
            serving: (0..n).map(|_| Vec::new()).collect(),
            done: Vec::new(),
            recorded_upto: 0,
            scratch: Vec::new(),
            scratch_done: Vec::new(),
        }
    }
}

/// The seed shard `part.shard` draws its streams from: the scenario's own for shard 0 (one
/// shard is exactly the unsharded engine), a SplitMix64 mix of it for the others.
pub(super) fn seed(seed: u64, part: Part) -> u64 {
    if part.shard == 0 {
        seed
    } else {
        super::stream_seed(seed, (1 << 40) | u64::from(part.shard))
    }
}

impl Engine {
    /// Attempt `cid`'s task is on another shard: the node stays here as its stub, the attempt
    /// goes there, due at `at`.
    pub(super) fn send_remote(&mut self, cid: u32, at: u64) {
        let n = &mut self.slab.nodes[cid as usize];
        n.phase = Phase::Remote;
        let to = (n.task % self.part.shards) as usize;
        self.links.out[to].push(Msg::Deliver {
            at,
            stub: cid,
            stub_gen: n.gen,
            attempt: Attempt::of(n),
        });
    }

    /// Node `cid`, whose caller is on another shard, answers `res` there at `at`, and goes.
    pub(super) fn answer_remote(&mut self, cid: u32, res: Res, at: u64, wait: u64, served: u64) {
        let n = &self.slab.nodes[cid as usize];
        let to = usize::from(n.from);
        if let Some(out) = self.links.out.get_mut(to) {
            out.push(Msg::Answer {
                at,
                stub: n.parent,
                stub_gen: n.parent_gen,
                res: res.to_word(),
                wait,
                served,
            });
        }
        self.slab.free(cid);
    }

    /// The caller of stub `c` stops waiting: a protected task's shard is told, one delay
    /// later (an unprotected task finishes the work for nobody); the stub goes, and an answer
    /// already on its way finds no stub.
    pub(super) fn leave_remote(&mut self, c: u32) {
        let n = &self.slab.nodes[c as usize];
        let layer = &self.layers[n.layer as usize];
        if layer.protected {
            let to = (n.task % self.part.shards) as usize;
            self.links.out[to].push(Msg::Cancel {
                at: self.now.saturating_add(layer.net_ns),
                stub: c,
                stub_gen: n.gen,
            });
        }
        self.slab.free(c);
    }

    /// Takes what the other shards sent in `window` into this shard's queue, sender by
    /// sender.
    pub fn take_mail(&mut self, mail: &Mail, window: u64) {
        let me = self.part.shard as usize;
        let mut msgs = std::mem::take(&mut self.links.scratch);
        for from in 0..mail.shards {
            if from == me {
                continue;
            }
            std::mem::swap(&mut *mail.msgs(window, from, me), &mut msgs);
            for i in 0..msgs.len() {
                // What a message a few ahead will touch, last touched ~a window ago.
                match msgs.get(i + AHEAD) {
                    Some(Msg::Answer { stub, .. }) => self.prefetch_node(*stub),
                    Some(Msg::Deliver { stub, attempt, .. }) => {
                        if let Some(slot) = self.links.serving[from].get(*stub as usize) {
                            Engine::prefetch_at(slot);
                        }
                        // The task it will reach: its slot and hint entry now, its
                        // controller's state (read from the entry) a few messages later. The
                        // caller's pick prefetched it on the caller's core, not this one.
                        self.prefetch_task_slot(usize::from(attempt.layer), attempt.task);
                    }
                    _ => {}
                }
                if let Some(Msg::Deliver { attempt, .. }) = msgs.get(i + AHEAD / 2) {
                    self.prefetch_task_state(usize::from(attempt.layer), attempt.task);
                }
                self.take(from, msgs[i]);
            }
            msgs.clear();
        }
        self.links.scratch = msgs;
    }

    fn take(&mut self, from: usize, m: Msg) {
        // Sent at least one delay ahead, taken at most one delay after it was sent: never due
        // in this shard's past (`sim::sharded`).
        debug_assert!(m.at() >= self.now, "{m:?} taken at {}", self.now);
        match m {
            Msg::Deliver {
                at,
                stub,
                stub_gen,
                attempt,
            } => {
                let id = self.alloc_node();
                let n = &mut self.slab.nodes[id as usize];
                n.phase = Phase::Transit;
                n.parent = stub;
                n.parent_gen = stub_gen;
                n.from = from as u8;
                attempt.write_to(n);
                n.since = at;
                let gen = n.gen;
                self.q.push_unlaned(at, Kind::Deliver, id, gen);
                let serving = &mut self.links.serving[from];
                let i = stub as usize;
                if serving.len() <= i {
                    serving.resize(i + 1, (NONE, 0, 0));
                }
                serving[i] = (id, gen, stub_gen);
            }
            Msg::Answer {
                at,
                stub,
                stub_gen,
                res,
                wait,
                served,
            } => {
                // The stub is gone if its caller stopped waiting meanwhile.
                if self.slab.is(stub, stub_gen) && self.node(stub).phase == Phase::Remote {
                    let n = &mut self.slab.nodes[stub as usize];
                    n.phase = Phase::Answering;
                    n.wait_ns = wait;
                    n.work_ns = served;
                    self.q.push_unlaned(at, Kind::Answer, stub, res);
                }
            }
            Msg::Cancel { at, stub, stub_gen } => {
                let serving = self.links.serving[from].get(stub as usize).copied();
                if let Some((id, gen, sg)) = serving {
                    if sg == stub_gen && self.slab.is(id, gen) {
                        self.q.push_unlaned(at, Kind::Cancel, id, gen);
                    }
                }
            }
        }
    }

    /// A top-level request finished: into the recorder (shard 0), or on its way there.
    pub(super) fn record_top(&mut self, done: TopDone) {
        if self.part.shard == 0 {
            self.recorder.record(&done.record(&self.customers));
        } else {
            self.links.done.push(done);
        }
    }

    /// End of `window`, which ran to `until` (ns): posts what this shard sent, the requests
    /// it finished (for shard 0), how far its seconds are complete and whether it is idle,
    /// then counts the window completed.
    pub fn post_mail(&mut self, mail: &Mail, window: u64, until: u64) {
        let me = self.part.shard as usize;
        for to in 0..mail.shards {
            let out = &mut self.links.out[to];
            if to != me && !out.is_empty() {
                mail.msgs(window, me, to).append(out);
            }
        }
        if me != 0 && !self.links.done.is_empty() {
            mail.done(window, me).append(&mut self.links.done);
        }
        self.advance_sealed(until);
        let at = mail.at(window, me);
        mail.sealed[at].store(self.sealed_upto, Ordering::Release);
        mail.idle[at].store(!self.busy(), Ordering::Release);
        mail.completed[me].store(window + 1, Ordering::Release);
    }

    /// Shard 0: records the requests the other shards finished in `window`, in shard order,
    /// then seals the seconds every shard had completed by its end.
    pub fn take_records(&mut self, mail: &Mail, window: u64) {
        let mut done = std::mem::take(&mut self.links.scratch_done);
        for from in 1..mail.shards {
            std::mem::swap(&mut *mail.done(window, from), &mut done);
            for d in done.drain(..) {
                self.recorder.record(&d.record(&self.customers));
            }
        }
        self.links.scratch_done = done;
        let upto = mail.sealed_everywhere(window);
        while self.links.recorded_upto < upto {
            self.recorder.seal(self.links.recorded_upto);
            self.links.recorded_upto += 1;
        }
    }

    /// Whether this shard still offers or waits on a top-level request (beyond the one it
    /// holds open until the run is over).
    fn busy(&self) -> bool {
        self.arrivals_open > 0 || self.open_top > u64::from(self.part.shards > 1)
    }
}
