//! The scenario file: clients, layers, faults and variants, as TOML.
//!
//! Why a file format of its own: a scenario is a small fleet (clients with timeouts and retry
//! behaviours, a call graph of layers of tasks) plus a story (load shape, faults) plus the
//! variants to compare side by side (naive vs gated retries, unprotected vs protected). Every
//! key has a default except the few that define the story; unknown keys are errors (a typo must
//! not silently run a different experiment), and every value is checked by [`Scenario::validate`]
//! with an error naming the key, the value and what is accepted. Limits and queues reuse the
//! core's own serde forms (`spillway_core::limit::LimitConfig`, `spillway_core::queue::QueueConfig`)
//! so a layer is configured like a proxy upstream.

use std::collections::BTreeMap;

use serde::Deserialize;
use spillway_core::limit::{FixedConfig, LimitConfig};
use spillway_core::queue::QueueConfig;
use spillway_core::Criticality;

use super::shape::LoadShape;

mod validate;

/// A scenario could not be read or is invalid.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The TOML did not parse or did not match the schema (the message has the line).
    #[error("scenario {source_name}: {message}")]
    Parse {
        /// File name or built-in scenario name.
        source_name: String,
        /// The parser's message, with line and column.
        message: String,
    },
    /// A value is out of range.
    #[error("scenario {scenario}: {key} = {value}: expected {expected}")]
    Invalid {
        /// The scenario's name.
        scenario: String,
        /// Dotted path of the key, e.g. `layer[backend].workers`.
        key: String,
        /// The rejected value.
        value: String,
        /// What is accepted.
        expected: String,
    },
}

/// How a caller retries a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryKind {
    /// Never retries.
    None,
    /// Retries every retryable failure until `max_attempts` (immediately or after backoff),
    /// and passes failures up unmarked: the behaviour that multiplies load down a call chain.
    Naive,
    /// The core's `RetryPolicy`: attempt limit counting carried attempts, don't-retry markers,
    /// widespread-overload check, 10 % budget; failures go up marked "don't retry".
    Budgeted,
    /// `Budgeted` plus the core's `AdaptiveThrottle` in front of every attempt.
    Throttled,
}

impl RetryKind {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            RetryKind::None => "none",
            RetryKind::Naive => "naive",
            RetryKind::Budgeted => "budgeted",
            RetryKind::Throttled => "throttled",
        }
    }
}

/// How arrivals are spaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arrivals {
    /// Poisson process (exponential gaps) at the shape's rate — open-loop, like real users.
    #[default]
    Poisson,
    /// Evenly spaced at the shape's rate.
    Uniform,
}

/// A service-time distribution, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(tag = "dist", rename_all = "snake_case", deny_unknown_fields)]
pub enum ServiceDist {
    /// Always `mean_ms`.
    Const {
        /// The time.
        mean_ms: f64,
    },
    /// Exponential with mean `mean_ms` (the M in M/M/c).
    Exp {
        /// Mean.
        mean_ms: f64,
    },
    /// Uniform on `[mean_ms − spread_ms, mean_ms + spread_ms]`.
    Uniform {
        /// Mean.
        mean_ms: f64,
        /// Half-width, at most `mean_ms`.
        spread_ms: f64,
    },
    /// Log-normal with mean `mean_ms` and shape `sigma` (the σ of the underlying normal): a
    /// long tail, as real services have.
    Lognormal {
        /// Mean.
        mean_ms: f64,
        /// Shape, in `(0, 3]`.
        sigma: f64,
    },
}

impl ServiceDist {
    /// The mean in milliseconds.
    pub fn mean_ms(&self) -> f64 {
        match *self {
            ServiceDist::Const { mean_ms }
            | ServiceDist::Exp { mean_ms }
            | ServiceDist::Uniform { mean_ms, .. }
            | ServiceDist::Lognormal { mean_ms, .. } => mean_ms,
        }
    }
}

/// One group of clients sending to the first layer.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    /// Name (tables, legends).
    pub name: String,
    /// Criticality of its requests. Default `CRITICAL`.
    #[serde(default = "default_criticality")]
    pub criticality: String,
    /// Customer (quota account). Default: the client's name.
    #[serde(default)]
    pub customer: Option<String>,
    /// Per-attempt timeout, ms. Default 1000.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: f64,
    /// A request's deadline from when it is offered, ms, across all its attempts (`spillway
    /// load`'s `--timeout`): no attempt is sent after it and none runs past it. Default: none
    /// (only the per-attempt `timeout_ms`).
    #[serde(default)]
    pub deadline_ms: Option<f64>,
    /// Retry behaviour. Default `throttled` (what `spillway-tower` clients do).
    #[serde(default = "default_retry")]
    pub retry: RetryKind,
    /// Attempts per request, the first included (1..=100). Default 3.
    #[serde(default = "default_attempts")]
    pub max_attempts: u32,
    /// Backoff base, ms: full jitter over `base · 2^(retry−1)`. Default 25 (as `spillway-tower`).
    #[serde(default = "default_backoff_ms")]
    pub backoff_ms: f64,
    /// Backoff ceiling, ms. Default 1000.
    #[serde(default = "default_backoff_max_ms")]
    pub backoff_max_ms: f64,
    /// Independent client instances (each with its own throttle and budget), requests spread
    /// round-robin. Default 1.
    #[serde(default = "one")]
    pub instances: u32,
    /// The throttle's K. Default 2 (SRE book ch. 21).
    #[serde(default = "default_k")]
    pub throttle_k: f64,
    /// Below this many requests/s (over the throttle's 2-minute window) the throttle stays
    /// open. Default 1, as `spillway proxy` (a cold client's first burst is still unanswered).
    #[serde(default = "default_min_rps")]
    pub throttle_min_rps: f64,
    /// Arrival process. Default `poisson`.
    #[serde(default)]
    pub arrivals: Arrivals,
    /// The offered load over time.
    pub load: LoadShape,
}

/// Shedding on utilisation (maps to `spillway_core::shed::ShedConfig`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdmissionSettings {
    /// Concurrency limit, the core's `LimitConfig` (`{ algorithm = "fixed", limit = 8 }`,
    /// `"aimd"`, `"gradient2"`). Default: fixed at the layer's `workers`.
    #[serde(default)]
    pub limit: Option<LimitConfig>,
    /// The core's `QueueConfig` (`max_len`, `max_wait_ms`, `discipline`). Default: the core's
    /// (half the limit, 100 ms, CoDel).
    #[serde(default)]
    pub queue: QueueConfig,
    /// Shed thresholds from SHEDDABLE upwards; levels past the list are never shed on
    /// utilisation. Default `[0.8, 0.9, 1.0]` (the core's).
    #[serde(default = "default_shed_thresholds")]
    pub shed_thresholds: Vec<f64>,
    /// Shed ramp width. Default 0.1.
    #[serde(default = "default_shed_ramp")]
    pub shed_ramp: f64,
    /// Share of the limit each criticality may fill, SHEDDABLE … CRITICAL_PLUS. Default
    /// `[0.8, 0.9, 0.95, 1.0]`.
    #[serde(default = "default_headroom")]
    pub headroom: [f64; 4],
    /// Attempts beyond this are refused while overloaded. Default 3.
    #[serde(default = "default_attempts")]
    pub max_attempts: u32,
}

impl Default for AdmissionSettings {
    fn default() -> Self {
        AdmissionSettings {
            limit: None,
            queue: QueueConfig::default(),
            shed_thresholds: default_shed_thresholds(),
            shed_ramp: default_shed_ramp(),
            headroom: default_headroom(),
            max_attempts: default_attempts(),
        }
    }
}

/// When quotas refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Enforcement {
    /// Only while the task is overloaded (SRE book ch. 21). Default.
    #[default]
    WhenOverloaded,
    /// Always.
    Always,
}

/// Per-customer quotas of a layer, global across its tasks, in CPU-seconds per second.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaSettings {
    /// When they refuse. Default `when_overloaded`.
    #[serde(default)]
    pub enforcement: Enforcement,
    /// Quota shared by customers not listed; absent = unlimited.
    #[serde(default)]
    pub default: Option<f64>,
    /// Named customers' quotas (same at every criticality).
    #[serde(default)]
    pub customers: BTreeMap<String, f64>,
    /// Bucket size as time of quota, ms. Default 1000.
    #[serde(default = "default_burst_ms")]
    pub burst_ms: f64,
}

impl Default for QuotaSettings {
    fn default() -> Self {
        QuotaSettings {
            enforcement: Enforcement::default(),
            default: None,
            customers: BTreeMap::new(),
            burst_ms: default_burst_ms(),
        }
    }
}

/// How a caller picks a task of the next layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    /// Uniformly at random among live tasks (a retry avoids the task that just failed).
    #[default]
    Random,
    /// In turn.
    RoundRobin,
}

/// One layer of the call graph: a set of identical tasks.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerConfig {
    /// Name.
    pub name: String,
    /// Tasks. Default 1.
    #[serde(default = "one")]
    pub tasks: u32,
    /// Workers (CPU) per task. Default 1.
    #[serde(default = "one")]
    pub workers: u32,
    /// Zones the tasks are spread over (task `i` is in zone `i % zones`). Default 1.
    #[serde(default = "one")]
    pub zones: u32,
    /// Local work per request (holds a worker).
    pub service: ServiceDist,
    /// Sequential calls each request makes to the next layer. Default 1.
    #[serde(default = "one")]
    pub calls: u32,
    /// How this layer retries its calls to the next layer. Default `throttled`.
    #[serde(default = "default_retry")]
    pub retry: RetryKind,
    /// Attempts per downstream call. Default 3.
    #[serde(default = "default_attempts")]
    pub max_attempts: u32,
    /// Backoff base, ms. Default 25.
    #[serde(default = "default_backoff_ms")]
    pub backoff_ms: f64,
    /// Backoff ceiling, ms. Default 1000.
    #[serde(default = "default_backoff_max_ms")]
    pub backoff_max_ms: f64,
    /// Per-attempt timeout of downstream calls, ms (capped by the propagated deadline when
    /// protected). Default 1000.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: f64,
    /// The throttle's K on downstream calls. Default 2.
    #[serde(default = "default_k")]
    pub throttle_k: f64,
    /// The throttle's minimum request rate on downstream calls. Default 1.
    #[serde(default = "default_min_rps")]
    pub throttle_min_rps: f64,
    /// Worker time a refusal costs, ms (rejections are not free: AWS Builders' Library, "Using
    /// load shedding to avoid overload"). Default 0.
    #[serde(default)]
    pub reject_cost_ms: f64,
    /// One-way network delay between this layer's callers and its tasks, ms: an attempt
    /// reaches its task this long after it is sent, and its answer (or refusal) reaches the
    /// caller this long after the task gives it; a caller's cancellation follows the attempt
    /// by the same delay. It counts inside the caller's per-attempt timeout. Default 0.
    #[serde(default)]
    pub network_ms: f64,
    /// How callers pick a task of this layer. Default `random`.
    #[serde(default)]
    pub balance: Balance,
    /// The first `hot_tasks` tasks receive `hot_share` of this layer's traffic. Default 0.
    #[serde(default)]
    pub hot_tasks: u32,
    /// Share of traffic sent to the hot tasks, `[0, 1]`. Default 0.
    #[serde(default)]
    pub hot_share: f64,
    /// Overrides the scenario's `protected` for this layer alone: `false` makes it a plain
    /// backend (no admission control, an unbounded FIFO, work for callers who left finished)
    /// even behind a protected layer — `spillway demo`'s backend behind the proxy. Default: the
    /// scenario's.
    #[serde(default)]
    pub protected: Option<bool>,
    /// Admission control (ignored when unprotected).
    #[serde(default)]
    pub admission: AdmissionSettings,
    /// Admit with `spillway proxy`'s zero-config admission (limit, queue, shed thresholds and
    /// the rest, taken whole from `spillway_core::preset::proxy_default()`) instead of
    /// `admission`. Default false.
    #[serde(default)]
    pub proxy_admission: bool,
    /// Per-customer quotas (ignored when unprotected).
    #[serde(default)]
    pub quota: QuotaSettings,
}

/// A fault injected at a point in simulated time.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum FaultConfig {
    /// One task is lost (removed from balancing; its in-flight requests fail).
    TaskDown {
        /// Layer name.
        layer: String,
        /// Task index.
        task: u32,
        /// Start, s.
        at_s: f64,
        /// Duration, s.
        for_s: f64,
    },
    /// Every task of a zone is lost.
    ZoneDown {
        /// Layer name.
        layer: String,
        /// Zone index.
        zone: u32,
        /// Start, s.
        at_s: f64,
        /// Duration, s.
        for_s: f64,
    },
    /// Every task of the layer works at `factor` of its speed (0.5 = half capacity).
    Capacity {
        /// Layer name.
        layer: String,
        /// Remaining capacity, `(0, 1]`... or above 1 for a boost.
        factor: f64,
        /// Start, s.
        at_s: f64,
        /// Duration, s.
        for_s: f64,
    },
    /// A slow dependency: every request of the layer waits `extra_ms` after its local work
    /// (holding its slot, not a worker).
    Slow {
        /// Layer name.
        layer: String,
        /// Added latency, ms.
        extra_ms: f64,
        /// Start, s.
        at_s: f64,
        /// Duration, s.
        for_s: f64,
    },
}

/// A variant: the same scenario with some settings overridden, run side by side.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VariantConfig {
    /// Name (legend, table row).
    pub name: String,
    /// Overrides the scenario's `protected`.
    #[serde(default)]
    pub protected: Option<bool>,
    /// Overrides every client's and layer's `retry`.
    #[serde(default)]
    pub retry: Option<RetryKind>,
    /// Overrides every client's `retry` (after `retry`).
    #[serde(default)]
    pub client_retry: Option<RetryKind>,
    /// Overrides every layer's `retry` (after `retry`).
    #[serde(default)]
    pub layer_retry: Option<RetryKind>,
    /// `false` removes every layer's quotas.
    #[serde(default)]
    pub quotas: Option<bool>,
}

/// A whole scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Name (`spillway sim NAME`).
    pub name: String,
    /// What it shows.
    #[serde(default)]
    pub description: String,
    /// PRNG seed. Default 1.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Offering window, s (arrivals stop after it; in-flight requests then finish).
    pub duration_s: f64,
    /// Admission control on every layer (else: unbounded FIFO, work for callers that left is
    /// still done). Default true.
    #[serde(default = "yes")]
    pub protected: bool,
    /// Client groups.
    #[serde(rename = "client")]
    pub clients: Vec<ClientConfig>,
    /// Layers, top (called by clients) first.
    #[serde(rename = "layer")]
    pub layers: Vec<LayerConfig>,
    /// Faults.
    #[serde(default, rename = "fault")]
    pub faults: Vec<FaultConfig>,
    /// Shards the fleet is simulated in, one thread each: 1 (the default) is one event loop;
    /// more split the tasks and client instances between event loops that advance together in
    /// windows of the smallest `network_ms`, which every layer must then have (> 0). Results
    /// depend on it (each shard draws its own random streams) and never on the machine.
    #[serde(default = "one")]
    pub shards: u32,
    /// Variants; none = one run of the scenario as written.
    #[serde(default, rename = "variant")]
    pub variants: Vec<VariantConfig>,
}

fn default_criticality() -> String {
    "CRITICAL".to_owned()
}
fn default_timeout_ms() -> f64 {
    1000.0
}
fn default_retry() -> RetryKind {
    RetryKind::Throttled
}
fn default_attempts() -> u32 {
    3
}
fn default_backoff_ms() -> f64 {
    25.0
}
fn default_backoff_max_ms() -> f64 {
    1000.0
}
fn one() -> u32 {
    1
}
fn default_k() -> f64 {
    2.0
}
fn default_min_rps() -> f64 {
    1.0
}
fn default_shed_thresholds() -> Vec<f64> {
    vec![0.8, 0.9, 1.0]
}
fn default_shed_ramp() -> f64 {
    0.1
}
fn default_headroom() -> [f64; 4] {
    spillway_core::limiter::DEFAULT_HEADROOM.0
}
fn default_burst_ms() -> f64 {
    1000.0
}
fn default_seed() -> u64 {
    1
}
fn yes() -> bool {
    true
}

/// The core's shed configuration for these settings.
pub(crate) fn shed_config(a: &AdmissionSettings) -> spillway_core::shed::ShedConfig {
    let mut thresholds = spillway_core::PerCriticality([None; Criticality::COUNT]);
    for (c, t) in Criticality::ALL.iter().zip(&a.shed_thresholds) {
        thresholds[*c] = Some(*t);
    }
    spillway_core::shed::ShedConfig {
        thresholds,
        ramp: a.shed_ramp,
    }
}

/// The limit a layer runs with: the configured one, or fixed at `workers`.
pub(crate) fn limit_config(l: &LayerConfig) -> LimitConfig {
    l.admission
        .limit
        .clone()
        .unwrap_or(LimitConfig::Fixed(FixedConfig {
            limit: l.workers as usize,
        }))
}
