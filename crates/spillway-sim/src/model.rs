//! The simulated fleet's state: tasks with their admission controllers and workers, callers
//! with their retry policies and throttles, and the slab of in-flight requests.
//!
//! Why a slab of small nodes: memory must grow with the requests *in flight*, not with the
//! requests simulated, so a request is a slot in a `Vec` recycled through a free list, found by
//! index and a generation counter (stale timers carry an old generation and are ignored), with
//! its customer and criticality as small ids — no per-request `String`. Every policy object here
//! is the core's own (`AdmissionController`, `RetryPolicy`, `AdaptiveThrottle`); this module
//! only builds them from the scenario and holds them.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use spillway_core::controller::{AdmissionConfig, AdmissionController};
use spillway_core::quota::{CustomerQuota, QuotaConfig, QuotaEnforcement};
use spillway_core::retry::{RetryConfig, RetryPolicy};
use spillway_core::throttle::{AdaptiveThrottle, ThrottleConfig};
use spillway_core::{Clock, ConfigError, PerCriticality};

use super::config::{
    limit_config, shed_config, Balance, Enforcement, LayerConfig, RetryKind, ServiceDist,
};
use super::shape::ms_to_nanos;
use super::time::{SimClock, SimRandom};

mod request;

pub(crate) use request::{Attempt, Held, Node, Phase, Res, Slab, LOCAL};

/// "No node" in parent/child links.
pub(crate) const NONE: u32 = u32::MAX;
/// The layer index of a top-level (client) request.
pub(crate) const CLIENT: u16 = u16::MAX;
/// "No deadline".
pub(crate) const NEVER: u64 = u64::MAX;

/// The part of a fleet one engine simulates: task `i` of every layer and client instance `i`
/// of every group belong to shard `i % shards` (`sim::sharded`). Every shard builds every
/// task's slot (balancing and faults read the whole layer) but only its own tasks'
/// controllers and callers; the random draws for the others are made all the same, so that a
/// task's controller is the same whichever shard builds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Part {
    pub shard: u32,
    pub shards: u32,
}

impl Part {
    /// The whole fleet, on one engine.
    pub const WHOLE: Part = Part {
        shard: 0,
        shards: 1,
    };

    /// Whether task or instance `i` is simulated here.
    #[inline]
    pub fn owns(self, i: u32) -> bool {
        i % self.shards == self.shard
    }
}

/// How a caller retries, in nanoseconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetrySet {
    pub kind: RetryKind,
    pub max_attempts: u32,
    pub backoff_base: u64,
    pub backoff_max: u64,
    pub timeout: u64,
}

impl RetrySet {
    pub fn new(
        kind: RetryKind,
        max_attempts: u32,
        base_ms: f64,
        max_ms: f64,
        timeout_ms: f64,
    ) -> Self {
        let ns = |ms: f64| if ms <= 0.0 { 0 } else { ms_to_nanos(ms) };
        RetrySet {
            kind,
            max_attempts,
            backoff_base: ns(base_ms),
            backoff_max: ns(max_ms),
            timeout: ms_to_nanos(timeout_ms),
        }
    }

    /// Whether the core's gates decide (and failures go up marked "don't retry").
    pub fn gated(&self) -> bool {
        matches!(self.kind, RetryKind::Budgeted | RetryKind::Throttled)
    }
}

/// One caller's client-side policy objects (one per client instance, one per task calling the
/// next layer): the core's retry gates and adaptive throttle.
///
/// Aligned to a cache line and 256 bytes (a `const` assert below): exactly the four lines the
/// prefetch stages bring in for an answer to this caller, where an unaligned 280-byte caller
/// spanned five or six (fifth round).
#[repr(align(64))]
pub(crate) struct Caller {
    pub policy: Option<RetryPolicy>,
    pub throttle: Option<AdaptiveThrottle<SimRandom>>,
}

impl Caller {
    pub fn new(
        set: &RetrySet,
        k: f64,
        min_rps: f64,
        origin: Instant,
        seed: u64,
    ) -> Result<Self, ConfigError> {
        let policy = if set.gated() {
            Some(RetryPolicy::new(
                RetryConfig {
                    max_attempts: set.max_attempts,
                    ..RetryConfig::default()
                },
                origin,
            )?)
        } else {
            None
        };
        let throttle = if set.kind == RetryKind::Throttled {
            Some(AdaptiveThrottle::with_random(
                ThrottleConfig {
                    k,
                    min_requests_per_sec: min_rps,
                    ..ThrottleConfig::default()
                },
                origin,
                SimRandom::new(seed),
            )?)
        } else {
            None
        };
        Ok(Caller { policy, throttle })
    }
}

/// One task of a layer.
pub(crate) struct Task {
    /// `None` when unprotected.
    pub controller: Option<AdmissionController>,
    /// Workers busy.
    pub busy: u32,
    /// Admitted requests waiting for a worker (node, generation); the unbounded FIFO of an
    /// unprotected task. Entries of cancelled nodes are skipped; `(NONE, _)` is the CPU cost of
    /// a refusal.
    pub fifo: VecDeque<(u32, u32)>,
    /// Faults holding it down (0 = up).
    pub down: u32,
}

/// A task controller's prefetch hints: its hot lines and what they point to.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TaskHot {
    /// The first hot line's address and how many lines follow it (0: unprotected task).
    pub first: usize,
    pub lines: u32,
    /// The random source and the limit state (0: none).
    pub pointees: [usize; 2],
}

impl TaskHot {
    fn of(t: &Task) -> TaskHot {
        let mut hot = TaskHot::default();
        if let Some(c) = &t.controller {
            c.hot_lines(|p| {
                if hot.lines == 0 {
                    hot.first = p as usize;
                }
                hot.lines += 1;
            });
            let mut i = 0;
            c.hot_pointees(|p| {
                if let Some(slot) = hot.pointees.get_mut(i) {
                    *slot = p as usize;
                }
                i += 1;
            });
        }
        hot
    }
}

/// One layer at run time.
pub(crate) struct Layer {
    pub name: String,
    /// Admission control, deadline propagation and cancellation of abandoned work.
    pub protected: bool,
    pub workers: u32,
    pub service: ServiceDist,
    pub calls: u32,
    pub retry: RetrySet,
    pub balance: Balance,
    pub hot_tasks: u32,
    pub hot_share: f64,
    pub tasks: Vec<Task>,
    /// Where each task's controller keeps its fast-path state (prefetch hints, taken once:
    /// the addresses never change), apart and compact so that finding them costs no miss.
    pub hot: Vec<TaskHot>,
    /// Each task's client side towards the next layer (apart: only calls down touch it).
    pub callers: Vec<Caller>,
    /// Live tasks, and live hot tasks, for balancing.
    pub alive: Vec<u32>,
    pub alive_hot: Vec<u32>,
    /// Whether every task (every hot task) is live, so that `alive[i]` is `i` and a pick need
    /// not read the list: at 10⁴ tasks it is 40 kB, and each pick's random entry a miss.
    pub all_alive: bool,
    pub rr: usize,
    /// Current speed (capacity faults) and added latency (slow-dependency faults).
    pub speed: f64,
    pub slow_ns: u64,
    /// Expected cost of a request, CPU-seconds (the quota estimate).
    pub est_cost: f64,
    /// Quotas configured: settle with the measured cost.
    pub has_quota: bool,
    /// Worker time one refusal costs (0 = free).
    pub reject_ns: u64,
    /// One-way network delay between a caller and this layer's tasks (0 = none).
    pub net_ns: u64,
}

impl Layer {
    pub fn build(
        cfg: &LayerConfig,
        protected: bool,
        has_next: bool,
        clock: &Arc<SimClock>,
        origin: Instant,
        rng: &mut fastrand::Rng,
        part: Part,
    ) -> Result<Layer, ConfigError> {
        let retry = RetrySet::new(
            cfg.retry,
            cfg.max_attempts,
            cfg.backoff_ms,
            cfg.backoff_max_ms,
            cfg.timeout_ms,
        );
        let protected = cfg.protected.unwrap_or(protected);
        let q = &cfg.quota;
        let has_quota = q.default.is_some() || !q.customers.is_empty();
        let admission = if cfg.proxy_admission {
            spillway_core::preset::proxy_default().admission
        } else {
            AdmissionConfig {
                limit: limit_config(cfg),
                headroom: PerCriticality(cfg.admission.headroom),
                queue: cfg.admission.queue.clone(),
                shed: shed_config(&cfg.admission),
                quota: QuotaConfig {
                    tasks: cfg.tasks,
                    enforcement: match q.enforcement {
                        Enforcement::WhenOverloaded => QuotaEnforcement::WhenOverloaded,
                        Enforcement::Always => QuotaEnforcement::Always,
                    },
                    burst: Duration::from_nanos(ms_to_nanos(q.burst_ms)),
                    default_customer: q
                        .default
                        .map_or_else(CustomerQuota::unlimited, CustomerQuota::uniform),
                    customers: q
                        .customers
                        .iter()
                        .map(|(n, v)| (n.clone(), CustomerQuota::uniform(*v)))
                        .collect(),
                    ..QuotaConfig::default()
                },
                max_attempts: cfg.admission.max_attempts,
                overload_retry_after: None,
            }
        };
        let mut tasks = Vec::with_capacity(cfg.tasks as usize);
        let mut callers = Vec::with_capacity(cfg.tasks as usize);
        for i in 0..cfg.tasks {
            let own = part.owns(i);
            let controller = if protected {
                let clock: Arc<dyn Clock> = clock.clone();
                // One draw per task, as before; the limit's own jitter (Envoy gradient) gets a
                // stream derived from it, so adding it did not shift any other draw.
                let seed = rng.u64(..);
                if !own {
                    None
                } else {
                    let limit_random = Box::new(SimRandom::new(seed ^ 0x9e37_79b9_7f4a_7c15));
                    Some(
                        AdmissionController::with_limit_random(
                            admission.clone(),
                            clock,
                            limit_random,
                        )?
                        .with_random(Arc::new(SimRandom::new(seed))),
                    )
                }
            } else {
                None
            };
            tasks.push(Task {
                controller,
                busy: 0,
                fifo: VecDeque::new(),
                down: 0,
            });
            let seed = if has_next { rng.u64(..) } else { 0 };
            callers.push(if has_next && own {
                Caller::new(&retry, cfg.throttle_k, cfg.throttle_min_rps, origin, seed)?
            } else {
                Caller {
                    policy: None,
                    throttle: None,
                }
            });
        }
        let hot = tasks.iter().map(TaskHot::of).collect();
        let mut layer = Layer {
            hot,
            name: cfg.name.clone(),
            protected,
            workers: cfg.workers,
            service: cfg.service,
            calls: cfg.calls,
            retry,
            balance: cfg.balance,
            hot_tasks: cfg.hot_tasks,
            hot_share: cfg.hot_share,
            tasks,
            callers,
            alive: Vec::new(),
            alive_hot: Vec::new(),
            all_alive: false,
            rr: 0,
            speed: 1.0,
            slow_ns: 0,
            est_cost: cfg.service.mean_ms() / 1e3,
            reject_ns: if cfg.reject_cost_ms > 0.0 {
                ms_to_nanos(cfg.reject_cost_ms)
            } else {
                0
            },
            has_quota,
            net_ns: if cfg.network_ms > 0.0 {
                ms_to_nanos(cfg.network_ms)
            } else {
                0
            },
        };
        layer.rebuild_alive();
        Ok(layer)
    }

    /// Recomputes the balancing lists after a task went down or came back.
    pub fn rebuild_alive(&mut self) {
        self.alive.clear();
        self.alive_hot.clear();
        for (i, t) in self.tasks.iter().enumerate() {
            if t.down == 0 {
                self.alive.push(i as u32);
                if (i as u32) < self.hot_tasks {
                    self.alive_hot.push(i as u32);
                }
            }
        }
        // Both lists are then `0..n`: hot tasks are the first `hot_tasks`.
        self.all_alive = self.alive.len() == self.tasks.len();
    }

    /// Picks a live task, avoiding `avoid` (the task that just failed) when another is live.
    pub fn pick(&mut self, rng: &mut fastrand::Rng, avoid: u32) -> Option<u32> {
        if self.balance == Balance::RoundRobin {
            self.rr = self.rr.wrapping_add(1);
        }
        self.choose(rng, avoid, self.rr)
    }

    /// The task [`pick`](Self::pick) would choose with `rng`, no task to avoid, and `ahead`
    /// picks from now, changing nothing but `rng` (advanced exactly as `pick` advances it):
    /// run on a copy of a stream that is `ahead` picks in front, it names a task before it is
    /// picked, for prefetching. Exact while the live tasks do not change — for round robin only
    /// while nothing else picks from this layer meanwhile.
    #[inline]
    pub fn predict(&self, rng: &mut fastrand::Rng, ahead: usize) -> Option<u32> {
        self.choose(rng, NONE, self.rr.wrapping_add(ahead))
    }

    /// The choice itself, with round robin's counter at `rr`.
    #[inline]
    fn choose(&self, rng: &mut fastrand::Rng, avoid: u32, rr: usize) -> Option<u32> {
        let list =
            if !self.alive_hot.is_empty() && self.hot_share > 0.0 && rng.f64() < self.hot_share {
                &self.alive_hot
            } else {
                &self.alive
            };
        let n = list.len();
        if n == 0 {
            return None;
        }
        let task = |i: usize| if self.all_alive { i as u32 } else { list[i] };
        let mut i = match self.balance {
            Balance::Random => rng.usize(..n),
            Balance::RoundRobin => rr % n,
        };
        if task(i) == avoid && n > 1 {
            i = match self.balance {
                Balance::Random => (i + 1 + rng.usize(..n - 1)) % n,
                Balance::RoundRobin => (i + 1) % n,
            };
        }
        Some(task(i))
    }
}

const _: () = assert!(std::mem::size_of::<Caller>() == 256);

#[cfg(test)]
mod tests;
