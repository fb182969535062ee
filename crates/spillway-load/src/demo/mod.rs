//! `spillway demo`: the central claim of SRE book ch. 21 and the AWS Builders' Library article
//! "Using load shedding to avoid overload", measured on this machine in one command.
//!
//! Why these three runs: the claim is a comparison. The same backend (with the overload
//! pathology of [`crate::backend`]), the same open-loop load with retrying clients, run
//! 1. **unprotected** — clients straight to the backend;
//! 2. **spillway** — through `spillway proxy` in its zero-config form (adaptive concurrency
//!    limit; no capacity figure is given to it), trusting the generator's criticality and
//!    customer headers because it runs on loopback;
//! 3. **spillway+throttle** — the same, with clients that also throttle themselves adaptively
//!    (one throttle per criticality; a 10 s window, the scenario being compressed in time) and
//!    retry within a budget.
//!
//! The scenario, in multiples of the backend's capacity `C` (workers / mean service time): a
//! warm-up at 0.5 C; a ramp to 10 C climbed as a staircase (1, 2, 5, 10 C, each reached by a
//! linear rise and held for a few seconds); a calm at 0.5 C (recovery); a sudden jump to 10 C;
//! a final calm at 0.5 C (recovery). Two customers, each its own open-loop stream: `good` sends
//! a steady 0.2 C (half CRITICAL, half SHEDDABLE_PLUS) throughout — well within capacity
//! whatever the other does — and `noisy`, the misbehaving batch client, makes up the rest of the
//! offered load: it is the one that ramps and jumps. 5% of `noisy`'s requests are CRITICAL and
//! the rest SHEDDABLE, so CRITICAL traffic grows with the surge (0.12 C at 0.5 ×, 0.59 C at
//! 10 ×) while staying below capacity, as the issue's target "CRITICAL success ≥ 99.9% while
//! CRITICAL traffic is below capacity" requires; CRITICAL and SHEDDABLE_PLUS together peak at
//! 0.69 C. Without it CRITICAL would be a steady 0.1 C, which any limiter serves.
//!
//! Why a staircase and a low-variance service time: the table compares goodput with a 95% bar,
//! so its sampling noise must be well below 5%. With exponential service a 4-worker backend
//! completes 100 ± 10 requests in a second (σ 10%) and 200 ± 14 in two (σ 7%): a single
//! second measures luck. Each level is therefore held and averaged over its seconds after the
//! first (the settling one), and service times are uniform on 20–60 ms (coefficient of
//! variation 0.29; 200 ± 4 completions in two seconds, σ 2%). The unprotected collapse does not
//! depend on the distribution: its unbounded FIFO queue serves callers who have left.

mod merge;
pub mod simulated;
mod table;

use std::net::SocketAddr;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use spillway_core::controller::RefusalReason;
use spillway_core::Criticality;

use crate::backend::{Backend, BackendConfig, ServiceTime};
use crate::load::{
    Behaviour, LoadConfig, LoadGenerator, Mix, Progress, RateShape, Stage, TrafficClass,
};
use crate::report::RunReport;

pub use merge::{merge, merge_by_title};
pub use table::{pct_of, render_table, share, summarise, DemoRow};

/// How one run reaches the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Clients straight to the backend.
    Unprotected,
    /// Through the proxy.
    Spillway,
    /// Through the proxy, with throttling clients.
    SpillwayThrottled,
}

impl Mode {
    /// Every mode, in the order they run.
    pub const ALL: [Mode; 3] = [Mode::Unprotected, Mode::Spillway, Mode::SpillwayThrottled];

    /// The run's title.
    pub fn title(self) -> &'static str {
        match self {
            Mode::Unprotected => "unprotected",
            Mode::Spillway => "spillway",
            Mode::SpillwayThrottled => "spillway+throttle",
        }
    }

    /// The mode titled `s` (see [`title`](Self::title)).
    pub fn parse(s: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.title() == s)
    }
}

/// One open-loop stream of the scenario: a customer's own rate shape and traffic mix.
#[derive(Debug, Clone)]
pub struct Stream {
    /// The customer it sends for (also the stream's title in its own report).
    pub customer: &'static str,
    /// Offered requests/s over time.
    pub shape: RateShape,
    /// What its requests carry.
    pub mix: Mix,
    /// Added to the demo's seed, so the two streams' arrivals are independent.
    pub seed_offset: u64,
}

/// The demo's settings.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// Backend workers.
    pub workers: usize,
    /// Backend mean service time.
    pub service: Duration,
    /// Backend service-time distribution (see the module docs).
    pub distribution: ServiceTime,
    /// Warm-up at 0.5 × capacity.
    pub warm: Duration,
    /// The staircase's levels, multiples of capacity, in order (the last is the jump's too).
    pub levels: Vec<f64>,
    /// Linear rise from one level to the next.
    pub rise: Duration,
    /// How long each level is held (its first second settles, the rest are measured).
    pub hold: Duration,
    /// Calm at 0.5 × after the staircase.
    pub calm: Duration,
    /// Sudden jump to the top level.
    pub jump: Duration,
    /// Calm at 0.5 × after the jump (recovery).
    pub recover: Duration,
    /// Customer `good`'s steady rate as a fraction of capacity (half CRITICAL, half
    /// SHEDDABLE_PLUS).
    pub good_share: f64,
    /// Share of customer `noisy`'s requests that are CRITICAL (the rest are SHEDDABLE).
    pub noisy_critical_share: f64,
    /// Client timeout (from the intended send time).
    pub timeout: Duration,
    /// Attempts per request (naive clients retry up to this).
    pub attempts: u32,
    /// Runs to make.
    pub modes: Vec<Mode>,
    /// Seed.
    pub seed: u64,
    /// Where to serve the proxy's live dashboard while a protected run goes on (`None`: not at
    /// all). If the address is taken, a free loopback port is used instead.
    pub dashboard: Option<SocketAddr>,
}

/// The warm-up's and the calms' level, × capacity.
pub const CALM: f64 = 0.5;

impl DemoConfig {
    /// The full demo: 4 workers × 40 ms (C = 100/s), 34 s per run, about 2 minutes in all.
    pub fn full() -> Self {
        DemoConfig {
            workers: 4,
            service: Duration::from_millis(40),
            distribution: ServiceTime::Uniform { spread: 0.5 },
            warm: Duration::from_secs(3),
            levels: vec![1.0, 2.0, 5.0, 10.0],
            rise: Duration::from_secs(1),
            hold: Duration::from_secs(3),
            calm: Duration::from_secs(4),
            jump: Duration::from_secs(5),
            recover: Duration::from_secs(6),
            good_share: 0.2,
            noisy_critical_share: 0.05,
            timeout: Duration::from_secs(1),
            attempts: 3,
            modes: Mode::ALL.to_vec(),
            seed: 1,
            dashboard: Some(SocketAddr::from(([127, 0, 0, 1], 9901))),
        }
    }

    /// The smoke-test form: 2 workers × 40 ms (C = 50/s), 15 s per run: the same levels with
    /// no rise, held 2 s each.
    pub fn quick() -> Self {
        DemoConfig {
            workers: 2,
            warm: Duration::from_secs(1),
            rise: Duration::ZERO,
            hold: Duration::from_secs(2),
            calm: Duration::from_secs(2),
            jump: Duration::from_secs(2),
            recover: Duration::from_secs(2),
            ..DemoConfig::full()
        }
    }

    /// The backend's capacity, requests/s.
    pub fn capacity(&self) -> f64 {
        self.workers as f64 / self.service.as_secs_f64()
    }

    /// The top level (the ramp's end and the jump), × capacity.
    pub fn top(&self) -> f64 {
        self.levels.last().copied().unwrap_or(CALM)
    }

    /// The total offered load over time (both customers), in multiples of capacity.
    fn stages(&self) -> Vec<(f64, f64, Duration)> {
        let mut out = vec![(CALM, CALM, self.warm)];
        let mut from = CALM;
        for &level in &self.levels {
            if !self.rise.is_zero() {
                out.push((from, level, self.rise));
            }
            out.push((level, level, self.hold));
            from = level;
        }
        let top = self.top();
        out.extend([
            (CALM, CALM, self.calm),
            (top, top, self.jump),
            (CALM, CALM, self.recover),
        ]);
        out
    }

    fn shape_minus(&self, minus: f64) -> RateShape {
        let c = self.capacity();
        RateShape::Stages(
            self.stages()
                .into_iter()
                .map(|(a, b, duration)| Stage {
                    from: (a * c - minus).max(0.0),
                    to: (b * c - minus).max(0.0),
                    duration,
                })
                .collect(),
        )
    }

    /// The total offered-load shape, both customers together (requests/s).
    pub fn shape(&self) -> RateShape {
        self.shape_minus(0.0)
    }

    /// Customer `good`'s steady rate, requests/s.
    pub fn good_rate(&self) -> f64 {
        self.good_share * self.capacity()
    }

    /// The two streams offered at once: `good` (steady; half CRITICAL, half SHEDDABLE_PLUS) and
    /// `noisy` (the rest of [`shape`](Self::shape); [`noisy_critical_share`](Self::noisy_critical_share)
    /// CRITICAL, the rest SHEDDABLE). Their rates add up to `shape()` at every instant.
    pub fn streams(&self) -> Vec<Stream> {
        let class = |c: Criticality, customer: &str, weight: f64| {
            TrafficClass::parse(&format!(
                "criticality={},customer={customer},weight={weight}",
                c.as_str()
            ))
            .unwrap_or_else(|_| TrafficClass::default_class())
        };
        let share = self.noisy_critical_share.clamp(0.0, 1.0);
        let mut noisy = Vec::new();
        if share > 0.0 {
            noisy.push(class(Criticality::Critical, "noisy", share));
        }
        if share < 1.0 {
            noisy.push(class(Criticality::Sheddable, "noisy", 1.0 - share));
        }
        let good = self.good_rate();
        vec![
            Stream {
                customer: "good",
                shape: RateShape::Stages(vec![Stage {
                    from: good,
                    to: good,
                    duration: self.total(),
                }]),
                mix: Mix::new(vec![
                    class(Criticality::Critical, "good", 1.0),
                    class(Criticality::SheddablePlus, "good", 1.0),
                ]),
                seed_offset: 0x600d,
            },
            Stream {
                customer: "noisy",
                shape: self.shape_minus(good),
                mix: Mix::new(noisy),
                seed_offset: 0,
            },
        ]
    }

    /// Length of one run's offering window.
    pub fn total(&self) -> Duration {
        self.stages().iter().map(|s| s.2).sum()
    }

    /// The whole seconds of the run over which goodput at `level` is measured: the warm-up's
    /// (0.5 ×) or the level's hold, without its first second (settling) when it lasts two or
    /// more. `None` for a level the scenario does not hold.
    pub fn level_window(&self, level: f64) -> Option<Range<u64>> {
        self.level_hold(level).map(|w| {
            let skip = u64::from(w.end - w.start >= 2);
            w.start + skip..w.end
        })
    }

    /// All the whole seconds of the first stage held at `level` (the warm-up's for 0.5 ×),
    /// the settling one included. `None` for a level the scenario does not hold.
    pub fn level_hold(&self, level: f64) -> Option<Range<u64>> {
        let mut t = Duration::ZERO;
        for (a, b, d) in self.stages() {
            let (start, end) = (t.as_secs(), (t + d).as_secs());
            t += d;
            if a == b && a == level && end > start {
                return Some(start..end);
            }
        }
        None
    }

    /// The whole seconds of the sudden jump.
    pub fn jump_window(&self) -> Range<u64> {
        let end = self.total() - self.recover;
        (end - self.jump).as_secs()..end.as_secs()
    }

    /// The `--rate` argument of `spillway load` for `shape` (a [`RateShape::Stages`]), so that
    /// bench/peers.sh offers exactly the demo's streams.
    pub fn rate_arg(shape: &RateShape) -> String {
        let RateShape::Stages(stages) = shape else {
            return format!("{}", shape.peak());
        };
        let parts: Vec<String> = stages
            .iter()
            .map(|s| {
                let ms = s.duration.as_millis();
                if s.from == s.to {
                    format!("{}/{ms}ms", s.from)
                } else {
                    format!("{}..{}/{ms}ms", s.from, s.to)
                }
            })
            .collect();
        format!("stages:{}", parts.join(","))
    }

    /// The `--class` arguments of `spillway load` for `mix`.
    pub fn class_args(mix: &Mix) -> Vec<String> {
        mix.classes()
            .iter()
            .map(|c| {
                format!(
                    "criticality={},customer={},weight={}",
                    c.criticality.as_str(),
                    c.customer,
                    c.weight
                )
            })
            .collect()
    }
}

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The backend did not start.
    #[error("backend: {0}")]
    Backend(#[from] crate::backend::BackendError),
    /// The proxy did not start.
    #[error("proxy: {0}")]
    Proxy(String),
    /// The load generator did not start.
    #[error("load: {0}")]
    Load(#[from] crate::load::LoadError),
    /// The async runtime did not start.
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
}

async fn start_proxy(upstream: SocketAddr) -> Result<spillway_proxy::run::Running, DemoError> {
    let mut cfg = spillway_proxy::ProxyConfig::default();
    cfg.listen.address = SocketAddr::from(([127, 0, 0, 1], 0));
    cfg.upstream.addresses = vec![upstream.to_string()];
    // The generator runs on loopback: trust its criticality and customer headers.
    cfg.classify.trusted = vec!["127.0.0.0/8".into(), "::1/128".into()];
    spillway_proxy::config::check(&cfg, "spillway demo")
        .map_err(|e| DemoError::Proxy(e.to_string()))?;
    let state = spillway_proxy::ProxyState::new(cfg, "spillway demo", None)
        .map_err(|e| DemoError::Proxy(e.to_string()))?;
    spillway_proxy::run::start(state, None)
        .await
        .map_err(|e| DemoError::Proxy(e.to_string()))
}

/// The proxy's admin listener (and with it the live dashboard) for one protected run: stopped by
/// sending on the returned channel. Falls back to a free loopback port when `addr` is taken, so
/// a second demo or a running proxy does not stop this one.
async fn start_dashboard(
    state: Arc<spillway_proxy::ProxyState>,
    addr: SocketAddr,
) -> Result<
    (
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ),
    DemoError,
> {
    use spillway_proxy::admin::{AdminConfig, AdminServer};
    let config = |listen| AdminConfig {
        listen,
        ..AdminConfig::default()
    };
    let server = match AdminServer::bind(Arc::clone(&state), config(addr)).await {
        Ok(s) => s,
        Err(_) => AdminServer::bind(state, config(SocketAddr::new(addr.ip(), 0)))
            .await
            .map_err(|e| DemoError::Proxy(format!("dashboard: {e}")))?,
    };
    if let Ok(bound) = server.local_addr() {
        tracing::info!(
            "live dashboard: http://{bound}/  (calculator: http://{bound}/assets/calc.html)"
        );
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.await;
        };
        if let Err(e) = server.serve(shutdown).await {
            tracing::warn!(error = %e, "dashboard stopped");
        }
    });
    Ok((stop, task))
}

/// One run of the scenario in `mode`, on the current runtime: both streams at once, their
/// reports merged (see [`merge`]).
pub async fn run_mode(
    cfg: &DemoConfig,
    mode: Mode,
    progress: bool,
) -> Result<RunReport, DemoError> {
    let backend = Backend::start(BackendConfig {
        workers: cfg.workers,
        mean: cfg.service,
        distribution: cfg.distribution,
        seed: cfg.seed,
        ..BackendConfig::default()
    })
    .await?;
    let proxy = match mode {
        Mode::Unprotected => None,
        Mode::Spillway | Mode::SpillwayThrottled => Some(start_proxy(backend.local_addr()).await?),
    };
    let dashboard = match (&proxy, cfg.dashboard) {
        (Some(p), Some(addr)) => Some(start_dashboard(Arc::clone(&p.state), addr).await?),
        _ => None,
    };
    let target = proxy.as_ref().map_or(backend.local_addr(), |p| p.addr);
    let sampler = proxy.as_ref().map(|p| sample_proxy(Arc::clone(&p.state)));
    let mut generators = Vec::new();
    for stream in cfg.streams() {
        let mut load = LoadConfig::new(target);
        load.title = stream.customer.into();
        load.shape = stream.shape;
        load.duration = cfg.total();
        load.mix = stream.mix;
        load.timeout = cfg.timeout;
        load.retry.max_attempts = cfg.attempts;
        load.seed = cfg.seed.wrapping_add(stream.seed_offset);
        // The scenario compresses minutes into seconds (34 s per run), so the throttle's memory
        // is compressed too: 10 s in 10 buckets instead of SRE ch. 21's two minutes, which
        // would span the whole run and keep throttling long after the surge. (The retry
        // budget's window is 10 s already.)
        load.throttle.window = Duration::from_secs(10);
        load.throttle.buckets = 10;
        // The proxy's client-throttle default (spillway-proxy `default_throttle`): never refuse
        // below 1 request/s over the window, or a fresh client refuses its first requests
        // locally before any answer could arrive (P = (1 − 0) / 2 for the very first one).
        load.throttle.min_requests_per_sec = 1.0;
        load.behaviour = match mode {
            Mode::Unprotected | Mode::Spillway => Behaviour::Naive,
            Mode::SpillwayThrottled => Behaviour::Throttled,
        };
        generators.push(LoadGenerator::new(load)?);
    }
    // One progress bar, on the stream that carries the surge.
    let bar = progress
        .then(|| generators.last())
        .flatten()
        .map(|g| Progress::start(mode.title(), g.live(), cfg.total()));
    let runs = futures_join_all(generators).await?;
    if let Some(bar) = bar {
        bar.finish();
    }
    let mut report = merge(mode.title(), &runs);
    let stats = backend.stats();
    report.set_meta_value("capacity_rps", cfg.capacity());
    report.set_meta_value("backend_served", stats.served);
    report.set_meta_value("backend_served_abandoned", stats.served_abandoned);
    report.set_meta_value("rate", format!("{:?}", cfg.shape()));
    report.set_meta_value("levels", cfg.levels.clone());
    if let (Some(p), Some((stop, task))) = (&proxy, sampler) {
        let _ = stop.send(());
        if let Ok(series) = task.await {
            report.set_meta_value("proxy_limit", series);
        }
        let snap = p.state.runtime().controller.snapshot();
        let refused: serde_json::Map<String, serde_json::Value> = RefusalReason::ALL
            .iter()
            .map(|&r| {
                let by: serde_json::Map<String, serde_json::Value> = Criticality::ALL
                    .iter()
                    .map(|&c| (c.as_str().to_owned(), snap.refused.get(r, c).into()))
                    .collect();
                (r.as_str().to_owned(), by.into())
            })
            .collect();
        report.set_meta_value("proxy_refused", refused);
    }
    if let Some((stop, task)) = dashboard {
        let _ = stop.send(());
        let _ = task.await;
    }
    if let Some(p) = proxy {
        p.shutdown().await;
    }
    backend.shutdown();
    Ok(report)
}

/// Every 100 ms until told to stop: the proxy's concurrency limit, in-flight count, queue
/// length and utilisation, as `[seconds, limit, in_flight, queued, utilisation]` rows (kept in
/// the report's `meta["proxy_limit"]`, so a dip in goodput can be read against the limit).
fn sample_proxy(
    state: Arc<spillway_proxy::ProxyState>,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<serde_json::Value>,
) {
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let start = tokio::time::Instant::now();
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        let mut rows = Vec::new();
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = &mut stopped => break,
            }
            let s = state.runtime().controller.snapshot();
            rows.push(serde_json::json!([
                (start.elapsed().as_secs_f64() * 10.0).round() / 10.0,
                s.limit,
                s.in_flight,
                s.queued,
                (s.utilisation * 100.0).round() / 100.0
            ]));
        }
        serde_json::Value::Array(rows)
    });
    (stop, task)
}

/// Runs every generator at once on the current runtime; their reports in order.
async fn futures_join_all(generators: Vec<LoadGenerator>) -> Result<Vec<RunReport>, DemoError> {
    let tasks: Vec<_> = generators
        .into_iter()
        .map(|g| tokio::spawn(g.run()))
        .collect();
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        match t.await {
            Ok(r) => out.push(r?),
            Err(e) => {
                return Err(DemoError::Runtime(std::io::Error::other(format!(
                    "a load stream stopped: {e}"
                ))))
            }
        }
    }
    Ok(out)
}

/// Runs every mode of `cfg` one after the other on a runtime of its own.
pub fn run_blocking(cfg: &DemoConfig, progress: bool) -> Result<Vec<RunReport>, DemoError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(DemoError::Runtime)?;
    let cfg = Arc::new(cfg.clone());
    runtime.block_on(async move {
        let mut reports = Vec::new();
        for mode in cfg.modes.clone() {
            reports.push(run_mode(&cfg, mode, progress).await?);
            // Let sockets of the previous run close before the next one starts.
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        Ok(reports)
    })
}
