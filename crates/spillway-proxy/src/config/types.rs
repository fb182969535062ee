//! Configuration types and their defaults (documented key by key in `CONFIG.md`).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use spillway_core::controller::AdmissionConfig;
use spillway_core::retry::RetryConfig;
use spillway_core::throttle::ThrottleConfig;
use spillway_core::Criticality;

use crate::tls::{TlsConfig, UpstreamTlsConfig};

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProxyConfig {
    /// The client-facing listener.
    pub listen: ListenConfig,
    /// The service's tasks.
    pub upstream: UpstreamConfig,
    /// The admission controller (spillway-core's `AdmissionConfig`).
    pub admission: AdmissionConfig,
    /// Who is who and how critical (trust, customers, health paths, defaults).
    pub classify: ClassifyConfig,
    /// Load signals beyond latency and queue time.
    pub signals: SignalsConfig,
    /// Routes, first match wins.
    pub routes: Vec<RouteConfig>,
    /// The admin listener ([`AdminConfig`](super::AdminConfig), documented there).
    pub admin: super::AdminConfig,
    /// Request target and header-name hygiene before routing (`request.rs`).
    pub request: super::RequestConfig,
    /// Leaving on SIGTERM ([`ShutdownConfig`](super::ShutdownConfig), documented there).
    pub shutdown: super::ShutdownConfig,
    /// The access log ([`LogConfig`](super::LogConfig), documented there).
    pub log: super::LogConfig,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            listen: ListenConfig::default(),
            upstream: UpstreamConfig::default(),
            admission: default_admission(),
            classify: ClassifyConfig::default(),
            signals: SignalsConfig::default(),
            routes: Vec::new(),
            admin: super::AdminConfig::default(),
            request: super::RequestConfig::default(),
            shutdown: super::ShutdownConfig::default(),
            log: super::LogConfig::default(),
        }
    }
}

/// The zero-config admission default: spillway-core's proxy preset
/// ([`spillway_core::preset::proxy_default`], i.e. [`AdmissionConfig::zero_config`]), the same
/// policy `spillway-tower` gets from `AdmissionConfig::default()` (its documentation says what
/// it does and why; CONFIG.md lists the values).
pub fn default_admission() -> AdmissionConfig {
    spillway_core::preset::proxy_default().admission
}

/// The client-facing listener.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ListenConfig {
    /// Address to listen on. Default `127.0.0.1:8080`.
    pub address: SocketAddr,
    /// Open client connections at most; at the cap the proxy stops accepting (the kernel's
    /// backlog holds the rest). Default 10 000.
    pub max_connections: usize,
    /// A client must send its request head within this. Default 10 000 ms.
    pub header_read_timeout_ms: u64,
    /// A client connection between requests (HTTP/1.1 keep-alive, HTTP/2 with no stream open)
    /// is closed after this long (HTTP/2 gracefully, with GOAWAY), or at once while the
    /// connection cap is reached. Default 75 000 ms: longer than the upstream pool's
    /// `idle_timeout_ms`, so that when one proxy sends to another, the sender (the side that
    /// would reuse the connection) closes it first.
    pub idle_timeout_ms: u64,
    /// The idle timeout of an HTTP/1.1 client connection at full pressure: with
    /// `max_connections` open, or idle while the proxy refused requests for its own overload
    /// (since it went idle, or in the second before). Between `idle_pressure_from_pct` and the cap it is
    /// scaled linearly from `idle_timeout_ms` down to this (`progress::pressure`). Default
    /// 2 000 ms; at or above `idle_timeout_ms`, no scaling.
    pub idle_timeout_min_ms: u64,
    /// Open connections, in % of `max_connections`, from which the HTTP/1.1 idle timeout is
    /// scaled down towards `idle_timeout_min_ms`. Default 50.
    pub idle_pressure_from_pct: u32,
    /// A client that takes no byte of its response for this long is cut (counted as
    /// `send_timeout`). Default 60 000 ms.
    pub send_timeout_ms: u64,
    /// A client that sends no byte of a request body the upstream is waiting for, for this
    /// long, is cut (counted as `body_timeout`). Default 60 000 ms.
    pub body_read_timeout_ms: u64,
    /// Largest request head (HTTP/1.1 read buffer; HTTP/2 header list) in bytes; larger → 431.
    /// Default 65 536.
    pub max_header_bytes: usize,
    /// Requests held at once, from a head read to the answer's head (queued, waiting for an
    /// upstream slot or for the upstream's answer), all connections and threads together;
    /// past it a request is answered 503 at once (`forward::in_progress`). Default 4 096.
    pub max_requests_in_progress: usize,
    /// TLS (with the `tls` cargo feature): certificate chain and key, PEM files.
    pub tls: Option<TlsConfig>,
    /// Data-plane threads, each with its own single-threaded runtime, `SO_REUSEPORT` listener
    /// and upstream connections (`spillway proxy` only; in-process `run::start` serves on the
    /// caller's runtime). Default: one per available CPU (`std::thread::available_parallelism`,
    /// which honours cgroup CPU quotas).
    pub threads: usize,
}

/// One data-plane thread per available CPU (1 when the count cannot be read).
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

impl Default for ListenConfig {
    fn default() -> Self {
        ListenConfig {
            address: SocketAddr::from(([127, 0, 0, 1], 8080)),
            max_connections: 10_000,
            header_read_timeout_ms: 10_000,
            idle_timeout_ms: 75_000,
            idle_timeout_min_ms: 2_000,
            idle_pressure_from_pct: 50,
            send_timeout_ms: 60_000,
            body_read_timeout_ms: 60_000,
            max_header_bytes: 65_536,
            max_requests_in_progress: 4_096,
            tls: None,
            threads: default_threads(),
        }
    }
}

/// Which HTTP version to speak to the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamProtocol {
    /// The client's own version (HTTP/2 in → h2c out). Default.
    #[default]
    Auto,
    /// Always HTTP/1.1.
    Http1,
    /// Always HTTP/2 cleartext (prior knowledge).
    Http2,
}

/// `host:port` → an authority, if it is one (how `upstream.addresses` are read, by validation
/// and by the pool alike).
pub fn parse_authority(s: &str) -> Option<http::uri::Authority> {
    let a: http::uri::Authority = s.parse().ok()?;
    a.port_u16()?;
    if a.host().is_empty() || s.contains('@') {
        return None;
    }
    Some(a)
}

/// The service's tasks and how they are called.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamConfig {
    /// `host:port` of each task. Default `["127.0.0.1:9000"]`.
    pub addresses: Vec<String>,
    /// HTTP version to the upstream. Default `auto`.
    pub protocol: UpstreamProtocol,
    /// TCP connect timeout. Default 2 000 ms: past Linux's first SYN retransmission at 1 s
    /// (RFC 6298's initial RTO), so one SYN dropped by a task's full accept queue costs a
    /// second, not the request.
    pub connect_timeout_ms: u64,
    /// Time to the response head; beyond → 504. Default 30 000 ms.
    pub request_timeout_ms: u64,
    /// An upstream that sends no byte of a response body for this long is cut (counted as
    /// `upstream_timeout`). Default 60 000 ms.
    pub response_body_timeout_ms: u64,
    /// Requests in flight to one task at most (HTTP/1.1: connections; HTTP/2: streams).
    /// Default 4 096, as `listen.max_requests_in_progress`: a backstop, not the capacity the
    /// admission limit finds. At 256, one task with 1,000 workers × 500 ms offered 0.9 × its
    /// capacity ran at most 256 at once, and the zero-config proxy served 27 % of what the
    /// unprotected task served (`bench/results/cold-start-issue28.md`).
    pub max_requests_per_task: usize,
    /// Longest wait for one of those slots before answering 503. Default 1 000 ms.
    pub pool_wait_timeout_ms: u64,
    /// A request whose caller went away (or whose deadline ran out) while its task worked on
    /// it keeps its admission slot and its request slot until the task answers, within
    /// `request_timeout_ms`: the task is still doing the work, and the limit must count it.
    /// `false` cuts the exchange at once (HTTP/2: RST_STREAM; HTTP/1.1: the connection is
    /// closed) and frees both, for upstreams that stop their work when told. Default true.
    pub hold_abandoned: bool,
    /// Idle upstream connections kept per task on each data-plane thread. Default 256: a
    /// connection the proxy was allowed to use is kept until
    /// `idle_timeout_ms` instead of being closed after a burst and opened again at the next one
    /// (at 32, 7,400 req/s, whose bursts reach 40–120 in flight, opened 328–998 connections per
    /// 6 s instead of 121–232, and the zero-config proxy's p99 was 29.8–113.9 ms with 2,000–5,450
    /// requests refused instead of 4.5–15.5 ms and 0–69 — bench/overhead/p99-sched.sh,
    /// bench/results/proxy-overhead.md "Fourth round").
    pub max_idle_per_task: usize,
    /// Idle upstream connections are closed after this. Default 60 000 ms.
    pub idle_timeout_ms: u64,
    /// Request bodies up to this size are buffered so they can be retried; larger ones are
    /// streamed and never retried. Default 65 536.
    pub retry_buffer_bytes: usize,
    /// All request bodies buffered for retries at once, across every connection and thread,
    /// take at most this many bytes; a body that would take more is streamed instead (and so
    /// never retried). Default 67 108 864 (64 MiB: 1,024 bodies of the default 64 KiB).
    pub retry_buffer_total_bytes: usize,
    /// Client-side adaptive throttle per task (spillway-core `ThrottleConfig`).
    pub throttle: ThrottleConfig,
    /// Retries of overload refusals and connection failures (spillway-core `RetryConfig`).
    pub retry: RetryConfig,
    /// Passive outlier ejection.
    pub ejection: EjectionConfig,
    /// Active health checks.
    pub health_check: HealthCheckConfig,
    /// TLS to the tasks (with the `tls` cargo feature). Default none: plaintext.
    pub tls: Option<UpstreamTlsConfig>,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            addresses: vec!["127.0.0.1:9000".into()],
            protocol: UpstreamProtocol::Auto,
            connect_timeout_ms: 2_000,
            // The simulator reads the same figure from core's preset.
            request_timeout_ms: u64::try_from(
                spillway_core::preset::proxy_default()
                    .request_timeout
                    .as_millis(),
            )
            .unwrap_or(u64::MAX),
            response_body_timeout_ms: 60_000,
            max_requests_per_task: 4_096,
            pool_wait_timeout_ms: 1_000,
            hold_abandoned: true,
            max_idle_per_task: 256,
            idle_timeout_ms: 60_000,
            retry_buffer_bytes: 65_536,
            retry_buffer_total_bytes: 64 << 20,
            throttle: default_throttle(),
            retry: RetryConfig::default(),
            ejection: EjectionConfig::default(),
            health_check: HealthCheckConfig::default(),
            tls: None,
        }
    }
}

/// The per-task client throttle's default: core's proxy preset
/// ([`spillway_core::preset::ProxyPreset::throttle`] says why its floor of 1 request/s), which
/// the simulator's sweep models too. Requests still in flight count neither as refused nor as
/// accepted (spillway-core's throttle leaves outstanding requests out); before they did, a
/// fresh proxy's burst of slow requests was refused locally although the upstream refused
/// nothing (`tests/proxy_throttle.rs`: 8 concurrent 0.8 s requests, 6 throttled).
pub fn default_throttle() -> ThrottleConfig {
    spillway_core::preset::proxy_default().throttle
}

/// Passive outlier ejection (Envoy's `consecutive_5xx` detector, simplified).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EjectionConfig {
    /// Consecutive failures (connection errors, 5xx, overload refusals) that eject a task.
    /// 0 disables ejection. Default 5 (Envoy `consecutive_5xx` default).
    pub consecutive_failures: u32,
    /// First ejection lasts this; each repeated ejection doubles it up to `max_ms`.
    /// Default 30 000 ms (Envoy `base_ejection_time`).
    pub base_ms: u64,
    /// Longest ejection. Default 300 000 ms (Envoy `max_ejection_time`).
    pub max_ms: u64,
    /// At most this fraction of tasks ejected at once (one task may always be ejected when
    /// there are two or more). Default 0.5 (Envoy `max_ejection_percent` is 10 %; a sidecar
    /// fleet is often 2–5 tasks, where 10 % would eject nothing).
    pub max_fraction: f64,
}

impl Default for EjectionConfig {
    fn default() -> Self {
        EjectionConfig {
            consecutive_failures: 5,
            base_ms: 30_000,
            max_ms: 300_000,
            max_fraction: 0.5,
        }
    }
}

/// Active health checks, at a rate proportional to each task's traffic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HealthCheckConfig {
    /// Off by default (passive ejection needs no extra traffic).
    pub enabled: bool,
    /// Path requested with GET; 2xx = healthy. Default `/healthz`.
    pub path: String,
    /// One check per `per_requests` requests sent to the task:
    /// interval = clamp(per_requests / request_rate, min_interval, max_interval). Default 1000.
    pub per_requests: f64,
    /// Shortest interval. Default 1 000 ms.
    pub min_interval_ms: u64,
    /// Longest interval (idle or ejected tasks are checked at least this often). Default 30 000 ms.
    pub max_interval_ms: u64,
    /// A check slower than this failed. Default 2 000 ms.
    pub timeout_ms: u64,
}

impl Default for HealthCheckConfig {
    fn default() -> Self {
        HealthCheckConfig {
            enabled: false,
            path: "/healthz".into(),
            per_requests: 1000.0,
            min_interval_ms: 1_000,
            max_interval_ms: 30_000,
            timeout_ms: 2_000,
        }
    }
}

/// Where the `host_cpu` signal reads CPU use from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum HostCpuSource {
    /// The cgroup when a CPU quota applies to this process (a container with a limit), else
    /// `/proc/stat`. Default.
    #[default]
    Auto,
    /// The node's `/proc/stat`: every CPU of the machine, every tenant.
    ProcStat,
    /// This process's cgroup: its CPU time over its quota (or over its CPUs without one).
    Cgroup,
}

/// Where a request's customer comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum CustomerFrom {
    /// The `x-spillway-customer` header, from trusted sources only. Default.
    #[default]
    Header,
    /// An API key header looked up in `api_keys` (honoured from anyone: the key is the
    /// credential).
    ApiKey,
}

/// Classification defaults and trust.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClassifyConfig {
    /// CIDRs whose criticality and customer headers are honoured. Default none.
    pub trusted: Vec<String>,
    /// Criticality when no route matches and no trusted header says. Default `CRITICAL`.
    pub default_criticality: Criticality,
    /// Cost units per request when the route gives none. Default 1.0.
    pub default_cost: f64,
    /// Customer charged when none is identified. Default `default`.
    pub default_customer: String,
    /// Customer source. Default `header`.
    pub customer_from: CustomerFrom,
    /// Header carrying the API key (with `customer_from = "api_key"`). Default `x-api-key`.
    pub api_key_header: String,
    /// API key → customer.
    pub api_keys: BTreeMap<String, String>,
    /// Health-check paths (exact match): never refused, served first. Default `["/healthz"]`.
    pub health_paths: Vec<String>,
}

impl Default for ClassifyConfig {
    fn default() -> Self {
        ClassifyConfig {
            trusted: Vec::new(),
            default_criticality: Criticality::default(),
            default_cost: 1.0,
            default_customer: "default".into(),
            customer_from: CustomerFrom::Header,
            api_key_header: "x-api-key".into(),
            api_keys: BTreeMap::new(),
            health_paths: vec!["/healthz".into()],
        }
    }
}

/// Extra load signals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SignalsConfig {
    /// This process's CPU use vs its cgroup/host allowance. Default false.
    pub process_cpu: bool,
    /// The CPU utilisation of the host — or, in a container with a CPU limit, of the
    /// container — sampled every 250 ms (Linux). Default false.
    pub host_cpu: bool,
    /// Where `host_cpu` reads: `auto` (default: the cgroup when a CPU quota applies to this
    /// process, else `/proc/stat`), `proc_stat` or `cgroup`.
    pub host_cpu_source: HostCpuSource,
    /// Read ORCA `endpoint-load-metrics` from responses (mean of the tasks'
    /// `application_utilization`, else `cpu_utilization`). Default true.
    pub orca: bool,
    /// A report older than this is ignored. Default 1 000 ms.
    ///
    /// Why short: reports arrive only on responses, so when the proxy sheds everything a high
    /// reading keeps being trusted — and keeps everything shed — until it ages out, however soon
    /// the upstream drained (SRE ch. 21 wants recovery on its own; the demo's target is 2 s).
    /// A report is itself an average over the last second or two of the upstream's work (the
    /// demo backend's window), so one older than that says little about the upstream now.
    pub orca_max_age_ms: u64,
    /// Which ORCA metrics are a task's utilisation: the largest of these a report carries
    /// (`cpu_utilization`, `mem_utilization`, `application_utilization`, `utilization.<key>`,
    /// `named_metrics.<key>`). Empty (the default): `application_utilization`, else
    /// `cpu_utilization`.
    pub orca_metrics: Vec<String>,
    /// Read `x-spillway-cost` from responses as the request's actual cost (quota accounting).
    /// Default true.
    pub cost_header: bool,
}

impl Default for SignalsConfig {
    fn default() -> Self {
        SignalsConfig {
            process_cpu: false,
            host_cpu: false,
            host_cpu_source: HostCpuSource::Auto,
            orca: true,
            orca_max_age_ms: 1_000,
            orca_metrics: Vec::new(),
            cost_header: true,
        }
    }
}

/// One route: a matcher and what matching requests are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Operation name (metric label, status key). Required, unique.
    pub name: String,
    /// Methods matched; empty = any. Default any.
    #[serde(default)]
    pub methods: Vec<String>,
    /// Path: a prefix (`/api/`), or a glob when it contains `*` (`*` = within one segment,
    /// `**` = any depth). Default `/` (everything).
    #[serde(default = "default_path")]
    pub path: String,
    /// Header name → exact value, all required. Default none.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Criticality for callers that may not (untrusted) or do not say. Default: the classify
    /// default.
    #[serde(default)]
    pub criticality: Option<Criticality>,
    /// Cost units per request. Default: the classify default.
    #[serde(default)]
    pub cost: Option<f64>,
    /// Graceful degradation.
    #[serde(default)]
    pub degrade: Option<DegradeConfig>,
}

fn default_path() -> String {
    "/".into()
}

/// What a route does when the proxy is loaded past `threshold`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DegradeConfig {
    /// Utilisation (0..=10) at or above which the degraded mode engages. Default 0.9.
    #[serde(default = "default_degrade_threshold")]
    pub threshold: f64,
    /// Send to this upstream path instead (query kept). Exclusive with `status`/`body`.
    #[serde(default)]
    pub upstream_path: Option<String>,
    /// Static response status. Default 200 when `body` is set.
    #[serde(default)]
    pub status: Option<u16>,
    /// Static response body.
    #[serde(default)]
    pub body: Option<String>,
    /// Static response content type. Default `text/plain; charset=utf-8`.
    #[serde(default)]
    pub content_type: Option<String>,
}

fn default_degrade_threshold() -> f64 {
    0.9
}

/// Per-instance values that replace the file's (`spillway proxy --config FILE --listen ADDR
/// --admin ADDR`), at start and on every reload, so several instances of a fleet can run from
/// one file on one host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Overrides {
    /// Replaces `[listen] address`.
    pub listen: Option<std::net::SocketAddr>,
    /// Replaces `[admin] listen`.
    pub admin: Option<std::net::SocketAddr>,
}

impl Overrides {
    /// Writes the overridden values into `cfg`.
    pub fn apply(&self, cfg: &mut ProxyConfig) {
        if let Some(a) = self.listen {
            cfg.listen.address = a;
        }
        if let Some(a) = self.admin {
            cfg.admin.listen = a;
        }
    }
}
