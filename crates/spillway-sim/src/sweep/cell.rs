//! One cell of the sweep: clients → (the proxy's zero-config admission) → a backend, in
//! simulated time.
//!
//! Why an event loop of its own rather than a scenario of the fleet engine: a cell is one proxy
//! in front of one backend, but it needs what the fleet engine does not model — closed-loop
//! clients, a bimodal service time, a backend that slows with what it holds — and it must be
//! cheap enough to run thousands of times. The policy is still the core's own: an
//! `AdmissionController` built from `AdmissionConfig::zero_config()` (the proxy's default), on a
//! simulated clock with seeded randomness, exactly as the fleet engine builds a
//! `proxy_admission` layer (`sim::model`), driven through `admit_at`, its `QueuedAdmission`
//! future (polled with a waker that names the request) and its `Permit`'s release.
//!
//! The pieces map as `sim::demo` maps `spillway demo`: the proxy does no work of its own; it
//! releases its permit when the backend answers (`Success`) or when its own upstream timeout
//! fires first (`Dropped`). When the client gives up — gone, or its propagated deadline run
//! out — the permit's outcome is `Abandoned` (a caller's deadline is no failure and no sample;
//! core's `NoAnswer` decides, as for the proxy's `forward::send`), and the proxy holds it until
//! the backend answers, within the upstream timeout (`upstream.hold_abandoned`, its default;
//! `forward::abandoned`). The backend is a plain one — its workers, an unbounded FIFO, and
//! work for callers who left still done (it is never told).
//! Protected and unprotected runs of a cell draw the same arrival times, criticalities and
//! service times (common random numbers), so their difference is the policy's, not noise.
//! With open-loop arrivals a request's service time is drawn when it arrives, so that the
//! same request costs the same in every run (the oracle reads it before dispatching). A closed
//! loop's runs offer different requests — a client whose request is refused sends its next at
//! once, and a protected run offers thousands of times as many — so pairing by arrival pairs
//! nothing; there the backend draws a service time when a worker starts a request, and two
//! runs that keep every worker busy serve the same work. Drawn on arrival, which requests of a
//! bimodal service (5 % at 20 × the fast time) reached the backend decided R1's closed-loop
//! verdicts: `c=20 mean=50ms bimodal 20x closed:256 crit=0.3` read −7.6 % at seed 28 with the
//! same policy that reads +3.2 % drawn at start (one worker's count of completions over `t`
//! varies as `t·σ²/µ³`, and R1's threshold is 0.1 %).
//!
//! Two more runs tell a policy's failures from a cell's impossibilities ([`Mode`]): the tuned
//! baseline `bench/robustness.sh` runs for real (HAProxy, cap = workers, priority classes, a
//! queue timeout of the client's) and an oracle that is also told each request's service time.
//! They share the arrivals and the backend (`cell::backend`); their queue is `cell::tuned`'s.

mod admission;
mod backend;
#[cfg(test)]
mod tests;
mod throttle;
mod tuned;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

pub use super::figures::RunFigures;
use super::figures::SLICES;
pub use super::spec::{cell_seed, duration_s};
use super::state::{End, Held, Phase, Req, Wakeup};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use spillway_core::controller::{
    Admission, AdmissionController, AdmissionRequest, NoAnswer, Outcome, Permit, Refusal,
};
use spillway_core::throttle::AdaptiveThrottle;
use spillway_core::{Clock, Criticality};

use super::config::{ArrivalKind, BackendKind, CellSpec, Dist, ModelConfig, SweepConfig};
use crate::config::ServiceDist;
use crate::shape::{exp, ms_to_nanos, service_nanos};
use crate::time::{SimClock, SimRandom};

const ARRIVAL: u8 = 0;
const SEND: u8 = 1;
const TIMEOUT: u8 = 2;
const GIVE_UP: u8 = 3;
const DONE: u8 = 4;
/// The proxy's own upstream timeout, when it fires before the client's deadline.
const UPSTREAM_TIMEOUT: u8 = 5;
/// The proxy's upstream timeout ends its hold of a request whose caller left.
const HOLD_TIMEOUT: u8 = 6;

/// What stands in front of the backend in one run of a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Nothing: the backend alone.
    Unprotected,
    /// The proxy's zero-config admission: the core's `AdmissionController`.
    Protected,
    /// HAProxy as `bench/robustness.sh` tunes it: `maxconn` = the backend's workers (capacity
    /// known), queued requests served CRITICAL first and in arrival order within a class
    /// (`set-priority-class`), and dropped when they have waited the client's timeout
    /// (`timeout queue` = it; `option abortonclose` frees a slot whose client left).
    Tuned,
    /// The tuned queue, told each request's service time: it never sends work that cannot
    /// end within its deadline (refused as `oracle_late` when its turn comes), so no worker
    /// spends time on a doomed request. With `critical_only`, the cell's other traffic is
    /// never offered: CRITICAL has the whole backend. An estimate of the best an admission
    /// policy could do, not a proof (a policy that reorders by service time could do better).
    Oracle {
        /// Offer only the CRITICAL traffic.
        critical_only: bool,
    },
}

/// A scheduled event: (time ns, sequence for FIFO ties, kind, request id, generation).
type Event = (u64, u64, u8, u32, u32);

struct Sim<'a> {
    spec: &'a CellSpec,
    model: &'a ModelConfig,
    propagate_deadline: bool,
    /// The proxy's configured upstream timeout (`upstream.request_timeout_ms`, its default).
    upstream_timeout: Duration,
    now: u64,
    end: u64,
    /// The window's middle: requests offered from here are also counted as "late".
    half: u64,
    hard_cap: u64,
    /// `RunFigures::ok_slices`' slice of the planned window, ns.
    slice: u64,
    seq: u64,
    events: BinaryHeap<Reverse<Event>>,
    origin: Instant,
    clock: Arc<SimClock>,
    proxy: Option<AdmissionController>,
    /// With the proxy: its client throttle for the one upstream task, SHEDDABLE's and
    /// CRITICAL's (`throttle.rs`).
    throttles: Option<[AdaptiveThrottle<SimRandom>; 2]>,
    /// The tuned baseline's (or the oracle's) queue and slots, in those modes.
    tuned: Option<tuned::Tuned>,
    /// Offer only CRITICAL requests (the oracle of R2).
    critical_only: bool,
    woken: Arc<Mutex<Vec<(u32, u32)>>>,
    reqs: Vec<Req>,
    free: Vec<u32>,
    open: u64,
    sent: u64,
    arrivals_rng: fastrand::Rng,
    service_rng: fastrand::Rng,
    /// Service times are drawn when a worker starts the request (closed loops), not on
    /// arrival (module docs).
    service_at_start: bool,
    /// Permits of requests whose client left while the backend had them, by (id, generation):
    /// the proxy holds each until the backend answers (`upstream.hold_abandoned`).
    held_abandoned: HashMap<(u32, u32), Permit>,
    // Backend.
    busy: u32,
    fifo: VecDeque<(u32, u32, u64, u64)>,
    /// The timer's tick, ns (0: exact service times), and what each worker owes: the idle
    /// ones in the order they will take work, the busy ones by when they end (`backend`).
    tick: u64,
    /// The workers' mean wake delay, ns (`ModelConfig::backend_wake_ms`), and its draws.
    wake: u64,
    wake_rng: fastrand::Rng,
    idle_owed: VecDeque<u64>,
    busy_owed: BinaryHeap<Reverse<(u64, u64)>>,
    /// Mean time a request spends outside the backend and the proxy's queue
    /// (`ModelConfig::overhead_ms`), drawn per request from an exponential (on a busy host
    /// most requests lose little and a few lose several ms): the client's deadline comes
    /// this much sooner for the backend and the proxy.
    overhead: u64,
    overhead_rng: fastrand::Rng,
    wait_sum: u64,
    drop_window: (u64, u64),
    // Open-loop arrivals.
    rate: f64,
    p_critical: f64,
    period: u64,
    on_len: u64,
    // Closed loop.
    think: u64,
    timeout: u64,
    allowed_wait: u64,
    figures: RunFigures,
    refusal_ns: Vec<u64>,
    /// With `SWEEP_TRACE` set in the environment, the protected run prints the controller's
    /// state 100 times over its window (to read one cell's trajectory; `tests.rs` runs a
    /// chosen sweep file with `SWEEP_FILE`).
    trace: bool,
    next_trace: u64,
}

/// Runs `spec` once, behind the proxy's zero-config admission (`protected`) or not.
pub fn run_cell(
    spec: &CellSpec,
    sweep: &SweepConfig,
    protected: bool,
) -> Result<RunFigures, spillway_core::ConfigError> {
    let mode = if protected {
        Mode::Protected
    } else {
        Mode::Unprotected
    };
    run_mode(spec, sweep, mode)
}

/// Runs `spec` once with `mode` in front of the backend.
pub fn run_mode(
    spec: &CellSpec,
    sweep: &SweepConfig,
    mode: Mode,
) -> Result<RunFigures, spillway_core::ConfigError> {
    let protected = mode == Mode::Protected;
    let seed = cell_seed(sweep.seed, spec);
    let duration = duration_s(spec, &sweep.model);
    let origin = Instant::now();
    let clock = Arc::new(SimClock::new(origin));
    let proxy = if protected {
        let admission = spillway_core::controller::AdmissionConfig::zero_config();
        let c: Arc<dyn Clock> = clock.clone();
        // Seeded as the fleet engine seeds a task's controller (`sim::model`).
        let limit_random = Box::new(SimRandom::new(seed ^ 0x9e37_79b9_7f4a_7c15));
        Some(
            AdmissionController::with_limit_random(admission, c, limit_random)?
                .with_random(Arc::new(SimRandom::new(seed))),
        )
    } else {
        None
    };
    let throttles = if protected {
        let cfg = spillway_core::preset::proxy_default().throttle;
        let t = |salt: u64| {
            AdaptiveThrottle::with_random(cfg.clone(), origin, SimRandom::new(seed ^ salt))
        };
        Some([t(0x7417_0001)?, t(0x7417_0002)?])
    } else {
        None
    };
    let end = ms_to_nanos(duration * 1e3);
    let slice = (end / SLICES as u64).max(1);
    let m = &sweep.model;
    let capacity = spec.capacity();
    let rate = spec.offered * capacity;
    let critical_rate = (spec.critical_share * capacity).min(rate);
    let period = end / u64::from(m.burst_cycles.max(1));
    let timeout = ms_to_nanos(spec.timeout_ms());
    let mut sim = Sim {
        spec,
        model: m,
        propagate_deadline: sweep.propagate_deadline,
        upstream_timeout: spillway_core::preset::proxy_default().request_timeout,
        now: 0,
        end,
        half: end / 2,
        hard_cap: (spec.max_requests * 10.0) as u64,
        seq: 0,
        events: BinaryHeap::new(),
        origin,
        clock,
        proxy,
        throttles,
        tuned: match mode {
            Mode::Tuned => Some(tuned::Tuned::new(spec.workers, false)),
            Mode::Oracle { .. } => Some(tuned::Tuned::new(spec.workers, true)),
            Mode::Protected | Mode::Unprotected => None,
        },
        critical_only: matches!(
            mode,
            Mode::Oracle {
                critical_only: true
            }
        ),
        woken: Arc::new(Mutex::new(Vec::new())),
        reqs: Vec::new(),
        free: Vec::new(),
        open: 0,
        sent: 0,
        arrivals_rng: fastrand::Rng::with_seed(seed ^ 0x5151),
        service_rng: fastrand::Rng::with_seed(seed ^ 0xa5a5),
        service_at_start: !spec.arrivals.is_open(),
        held_abandoned: HashMap::new(),
        busy: 0,
        fifo: VecDeque::new(),
        tick: backend::nanos_or_none(m.backend_timer_tick_ms),
        wake: backend::nanos_or_none(m.backend_wake_ms),
        wake_rng: fastrand::Rng::with_seed(seed ^ 0x3c3c),
        idle_owed: (0..spec.workers).map(|_| 0).collect(),
        busy_owed: BinaryHeap::new(),
        overhead: backend::nanos_or_none(m.overhead_ms),
        overhead_rng: fastrand::Rng::with_seed(seed ^ 0x0e0e),
        wait_sum: 0,
        drop_window: match spec.backend {
            BackendKind::CapacityDrop => (
                (m.drop_at * end as f64) as u64,
                ((m.drop_at + m.drop_for) * end as f64) as u64,
            ),
            _ => (0, 0),
        },
        rate,
        p_critical: if rate > 0.0 {
            critical_rate / rate
        } else {
            0.0
        },
        period,
        on_len: (period as f64 * m.burst_on_share) as u64,
        think: ms_to_nanos(m.closed_think_ms),
        timeout,
        allowed_wait: timeout.saturating_sub(ms_to_nanos(spec.mean_ms)),
        slice,
        figures: RunFigures {
            ok_slices: vec![0; SLICES],
            slice_s: slice as f64 / 1e9,
            ..RunFigures::empty()
        },
        refusal_ns: Vec::new(),
        next_trace: 0,
        trace: std::env::var_os("SWEEP_TRACE").is_some(),
    };
    sim.start();
    sim.run();
    Ok(sim.finish())
}

impl Sim<'_> {
    fn push(&mut self, at: u64, kind: u8, id: u32, gen: u32) {
        self.seq += 1;
        self.events.push(Reverse((at, self.seq, kind, id, gen)));
    }

    fn nanos(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.origin).as_nanos() as u64
    }

    fn start(&mut self) {
        match self.spec.arrivals {
            ArrivalKind::Closed(n) => {
                let critical = (f64::from(n) * self.spec.critical_share.min(1.0)).round() as u32;
                let mean = ms_to_nanos(self.spec.mean_ms);
                for client in 0..n {
                    if self.critical_only && client >= critical {
                        break;
                    }
                    // Staggered over one mean service time: clients that all start at the
                    // same instant would be a burst no real fleet of clients sends.
                    let at = (self.arrivals_rng.f64() * mean as f64) as u64;
                    self.push(at, SEND, client, u32::from(client < critical));
                }
            }
            _ => {
                if self.rate > 0.0 {
                    if let Some(t) = self.next_arrival(0) {
                        self.push(t, ARRIVAL, 0, 0);
                    }
                }
            }
        }
    }

    fn run(&mut self) {
        while let Some(Reverse((at, _, kind, id, gen))) = self.events.pop() {
            if at >= self.end && self.open == 0 {
                break;
            }
            self.now = at;
            self.clock.set(at);
            if let (Some(p), true) = (&self.proxy, self.trace) {
                if at >= self.next_trace {
                    self.next_trace = at + self.end / 100;
                    let s = p.snapshot();
                    tracing::info!(
                        t = at as f64 / 1e9,
                        limit = s.limit,
                        inflight = s.in_flight,
                        queued = s.queued,
                        busy = self.busy,
                        fifo = self.fifo.len(),
                        ok = self.figures.ok,
                        refused = self.figures.refused,
                        timed_out = self.figures.timed_out,
                        expected_service_time = ?s.expected_service_time,
                        "sweep cell"
                    );
                }
            }
            self.figures.events += 1;
            match kind {
                ARRIVAL => {
                    let critical = self.arrivals_rng.f64() < self.p_critical;
                    self.new_request(critical, u32::MAX);
                    if let Some(t) = self.next_arrival(at) {
                        self.push(t, ARRIVAL, 0, 0);
                    }
                }
                SEND => {
                    if at < self.end {
                        self.new_request(gen == 1, id);
                    }
                }
                TIMEOUT => self.client_timeout(id, gen),
                GIVE_UP => self.queue_give_up(id, gen),
                DONE => self.backend_done(id, gen),
                UPSTREAM_TIMEOUT => self.upstream_timeout(id, gen),
                HOLD_TIMEOUT => {
                    if let Some(mut p) = self.held_abandoned.remove(&(id, gen)) {
                        p.release_at(self.clock.at(self.now));
                    }
                }
                _ => unreachable!("only the kinds above are pushed"),
            }
            self.drain_woken();
            self.tuned_dispatch();
        }
    }

    fn alloc(&mut self) -> u32 {
        if let Some(id) = self.free.pop() {
            return id;
        }
        self.reqs.push(Req {
            gen: 0,
            phase: Phase::Free,
            arrival: 0,
            deadline: 0,
            service: 0,
            critical: false,
            client: u32::MAX,
            held: Held::None,
            started_in_window: false,
        });
        (self.reqs.len() - 1) as u32
    }

    fn live(&self, id: u32, gen: u32) -> bool {
        self.reqs
            .get(id as usize)
            .is_some_and(|r| r.gen == gen && r.phase != Phase::Free)
    }

    fn new_request(&mut self, critical: bool, client: u32) {
        self.sent += 1;
        if self.sent >= self.hard_cap && self.now < self.end {
            // A closed loop spinning on instant refusals: stop offering, say so.
            self.end = self.now.max(1);
            self.figures.truncated = true;
        }
        let service = if self.service_at_start {
            0
        } else {
            self.draw_service()
        };
        if self.critical_only && !critical {
            // Drawn all the same, so that CRITICAL requests keep their service times.
            return;
        }
        let id = self.alloc();
        let now = self.now;
        let deadline = now + self.timeout - self.outside();
        let r = &mut self.reqs[id as usize];
        r.gen = r.gen.wrapping_add(1);
        r.phase = Phase::Queued;
        r.arrival = now;
        r.deadline = deadline;
        r.service = service;
        r.critical = critical;
        r.client = client;
        r.started_in_window = false;
        let gen = r.gen;
        self.open += 1;
        self.push(deadline, TIMEOUT, id, gen);
        if self.tuned.is_some() {
            // The run loop dispatches it once this event is handled, at this same instant.
            return self.tuned_arrive(id, gen);
        }
        let Some(proxy) = &self.proxy else {
            return self.send_to_backend(id, Held::None);
        };
        let crit = if critical {
            Criticality::Critical
        } else {
            Criticality::Sheddable
        };
        let mut req = AdmissionRequest::new("sweep", crit);
        if self.propagate_deadline {
            // The proxy is told the client's own deadline, overhead included.
            req.deadline = Some(self.clock.at(now + self.timeout));
        }
        match proxy.admit_at(&req, self.clock.at(now)) {
            Admission::Admitted(p) => self.send_to_backend(id, Held::Permit(p)),
            Admission::Refused(r) => self.refuse(id, r),
            Admission::Queued(mut q) => {
                let waker = Waker::from(Arc::new(Wakeup {
                    id,
                    gen,
                    woken: self.woken.clone(),
                }));
                match Pin::new(&mut q).poll(&mut Context::from_waker(&waker)) {
                    Poll::Ready(Ok(p)) => self.send_to_backend(id, Held::Permit(p)),
                    Poll::Ready(Err(r)) => self.refuse(id, r),
                    Poll::Pending => {
                        let at = self.nanos(q.give_up_at());
                        self.reqs[id as usize].held = Held::Queued(q);
                        self.push(at, GIVE_UP, id, gen);
                    }
                }
            }
        }
    }

    /// Leaving the proxy's queue: a wait past deadline − mean service is one R4 forbids.
    fn left_queue(&mut self, id: u32) {
        let waited = self.now - self.reqs[id as usize].arrival;
        if waited > self.allowed_wait {
            self.figures.late_queue_exits += 1;
            let late = (waited - self.allowed_wait) as f64 / 1e6;
            self.figures.late_queue_worst_ms = self.figures.late_queue_worst_ms.max(late);
        }
    }

    fn send_to_backend(&mut self, id: u32, held: Held) {
        let proxied = matches!(held, Held::Permit(_));
        if proxied && self.throttled(id) {
            return self.refuse_throttled(id, held);
        }
        let r = &mut self.reqs[id as usize];
        let was_queued = matches!(r.held, Held::Queued(_) | Held::Waiting);
        r.phase = Phase::Backend;
        r.held = held;
        let (gen, deadline) = (r.gen, r.deadline);
        let entry = (id, gen, r.service, self.now);
        if was_queued {
            self.left_queue(id);
        }
        if proxied && self.wait_bound(self.now, deadline) == NoAnswer::UpstreamTimeout {
            // Only a configured timeout shorter than the client's (never, with the default's
            // 30 s and the sweep's timeouts) fires before the client leaves.
            let at = self
                .now
                .saturating_add(self.upstream_timeout.as_nanos() as u64);
            if at < deadline {
                self.push(at, UPSTREAM_TIMEOUT, id, gen);
            }
        }
        self.fifo.push_back(entry);
        self.start_work();
    }

    /// the configured timeout or what is left of the propagated deadline, and what its firing
    /// means (the proxy's own decision).
    fn wait_bound(&self, granted: u64, deadline: u64) -> NoAnswer {
        let left = self
            .propagate_deadline
            .then(|| Duration::from_nanos(deadline.saturating_sub(granted)));
        NoAnswer::wait_bound(self.upstream_timeout, left).1
    }

    /// The proxy's own upstream timeout fired before the client's deadline: it answers 504 and
    /// lets go (the backend is not told).
    fn upstream_timeout(&mut self, id: u32, gen: u32) {
        if self.live(id, gen) && self.reqs[id as usize].phase == Phase::Backend {
            self.settle_throttle(id, false);
            self.release(id, NoAnswer::UpstreamTimeout.outcome());
            self.end_request(id, End::TimedOut);
        }
    }

    fn release(&mut self, id: u32, outcome: Outcome) {
        match std::mem::replace(&mut self.reqs[id as usize].held, Held::None) {
            Held::Permit(mut p) => {
                p.set_outcome(outcome);
                p.release_at(self.clock.at(self.now));
            }
            Held::Slot => self.tuned_release(),
            _ => {}
        }
    }

    fn refuse(&mut self, id: u32, r: Refusal) {
        self.refuse_as(id, r.reason.as_str());
    }

    fn refuse_as(&mut self, id: u32, reason: &str) {
        *self
            .figures
            .refused_by_reason
            .entry(reason.to_owned())
            .or_default() += 1;
        if self.reqs[id as usize].critical {
            *self
                .figures
                .critical_refused_by_reason
                .entry(reason.to_owned())
                .or_default() += 1;
        }
        self.refusal_ns
            .push(self.now - self.reqs[id as usize].arrival);
        self.end_request(id, End::Refused);
    }

    fn client_timeout(&mut self, id: u32, gen: u32) {
        if !self.live(id, gen) {
            return;
        }
        match std::mem::replace(&mut self.reqs[id as usize].held, Held::None) {
            held @ (Held::Queued(_) | Held::Waiting) => {
                self.left_queue(id);
                // Dropping it takes it out of the core's queue (the tuned queue skips it when
                // its turn comes). Given up on while queued, it was refused in all but name, at
                // its deadline: R4a counts it so.
                drop(held);
                self.figures.abandoned_in_queue += 1;
                self.refusal_ns
                    .push(self.now - self.reqs[id as usize].arrival);
            }
            Held::Permit(mut p) => {
                // The client left; the backend is not told. With the deadline propagated, the
                // proxy's own timer fires at this same instant (unless its configured timeout
                // was no longer, which `wait_bound` says); without, the client is simply gone.
                let started = self.nanos(p.started_at());
                let why = if self.propagate_deadline {
                    self.wait_bound(started, self.now)
                } else {
                    NoAnswer::CallerGone
                };
                p.set_outcome(why.outcome());
                // The proxy's own timeout is the task's failure; the caller's deadline or
                // departure is not, and its throttle records an accept (`forward::attempt`).
                self.settle_throttle(id, why != NoAnswer::UpstreamTimeout);
                if why == NoAnswer::UpstreamTimeout {
                    // The proxy's own timeout: it lets go of the exchange and the slot.
                    drop(p);
                } else {
                    // As `forward::abandoned` does: the exchange goes on without its caller and
                    // the slot is held until the backend answers (its DONE), or until the
                    // proxy's upstream timeout from the grant.
                    let gen = self.reqs[id as usize].gen;
                    let until = started.saturating_add(self.upstream_timeout.as_nanos() as u64);
                    self.held_abandoned.insert((id, gen), p);
                    self.push(until.max(self.now), HOLD_TIMEOUT, id, gen);
                }
            }
            // HAProxy with `option abortonclose` lets go of the server connection, and of its
            // slot, when the client does; the backend is not told.
            Held::Slot => self.tuned_release(),
            Held::None => {}
        }
        self.end_request(id, End::TimedOut);
    }

    fn end_request(&mut self, id: u32, end: End) {
        let r = &mut self.reqs[id as usize];
        r.phase = Phase::Free;
        r.held = Held::None;
        let (critical, client, late) = (r.critical, r.client, r.arrival >= self.half);
        let in_window = r.started_in_window;
        self.free.push(id);
        self.open -= 1;
        let f = &mut self.figures;
        f.offered += 1;
        f.critical_offered += u64::from(critical);
        f.late_offered += u64::from(late);
        match end {
            End::Ok => {
                f.ok += 1;
                let i = (self.now / self.slice) as usize;
                f.ok_slices[i.min(SLICES - 1)] += 1;
                f.window_ok += u64::from(in_window);
                f.late_ok += u64::from(late);
                f.critical_ok += u64::from(critical);
            }
            End::Refused => f.refused += 1,
            End::TimedOut => {
                f.timed_out += 1;
                f.critical_timed_out += u64::from(critical);
            }
        }
        if client != u32::MAX {
            let at = self.now + self.think;
            if at < self.end {
                self.push(at, SEND, client, u32::from(critical));
            }
        }
    }
}
