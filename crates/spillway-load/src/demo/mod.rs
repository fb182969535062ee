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
//! warm-up at 0.5 C, a linear ramp 0.5 C → 10 C, a calm at 0.5 C (recovery), a sudden jump to
//! 10 C, and a final calm at 0.5 C (recovery). Two customers: `good` sends CRITICAL and
//! SHEDDABLE_PLUS traffic (10% of requests; CRITICAL is 5%, so it stays below capacity even at
//! 10 C), `noisy` sends the other 90% as SHEDDABLE — the misbehaving batch client.

mod table;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use spillway_core::Criticality;

use crate::backend::{Backend, BackendConfig, ServiceTime};
use crate::load::{
    Behaviour, LoadConfig, LoadGenerator, Mix, Progress, RateShape, Stage, TrafficClass,
};
use crate::report::RunReport;

pub use table::{render_table, summarise, DemoRow, LEVELS};

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
}

/// The demo's settings.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// Backend workers.
    pub workers: usize,
    /// Backend mean service time.
    pub service: Duration,
    /// Phase lengths: warm-up, ramp, calm, jump, calm.
    pub phases: [Duration; 5],
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

impl DemoConfig {
    /// The full demo: 4 workers × 40 ms (C = 100/s), 34 s per run, about 2 minutes in all.
    pub fn full() -> Self {
        DemoConfig {
            workers: 4,
            service: Duration::from_millis(40),
            phases: [3, 16, 5, 5, 5].map(Duration::from_secs),
            timeout: Duration::from_secs(1),
            attempts: 3,
            modes: Mode::ALL.to_vec(),
            seed: 1,
            dashboard: Some(SocketAddr::from(([127, 0, 0, 1], 9901))),
        }
    }

    /// The smoke-test form: 2 workers × 40 ms (C = 50/s), 12 s per run.
    pub fn quick() -> Self {
        DemoConfig {
            workers: 2,
            phases: [1, 5, 2, 2, 2].map(Duration::from_secs),
            ..DemoConfig::full()
        }
    }

    /// The backend's capacity, requests/s.
    pub fn capacity(&self) -> f64 {
        self.workers as f64 / self.service.as_secs_f64()
    }

    /// The offered-load shape.
    pub fn shape(&self) -> RateShape {
        let c = self.capacity();
        let [warm, ramp, calm, jump, calm2] = self.phases;
        let flat = |x: f64, d| Stage {
            from: x * c,
            to: x * c,
            duration: d,
        };
        RateShape::Stages(vec![
            flat(0.5, warm),
            Stage {
                from: 0.5 * c,
                to: 10.0 * c,
                duration: ramp,
            },
            flat(0.5, calm),
            flat(10.0, jump),
            flat(0.5, calm2),
        ])
    }

    /// The traffic mix (see the module docs).
    pub fn mix() -> Mix {
        let class = |c: Criticality, customer: &str, weight: f64| {
            TrafficClass::parse(&format!(
                "criticality={},customer={customer},weight={weight}",
                c.as_str()
            ))
            .unwrap_or_else(|_| TrafficClass::default_class())
        };
        Mix::new(vec![
            class(Criticality::Critical, "good", 1.0),
            class(Criticality::SheddablePlus, "good", 1.0),
            class(Criticality::Sheddable, "noisy", 18.0),
        ])
    }

    fn total(&self) -> Duration {
        self.phases.iter().sum()
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
        eprintln!("live dashboard: http://{bound}/  (calculator: http://{bound}/assets/calc.html)");
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.await;
        };
        if let Err(e) = server.serve(shutdown).await {
            eprintln!("dashboard stopped: {e}");
        }
    });
    Ok((stop, task))
}

/// One run of the scenario in `mode`, on the current runtime.
pub async fn run_mode(
    cfg: &DemoConfig,
    mode: Mode,
    progress: bool,
) -> Result<RunReport, DemoError> {
    let backend = Backend::start(BackendConfig {
        workers: cfg.workers,
        mean: cfg.service,
        distribution: ServiceTime::Exponential,
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
    let mut load = LoadConfig::new(target);
    load.title = mode.title().into();
    load.shape = cfg.shape();
    load.duration = cfg.total();
    load.mix = DemoConfig::mix();
    load.timeout = cfg.timeout;
    load.retry.max_attempts = cfg.attempts;
    load.seed = cfg.seed;
    // The scenario compresses minutes into seconds (34 s per run), so the throttle's memory is
    // compressed too: 10 s in 10 buckets instead of SRE ch. 21's two minutes, which would span
    // the whole run and keep throttling long after the surge. (The retry budget's window is
    // 10 s already.)
    load.throttle.window = Duration::from_secs(10);
    load.throttle.buckets = 10;
    load.behaviour = match mode {
        Mode::Unprotected | Mode::Spillway => Behaviour::Naive,
        Mode::SpillwayThrottled => Behaviour::Throttled,
    };
    let generator = LoadGenerator::new(load)?;
    let bar = progress.then(|| Progress::start(mode.title(), generator.live(), cfg.total()));
    let mut report = generator.run().await?;
    if let Some(bar) = bar {
        bar.finish();
    }
    let stats = backend.stats();
    report.set_meta_value("capacity_rps", cfg.capacity());
    report.set_meta_value("backend_served", stats.served);
    report.set_meta_value("backend_served_abandoned", stats.served_abandoned);
    report.set_meta_value("phases_s", cfg.phases.map(|d| d.as_secs_f64()).to_vec());
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
