//! The event loop: timed events, taken in (time, sequence) order, driving the fleet in simulated
//! time.
//!
//! Why this shape: a discrete-event simulation only spends work on things that happen, so a
//! simulated hour of a large fleet costs what its requests cost. Each event is 24 bytes, taken
//! from the queue ([`queue`]: a timing wheel and FIFO lanes) in (time, sequence) order — the
//! sequence makes ties deterministic. A request's
//! life: arrival → the caller's throttle → a task picked → `AdmissionController::admit` (admitted,
//! queued as a core `QueuedAdmission` future, or refused) → a worker → local work → calls to the
//! next layer, each attempt with a timer, retried through the caller's policy → the answer goes
//! up and the core `Permit` is dropped (releasing the slot, feeding the limit, settling the
//! quota, maybe granting a queued waiter). A layer with a network delay puts it between each
//! attempt and its task, each answer and its caller, each cancellation and its task (`Deliver`,
//! `Answer` and `Cancel` events). Queued admissions are polled with a waker that records
//! their slab index, so the loop learns which waiter a release granted.
//!
//! Protected tasks drop work whose caller has gone (the deadline is propagated and a caller that
//! gives up cancels the handler, as hyper does on disconnect); an unprotected task has no
//! admission control, an unbounded FIFO in front of its workers, and finishes every request it
//! accepted — including those whose caller left — which is what lets overload feed itself.

use std::cmp::Ordering;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use spillway_core::controller::{Admission, AdmissionRequest, Outcome, Refusal};
use spillway_core::retry::Failure;

use crate::config::{Arrivals, FaultConfig, RetryKind, Scenario};
use crate::model::{
    Caller, Held, Layer, Part, Phase, Res, RetrySet, Slab, CLIENT, LOCAL, NEVER, NONE,
};
use crate::pages::HugePages;
use crate::report::{Outcome as ReqOutcome, Recorder};
use crate::shape::{exp, service_nanos, LoadShape};
use crate::stats::{bump, LayerStats};
use crate::time::SimClock;

mod flow;
mod picks;
mod prefetch;
mod queue;
mod shard;
mod wake;

pub(crate) use shard::Mail;

use picks::{stream_seed, Picks};
use queue::EventQueue;
use shard::Links;
use wake::Wakes;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    Arrival,
    WorkerDone,
    SlowDone,
    AttemptTimeout,
    QueueGiveUp,
    Retry,
    /// A refusal's CPU cost is paid: `id` = task, `gen` = layer.
    RejectDone,
    FaultStart,
    FaultEnd,
    /// An attempt reaches its task across the layer's network delay.
    Deliver,
    /// An answer reaches its caller across the network delay: `id` = the answering node,
    /// `gen` = the answer (`Res::to_word`).
    Answer,
    /// A caller's cancellation reaches the task serving its attempt.
    Cancel,
}

impl Kind {
    const ALL: [Kind; 12] = [
        Kind::Arrival,
        Kind::WorkerDone,
        Kind::SlowDone,
        Kind::AttemptTimeout,
        Kind::QueueGiveUp,
        Kind::Retry,
        Kind::RejectDone,
        Kind::FaultStart,
        Kind::FaultEnd,
        Kind::Deliver,
        Kind::Answer,
        Kind::Cancel,
    ];
}

/// An event: 24 bytes, ordered by time then by a sequence number (ties in scheduling order),
/// with its kind in the low 8 bits of `key` (`key = seq << 8 | kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ev {
    at: u64,
    key: u64,
    id: u32,
    gen: u32,
}

impl Ev {
    fn new(at: u64, seq: u64, kind: Kind, id: u32, gen: u32) -> Ev {
        Ev {
            at,
            key: (seq << 8) | kind as u64,
            id,
            gen,
        }
    }

    fn kind(&self) -> Kind {
        Kind::ALL[(self.key & 0xff) as usize % Kind::ALL.len()]
    }
}

impl Ord for Ev {
    fn cmp(&self, o: &Self) -> Ordering {
        // Reversed, for max-heaps (`BinaryHeap`): the earliest event must come out first.
        (o.at, o.key).cmp(&(self.at, self.key))
    }
}

impl PartialOrd for Ev {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// A client group at run time.
struct Group {
    crit: spillway_core::Criticality,
    customer: u16,
    retry: RetrySet,
    arrivals: Arrivals,
    shape: LoadShape,
    peak: f64,
    next_t: f64,
    instances: Vec<Caller>,
    rr: u32,
    /// The stream its requests' first attempts pick their task from.
    picks: Picks,
    /// A request's deadline after it is offered, ns (`NEVER`: none).
    deadline: u64,
}

enum Fault {
    Tasks { layer: usize, tasks: Vec<u32> },
    Capacity { layer: usize, factor: f64 },
    Slow { layer: usize, extra_ns: u64 },
}

/// One run's raw results.
pub(crate) struct Finished {
    pub recorder: Recorder,
    pub stats: Vec<LayerStats>,
    pub layer_names: Vec<String>,
    pub events: u64,
    pub offered: u64,
    pub attempts: u64,
    pub peak_in_flight: usize,
}

pub(crate) struct Engine {
    now: u64,
    end_s: f64,
    origin: Instant,
    clock: Arc<SimClock>,
    q: EventQueue,
    rng: fastrand::Rng,
    slab: Slab,
    layers: Vec<Layer>,
    groups: Vec<Group>,
    customers: Vec<String>,
    woken: Wakes,
    /// A waker that names no node (a wake through it is ignored): the first poll of a woken
    /// request, which is nearly always ready, needs no waker of its own (see `poll_queued`).
    unnamed: Waker,
    batch: Vec<(u32, u32)>,
    faults: Vec<(Fault, f64, f64)>,
    active: Vec<bool>,
    stats: Vec<LayerStats>,
    recorder: Recorder,
    open_top: u64,
    /// Top-level requests still open, by the second they were offered in; seconds before
    /// `sealed_upto` are complete and sealed in the recorder (memory follows open seconds).
    open_by_second: Vec<u32>,
    sealed_upto: usize,
    /// Huge-page advice for the fleet's memory, renewed as the run grows.
    pages: HugePages,
    arrivals_open: usize,
    events: u64,
    /// The wheel's current bucket's length when the look-ahead last ran (`prefetch.rs`).
    ahead_left: usize,
    offered: u64,
    attempts: u64,
    /// The part of the fleet simulated here, and what crosses to the other parts.
    part: Part,
    links: Links,
}

impl Engine {
    /// Builds part `part` of the fleet of `sc` (one variant, already applied; `Part::WHOLE`
    /// for all of it), for a run titled `title`. A shard (`sim::sharded`) gets every task's
    /// slot, its own tasks' controllers and callers, its own client instances with their
    /// groups' load in proportion, and random streams of its own (shard 0's are the whole
    /// fleet's).
    pub fn new(
        sc: &Scenario,
        title: &str,
        part: Part,
    ) -> Result<Engine, spillway_core::ConfigError> {
        let origin = Instant::now();
        let clock = Arc::new(SimClock::new(origin));
        let mut rng = fastrand::Rng::with_seed(sc.seed);
        let mut layers = Vec::with_capacity(sc.layers.len());
        for (i, l) in sc.layers.iter().enumerate() {
            let has_next = i + 1 < sc.layers.len() && l.calls > 0;
            layers.push(Layer::build(
                l,
                sc.protected,
                has_next,
                &clock,
                origin,
                &mut rng,
                part,
            )?);
        }
        let mut customers: Vec<String> = Vec::new();
        let mut groups = Vec::with_capacity(sc.clients.len());
        for (g, c) in sc.clients.iter().enumerate() {
            let name = c.customer.clone().unwrap_or_else(|| c.name.clone());
            let customer = match customers.iter().position(|n| *n == name) {
                Some(i) => i,
                None => {
                    customers.push(name);
                    customers.len() - 1
                }
            } as u16;
            let retry = RetrySet::new(
                c.retry,
                c.max_attempts,
                c.backoff_ms,
                c.backoff_max_ms,
                c.timeout_ms,
            );
            let mut instances = Vec::with_capacity(c.instances.div_ceil(part.shards) as usize);
            for i in 0..c.instances {
                // Every instance's draw, so that an instance is the same on any shard.
                let seed = rng.u64(..);
                if part.owns(i) {
                    instances.push(Caller::new(
                        &retry,
                        c.throttle_k,
                        c.throttle_min_rps,
                        origin,
                        seed,
                    )?);
                }
            }
            // A shard offers its instances' share of the group's load (its own Poisson stream:
            // independent Poisson streams add up to the group's).
            let shape = if part.shards > 1 {
                c.load
                    .scaled(instances.len() as f64 / f64::from(c.instances.max(1)))
            } else {
                c.load.clone()
            };
            groups.push(Group {
                // Validated by `Scenario::validate`.
                crit: c.criticality.parse().unwrap_or_default(),
                customer,
                retry,
                arrivals: c.arrivals,
                peak: shape.peak(),
                shape,
                next_t: 0.0,
                instances,
                rr: 0,
                picks: Picks::new(shard::seed(sc.seed, part), g, &layers[0]),
                deadline: c.deadline_ms.map_or(NEVER, crate::shape::ms_to_nanos),
            });
        }
        let mut faults = Vec::with_capacity(sc.faults.len());
        for f in &sc.faults {
            let li = |name: &str| sc.layer_index(name).unwrap_or(0);
            let fault = match f {
                FaultConfig::TaskDown {
                    layer,
                    task,
                    at_s,
                    for_s,
                } => (
                    Fault::Tasks {
                        layer: li(layer),
                        tasks: vec![*task],
                    },
                    *at_s,
                    *for_s,
                ),
                FaultConfig::ZoneDown {
                    layer,
                    zone,
                    at_s,
                    for_s,
                } => {
                    let l = li(layer);
                    let tasks = (0..sc.layers[l].tasks)
                        .filter(|t| t % sc.layers[l].zones == *zone)
                        .collect();
                    (Fault::Tasks { layer: l, tasks }, *at_s, *for_s)
                }
                FaultConfig::Capacity {
                    layer,
                    factor,
                    at_s,
                    for_s,
                } => (
                    Fault::Capacity {
                        layer: li(layer),
                        factor: *factor,
                    },
                    *at_s,
                    *for_s,
                ),
                FaultConfig::Slow {
                    layer,
                    extra_ms,
                    at_s,
                    for_s,
                } => (
                    Fault::Slow {
                        layer: li(layer),
                        extra_ns: crate::shape::ms_to_nanos(*extra_ms),
                    },
                    *at_s,
                    *for_s,
                ),
            };
            faults.push(fault);
        }
        let window = Duration::from_secs_f64(sc.duration_s);
        if part.shard > 0 {
            // The fleet is built alike on every shard; from here each draws its own.
            rng = fastrand::Rng::with_seed(stream_seed(shard::seed(sc.seed, part), u64::MAX));
        }
        let woken = Wakes::claim();
        let mut e = Engine {
            now: 0,
            end_s: sc.duration_s,
            origin,
            clock,
            q: EventQueue::default(),
            rng,
            slab: Slab::new(),
            active: vec![false; faults.len()],
            faults,
            stats: vec![LayerStats::default(); layers.len()],
            layers,
            groups,
            customers,
            unnamed: woken.waker(NONE, 0),
            woken,
            batch: Vec::new(),
            recorder: Recorder::offline(title, window),
            // A shard holds one request open until all shards agree the run is over.
            open_top: u64::from(part.shards > 1),
            open_by_second: Vec::new(),
            sealed_upto: 0,
            pages: if part.shard == 0 {
                HugePages::from_env()
            } else {
                HugePages::off()
            },
            arrivals_open: 0,
            events: 0,
            ahead_left: usize::MAX,
            offered: 0,
            attempts: 0,
            links: Links::new(part),
            part,
        };
        for g in 0..e.groups.len() {
            if let Some(t) = e.next_arrival(g) {
                e.arrivals_open += 1;
                e.push_at_secs(t, Kind::Arrival, g as u32);
            }
        }
        for i in 0..e.faults.len() {
            let (_, at, dur) = e.faults[i];
            e.push_at_secs(at, Kind::FaultStart, i as u32);
            e.push_at_secs(at + dur, Kind::FaultEnd, i as u32);
        }
        Ok(e)
    }

    fn push(&mut self, at: u64, kind: Kind, id: u32, gen: u32) {
        self.q.push(self.now, at, kind, id, gen);
    }

    fn push_at_secs(&mut self, t: f64, kind: Kind, id: u32) {
        self.push(secs_to_nanos(t), kind, id, 0);
    }

    /// Simulated instant `nanos` after the start.
    #[inline]
    fn at(&self, nanos: u64) -> Instant {
        self.clock.at(nanos)
    }

    /// Nanoseconds since the start of a simulated instant.
    #[inline]
    fn nanos_of(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.origin).as_nanos()).unwrap_or(NEVER)
    }

    /// Runs to the end: arrivals stop after the window, then every offered request finishes.
    pub fn run(mut self) -> Finished {
        self.built();
        self.run_until(u64::MAX);
        self.finish()
    }

    /// The fleet is built: its tasks and clients onto huge pages before the first request.
    pub fn built(&mut self) {
        self.pages.advise(0);
    }

    /// Runs the events due before simulated time `until` (ns); `false` once the run is over.
    /// (Fleets run side by side in lockstep windows call it per window, `sim::lockstep`; one
    /// loop for both, so that the run's hot path is compiled as it was with one caller.)
    pub fn run_until(&mut self, until: u64) -> bool {
        while self.arrivals_open > 0 || self.open_top > 0 {
            let Some(ev) = self.q.pop() else { return false };
            if ev.at >= until {
                self.q.put_back(ev);
                return true;
            }
            self.prefetch_ahead();
            self.now = ev.at;
            self.clock.set(ev.at);
            self.events += 1;
            match ev.kind() {
                Kind::Arrival => self.arrival(ev.id as usize),
                Kind::WorkerDone => self.worker_done(ev.id, ev.gen),
                Kind::SlowDone => {
                    if self.slab.is(ev.id, ev.gen) && self.node(ev.id).phase == Phase::Slow {
                        self.after_local(ev.id);
                    }
                }
                Kind::AttemptTimeout => self.attempt_timeout(ev.id, ev.gen),
                Kind::QueueGiveUp => self.queue_give_up(ev.id, ev.gen),
                Kind::Retry => {
                    if self.slab.is(ev.id, ev.gen) && self.node(ev.id).phase == Phase::Backoff {
                        self.send(ev.id);
                    }
                }
                Kind::RejectDone => self.release_worker(ev.gen as usize, ev.id as usize),
                Kind::FaultStart => self.fault(ev.id as usize, true),
                Kind::FaultEnd => self.fault(ev.id as usize, false),
                Kind::Deliver => self.delivered(ev.id, ev.gen),
                Kind::Answer => self.answer_arrived(ev.id, Res::from_word(ev.gen)),
                Kind::Cancel => {
                    if self.slab.is(ev.id, ev.gen) {
                        self.cancel(ev.id);
                    }
                }
            }
            self.drain_woken();
        }
        false
    }

    /// What the run produced.
    pub fn finish(self) -> Finished {
        Finished {
            recorder: self.recorder,
            stats: self.stats,
            layer_names: self.layers.iter().map(|l| l.name.clone()).collect(),
            events: self.events,
            offered: self.offered,
            attempts: self.attempts,
            peak_in_flight: self.slab.peak,
        }
    }

    /// The next arrival time of group `g` after its last one, in seconds, or `None` past the
    /// window. Poisson arrivals by thinning at the shape's peak rate (exact for any shape).
    fn next_arrival(&mut self, g: usize) -> Option<f64> {
        let end = self.end_s;
        let rng = &mut self.rng;
        let grp = &mut self.groups[g];
        if grp.peak <= 0.0 {
            return None;
        }
        let mut t = grp.next_t;
        loop {
            match grp.arrivals {
                Arrivals::Poisson => {
                    t += exp(rng, 1.0 / grp.peak);
                    if t >= end {
                        return None;
                    }
                    if rng.f64() * grp.peak < grp.shape.rate_at(t) {
                        break;
                    }
                }
                Arrivals::Uniform => {
                    let r = grp.shape.rate_at(t);
                    t += if r > 0.0 { 1.0 / r } else { 1e-3 };
                    if t >= end {
                        return None;
                    }
                    if grp.shape.rate_at(t) > 0.0 {
                        break;
                    }
                }
            }
        }
        grp.next_t = t;
        Some(t)
    }

    fn arrival(&mut self, g: usize) {
        match self.next_arrival(g) {
            Some(t) => self.push_at_secs(t, Kind::Arrival, g as u32),
            None => self.arrivals_open -= 1,
        }
        let id = self.alloc_node();
        let now = self.now;
        let now_i = self.clock.at(now);
        let grp = &mut self.groups[g];
        let instance = grp.rr;
        grp.rr = (grp.rr + 1) % grp.instances.len() as u32;
        if let Some(p) = &grp.instances[instance as usize].policy {
            p.record_request(now_i);
        }
        let (crit, deadline) = (grp.crit, grp.deadline);
        self.prefetch_instances(g, instance, now_i);
        let n = &mut self.slab.nodes[id as usize];
        n.phase = Phase::Calling;
        n.layer = CLIENT;
        n.group = g as u16;
        n.crit = crit;
        n.instance = instance;
        n.since = now;
        n.deadline = now.saturating_add(deadline);
        n.calls_left = 1;
        self.offered += 1;
        self.open_top += 1;
        let second = (now / 1_000_000_000) as usize;
        if second >= self.open_by_second.len() {
            self.open_by_second.resize(second + 1, 0);
        }
        self.open_by_second[second] += 1;
        self.send(id);
    }

    /// A top-level request offered at `since` (ns) finished at `now`.
    fn top_finished(&mut self, since: u64, now: u64) {
        self.open_top -= 1;
        if let Some(open) = self
            .open_by_second
            .get_mut((since / 1_000_000_000) as usize)
        {
            *open = open.saturating_sub(1);
        }
        self.advance_sealed(now);
    }

    /// Seals, in order, every second before `now` (ns) that has no top-level request left
    /// open, so the recorder drops its latency histogram. (Sharded, shard 0 seals what all
    /// shards have completed, in `Engine::take_records`.)
    fn advance_sealed(&mut self, now: u64) {
        let now_s = (now / 1_000_000_000) as usize;
        while self.sealed_upto < now_s
            && self
                .open_by_second
                .get(self.sealed_upto)
                .is_none_or(|&open| open == 0)
        {
            if self.part.shards == 1 {
                self.recorder.seal(self.sealed_upto);
            }
            self.sealed_upto += 1;
            if self.pages.due(self.sealed_upto) {
                self.pages.advise(self.sealed_upto);
            }
        }
    }

    /// Applies or lifts fault `i`.
    fn fault(&mut self, i: usize, start: bool) {
        if self.active[i] == start {
            return;
        }
        self.active[i] = start;
        let layer = match &self.faults[i].0 {
            Fault::Tasks { layer, tasks } => {
                let l = &mut self.layers[*layer];
                for &t in tasks {
                    let task = &mut l.tasks[t as usize];
                    task.down = if start {
                        task.down + 1
                    } else {
                        task.down.saturating_sub(1)
                    };
                }
                l.rebuild_alive();
                return;
            }
            Fault::Capacity { layer, .. } | Fault::Slow { layer, .. } => *layer,
        };
        let (mut speed, mut slow) = (1.0, 0u64);
        for (f, on) in self.faults.iter().zip(&self.active) {
            match (&f.0, *on) {
                (Fault::Capacity { layer: l, factor }, true) if *l == layer => speed *= factor,
                (Fault::Slow { layer: l, extra_ns }, true) if *l == layer => {
                    slow = slow.saturating_add(*extra_ns)
                }
                _ => {}
            }
        }
        self.layers[layer].speed = speed;
        self.layers[layer].slow_ns = slow;
    }

    /// A fresh node from the slab; when the slab had to grow (its arrays may have moved), the
    /// wakers' prefetch hints learn where they are now.
    fn alloc_node(&mut self) -> u32 {
        let id = self.slab.alloc();
        if id as usize + 1 == self.slab.nodes.len() {
            self.woken.note_slab(self.slab.bases());
        }
        id
    }

    /// Polls the queued admissions the core granted or dropped since the last event.
    fn drain_woken(&mut self) {
        while self.woken.any() {
            let mut batch = std::mem::take(&mut self.batch);
            self.woken.take(&mut batch);
            for &(id, gen) in &batch {
                self.poll_queued(id, gen);
            }
            batch.clear();
            self.batch = batch;
        }
    }

    fn poll_queued(&mut self, id: u32, gen: u32) {
        if !self.slab.is(id, gen) || self.node(id).phase != Phase::Queued {
            return;
        }
        let Held::Queued(q) = self.slab.held_mut(id) else {
            return;
        };
        // The core wakes a waiter when it grants or drops it, so this poll is nearly always
        // ready: poll with the unnamed waker first and make the node its own waker (one
        // allocation) only if it is not. A pending poll stores the waker it is given, so the
        // second poll replaces the unnamed one before anything can wake it.
        let mut polled = Pin::new(&mut *q).poll(&mut Context::from_waker(&self.unnamed));
        if polled.is_pending() {
            let waker = self.woken.waker(id, gen);
            polled = Pin::new(&mut *q).poll(&mut Context::from_waker(&waker));
        }
        let give_up = q.give_up_at();
        match polled {
            Poll::Pending => {
                // Woken without an outcome: its give-up time was brought forward
                // (`QueuedAdmission::give_up_at`); an expiry at the old time finds it gone.
                let at = self.nanos_of(give_up);
                self.push(at, Kind::QueueGiveUp, id, gen);
            }
            Poll::Ready(Ok(permit)) => {
                *self.slab.held_mut(id) = Held::Permit(permit);
                self.start_work(id);
            }
            Poll::Ready(Err(r)) => {
                *self.slab.held_mut(id) = Held::Nothing;
                self.refused(id, r);
            }
        }
    }
}

fn secs_to_nanos(t: f64) -> u64 {
    let ns = t * 1e9;
    if ns.is_finite() && ns > 0.0 {
        if ns >= NEVER as f64 {
            NEVER - 1
        } else {
            ns as u64
        }
    } else {
        0
    }
}
