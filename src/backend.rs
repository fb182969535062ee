//! `spillway backend`: a demo service with the overload pathology built in — `c` workers, an
//! unbounded FIFO queue that serves callers who have left, optional slowdown under pressure and a
//! capacity drop — for demos, tests and users' own experiments (loopback only).
//!
//! Why a thin layer: the backend is `spillway_load::backend`, started in-process by the demo and
//! the tests; this module only turns flags into a [`BackendConfig`].

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, ValueEnum};
use spillway_load::backend::{
    self, BackendConfig, BackendError, CapacityDrop, CpuMode, ServiceTime, Slowdown,
};
use spillway_load::units::{loopback_addr, parse_duration};

use crate::UsageError;

/// Service-time distribution.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Dist {
    /// Always --service-time.
    Constant,
    /// Exponential with mean --service-time.
    Exponential,
    /// Uniform on mean × [1 − spread, 1 + spread].
    Uniform,
    /// Log-normal with mean --service-time and shape --sigma.
    Lognormal,
    /// Two constant modes with mean --service-time: a share --slow-share takes --slow-factor × as long as the rest.
    Bimodal,
}

/// How service time is spent.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Cpu {
    /// Sleep: capacity set by --workers, not by the machine's cores.
    Sleep,
    /// Burn real CPU time (busy-spin on a blocking thread).
    Spin,
}

/// `spillway backend` arguments.
#[derive(Debug, Args)]
pub struct BackendArgs {
    /// Address to listen on (loopback only; port 0 picks a free one).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080", value_parser = loopback_addr)]
    listen: SocketAddr,
    /// Requests served at once (c). Capacity = workers / service time.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    workers: u32,
    /// Mean service time per request.
    #[arg(long, value_name = "DURATION", default_value = "10ms", value_parser = parse_duration, allow_hyphen_values = true)]
    service_time: Duration,
    /// Service-time distribution.
    #[arg(long, value_enum, default_value = "exponential")]
    dist: Dist,
    /// Uniform distribution's half-width as a fraction of the mean (0..=1).
    #[arg(long, default_value_t = 0.5, allow_negative_numbers = true)]
    spread: f64,
    /// Log-normal shape: standard deviation of the underlying normal (0 < sigma <= 5).
    #[arg(long, default_value_t = 0.5, allow_negative_numbers = true)]
    sigma: f64,
    /// Bimodal distribution's share of slow requests (0..=1).
    #[arg(long, default_value_t = 0.05, allow_negative_numbers = true)]
    slow_share: f64,
    /// Bimodal distribution's slow mode, as a multiple of the fast one (1..=1000).
    #[arg(long, default_value_t = 20.0, allow_negative_numbers = true)]
    slow_factor: f64,
    /// Sleep (default) or burn CPU for the service time.
    #[arg(long, value_enum, default_value = "sleep")]
    cpu: Cpu,
    /// Pressure slowdown: service time × (1 + alpha × max(0, in-flight − threshold)); 0 = off.
    #[arg(
        long,
        value_name = "ALPHA",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    slowdown_alpha: f64,
    /// Requests held before the pressure slowdown starts.
    #[arg(long, value_name = "N", default_value_t = 0)]
    slowdown_threshold: usize,
    /// Start of a capacity drop, from the backend's start (needs --drop-for).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true, requires = "drop_for")]
    drop_at: Option<Duration>,
    /// Length of the capacity drop (needs --drop-at).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true, requires = "drop_at")]
    drop_for: Option<Duration>,
    /// Workers serving during the drop [default: a quarter of --workers, at least 1].
    #[arg(long, value_name = "N")]
    drop_workers: Option<usize>,
    /// Service-time multiplier during the drop (>= 1).
    #[arg(
        long,
        value_name = "X",
        default_value_t = 1.0,
        allow_negative_numbers = true
    )]
    drop_slowdown: f64,
    /// Seed of the service-time draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Stop after this long [default: run until Ctrl-C].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true)]
    duration: Option<Duration>,
}

/// Runs `spillway backend` until Ctrl-C or --duration.
pub fn run(args: &BackendArgs) -> Result<()> {
    let workers = args.workers as usize;
    let cfg = BackendConfig {
        listen: args.listen,
        workers,
        mean: args.service_time,
        distribution: match args.dist {
            Dist::Constant => ServiceTime::Constant,
            Dist::Exponential => ServiceTime::Exponential,
            Dist::Uniform => ServiceTime::Uniform {
                spread: args.spread,
            },
            Dist::Lognormal => ServiceTime::LogNormal { sigma: args.sigma },
            Dist::Bimodal => ServiceTime::Bimodal {
                slow_share: args.slow_share,
                slow_factor: args.slow_factor,
            },
        },
        cpu: match args.cpu {
            Cpu::Sleep => CpuMode::Sleep,
            Cpu::Spin => CpuMode::Spin,
        },
        slowdown: (args.slowdown_alpha != 0.0).then_some(Slowdown {
            alpha: args.slowdown_alpha,
            threshold: args.slowdown_threshold,
        }),
        drop: match (args.drop_at, args.drop_for) {
            (Some(at), Some(duration)) => Some(CapacityDrop {
                at,
                duration,
                workers: args.drop_workers.unwrap_or((workers / 4).max(1)),
                slowdown: args.drop_slowdown,
            }),
            _ => None,
        },
        seed: args.seed,
    };
    let capacity = cfg.capacity_rps();
    let result = backend::serve_blocking(cfg, args.duration, |h| {
        // A closed stdout must not stop the backend: the banner is best effort.
        let _ = crate::load::emit(&format!(
            "spillway backend listening on http://{} — {} workers, capacity ≈ {:.0} requests/s \
             (GET /healthz, /stats); Ctrl-C to stop\n",
            h.local_addr(),
            workers,
            capacity
        ));
    });
    match result {
        Ok(stats) => {
            crate::load::emit(&format!(
                "served {} of {} accepted ({} for callers who had already left)\n",
                stats.served, stats.accepted, stats.served_abandoned
            ))?;
            Ok(())
        }
        // A setting out of range names its flag: exit 2 like clap's own errors.
        Err(BackendError::Config(e)) => Err(UsageError(e.to_string()).into()),
        Err(e) => Err(e.into()),
    }
}
