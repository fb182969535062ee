//! The backend's settings: workers, service-time distribution, CPU model, slowdown under
//! pressure and the capacity drop.

use std::net::SocketAddr;
use std::time::Duration;

/// The distribution each request's base service time is drawn from (before the request's
/// `cost` multiplier, the pressure slowdown and the capacity drop are applied).
///
/// With `c` workers and mean service time `m`, the backend's capacity is `c / m` requests/s
/// (e.g. 4 workers × 10 ms = 400/s). Exponential service makes a single-worker backend an M/M/1
/// queue, the textbook case `spillway calc` computes (M/M/c; Erlang).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ServiceTime {
    /// Always `mean`.
    Constant,
    /// Exponential with the given mean (memoryless; coefficient of variation 1).
    Exponential,
    /// Uniform on `[mean·(1 − spread), mean·(1 + spread)]`, `spread` in `[0, 1]`.
    Uniform {
        /// Half-width as a fraction of the mean.
        spread: f64,
    },
    /// Log-normal with the given *mean* and shape `sigma` (the standard deviation of the
    /// underlying normal): `μ = ln(mean) − σ²/2`, so the mean stays `mean` while the tail
    /// grows with `sigma` (σ = 1 gives p99 ≈ 6× the median). A common fit for RPC latencies.
    LogNormal {
        /// Shape, `> 0`.
        sigma: f64,
    },
    /// Two constant modes with the given mean: a share `slow_share` of requests takes
    /// `slow_factor` times as long as the rest (e.g. 5% hitting a cold cache 20× slower), so
    /// `fast · (1 − s + s · f) = mean`. The shape of issue 28's matrix (and `spillway sim
    /// --sweep`'s `bimodal`): a rare slow mode inflates the tail but hardly the mean.
    Bimodal {
        /// Share of slow requests, in `[0, 1]`.
        slow_share: f64,
        /// How many times slower the slow mode is, `>= 1`.
        slow_factor: f64,
    },
}

/// How a request's service time is spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CpuMode {
    /// The worker sleeps: capacity is set by the worker count, not by the machine's cores
    /// (the default, so a demo on a 2-core machine measures queueing, not CPU contention).
    #[default]
    Sleep,
    /// The worker busy-spins on a blocking thread until its *thread CPU time* reaches the
    /// service time: real CPU is burnt, and contention for cores stretches wall time as it
    /// would in a CPU-bound service.
    Spin,
}

/// Memory / GC pressure model: the more requests the backend holds, the slower each is served.
/// Service time is multiplied by `1 + alpha · max(0, in_flight − threshold)`, where `in_flight`
/// is the number of requests accepted and not yet finished (queued or being served) when the
/// request starts service. This is the positive feedback that makes overload metastable: a
/// backlog slows service, which grows the backlog (Bronson et al., "Metastable Failures in
/// Distributed Systems", HotOS 2021).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slowdown {
    /// Extra service time per request held beyond the threshold, as a fraction (e.g. 0.01).
    pub alpha: f64,
    /// Requests the backend can hold without slowing down.
    pub threshold: usize,
}

/// A temporary loss of capacity starting `at` after the backend starts, lasting `duration`:
/// only `workers` workers take new requests, and service times are multiplied by `slowdown`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CapacityDrop {
    /// When the drop starts, from the backend's start.
    pub at: Duration,
    /// How long it lasts.
    pub duration: Duration,
    /// Workers serving during the drop (`1..=workers`).
    pub workers: usize,
    /// Service-time multiplier during the drop (`>= 1`).
    pub slowdown: f64,
}

/// Everything [`super::Backend::start`] needs.
#[derive(Debug, Clone, PartialEq)]
pub struct BackendConfig {
    /// Where to listen; loopback only. Port 0 picks a free port (see the handle's `local_addr`).
    pub listen: SocketAddr,
    /// Requests served at once (`c`). Default 4.
    pub workers: usize,
    /// Mean base service time. Default 10 ms.
    pub mean: Duration,
    /// Service-time distribution. Default exponential.
    pub distribution: ServiceTime,
    /// Sleep (default) or burn CPU.
    pub cpu: CpuMode,
    /// Optional slowdown as in-flight grows.
    pub slowdown: Option<Slowdown>,
    /// Optional capacity drop.
    pub drop: Option<CapacityDrop>,
    /// Seed of the service-time draws (reproducible runs).
    pub seed: u64,
}

impl Default for BackendConfig {
    fn default() -> Self {
        BackendConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            workers: 4,
            mean: Duration::from_millis(10),
            distribution: ServiceTime::Exponential,
            cpu: CpuMode::Sleep,
            slowdown: None,
            drop: None,
            seed: 1,
        }
    }
}

/// A setting out of range; names the setting (as its command-line flag) and what it accepts.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid {flag} {value}: expected {accepts}")]
pub struct BackendConfigError {
    /// The flag, e.g. `--workers`.
    pub flag: &'static str,
    /// The value given.
    pub value: String,
    /// What is accepted.
    pub accepts: &'static str,
}

fn err(
    flag: &'static str,
    value: impl std::fmt::Display,
    accepts: &'static str,
) -> BackendConfigError {
    BackendConfigError {
        flag,
        value: value.to_string(),
        accepts,
    }
}

/// Largest worker count: each worker is a task, and thousands would only model a different
/// kind of service than this toy one.
pub const MAX_WORKERS: usize = 10_000;

impl BackendConfig {
    /// Checks every setting.
    pub fn validate(&self) -> Result<(), BackendConfigError> {
        if crate::units::loopback_addr(&self.listen.to_string()).is_err() {
            return Err(err(
                "--listen",
                self.listen,
                "a loopback address (127.0.0.1:PORT or [::1]:PORT)",
            ));
        }
        if !(1..=MAX_WORKERS).contains(&self.workers) {
            return Err(err("--workers", self.workers, "an integer in 1..=10000"));
        }
        if self.mean.is_zero() || self.mean > Duration::from_secs(60) {
            return Err(err(
                "--service-time",
                format_args!("{:?}", self.mean),
                "a duration > 0 and <= 60s",
            ));
        }
        match self.distribution {
            ServiceTime::Uniform { spread } if !(0.0..=1.0).contains(&spread) => {
                return Err(err("--spread", spread, "a number in 0..=1"));
            }
            ServiceTime::LogNormal { sigma }
                if !(sigma.is_finite() && sigma > 0.0 && sigma <= 5.0) =>
            {
                return Err(err("--sigma", sigma, "a number in (0, 5]"));
            }
            ServiceTime::Bimodal { slow_share, .. } if !(0.0..=1.0).contains(&slow_share) => {
                return Err(err("--slow-share", slow_share, "a number in 0..=1"));
            }
            ServiceTime::Bimodal { slow_factor, .. }
                if !(slow_factor.is_finite() && (1.0..=1000.0).contains(&slow_factor)) =>
            {
                return Err(err("--slow-factor", slow_factor, "a number in 1..=1000"));
            }
            _ => {}
        }
        if let Some(s) = self.slowdown {
            if !(s.alpha.is_finite() && s.alpha >= 0.0) {
                return Err(err("--slowdown-alpha", s.alpha, "a finite number >= 0"));
            }
        }
        if let Some(d) = self.drop {
            if d.duration.is_zero() {
                return Err(err(
                    "--drop-for",
                    format_args!("{:?}", d.duration),
                    "a duration > 0",
                ));
            }
            if !(1..=self.workers).contains(&d.workers) {
                return Err(err(
                    "--drop-workers",
                    d.workers,
                    "an integer in 1..=--workers",
                ));
            }
            if !(d.slowdown.is_finite() && (1.0..=1000.0).contains(&d.slowdown)) {
                return Err(err("--drop-slowdown", d.slowdown, "a number in 1..=1000"));
            }
        }
        Ok(())
    }

    /// Requests per second the backend serves at full capacity with no slowdown
    /// (`workers / mean`).
    pub fn capacity_rps(&self) -> f64 {
        self.workers as f64 / self.mean.as_secs_f64()
    }
}

impl ServiceTime {
    /// Draws one service time with mean `mean` from `rng`.
    pub fn sample(self, mean: Duration, rng: &mut fastrand::Rng) -> Duration {
        let m = mean.as_secs_f64();
        // (0, 1]: never 0, so ln() is finite.
        let u = |rng: &mut fastrand::Rng| 1.0 - rng.f64();
        let secs = match self {
            ServiceTime::Constant => m,
            ServiceTime::Exponential => -m * u(rng).ln(),
            ServiceTime::Uniform { spread } => m * (1.0 - spread + 2.0 * spread * rng.f64()),
            ServiceTime::LogNormal { sigma } => {
                // Box–Muller for one standard normal draw.
                let (u1, u2) = (u(rng), rng.f64());
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                let mu = m.ln() - sigma * sigma / 2.0;
                (mu + sigma * z).exp()
            }
            ServiceTime::Bimodal {
                slow_share,
                slow_factor,
            } => {
                let fast = m / (1.0 - slow_share + slow_share * slow_factor);
                if rng.f64() < slow_share {
                    fast * slow_factor
                } else {
                    fast
                }
            }
        };
        // Cap at 100× the mean so one extreme draw cannot stall a worker for minutes.
        Duration::from_secs_f64(secs.clamp(0.0, 100.0 * m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean_of(d: ServiceTime, n: usize) -> f64 {
        let mut rng = fastrand::Rng::with_seed(7);
        let m = Duration::from_millis(10);
        (0..n)
            .map(|_| d.sample(m, &mut rng).as_secs_f64())
            .sum::<f64>()
            / n as f64
    }

    #[test]
    fn every_distribution_has_the_configured_mean() {
        for d in [
            ServiceTime::Constant,
            ServiceTime::Exponential,
            ServiceTime::Uniform { spread: 0.5 },
            ServiceTime::LogNormal { sigma: 0.5 },
            ServiceTime::Bimodal {
                slow_share: 0.05,
                slow_factor: 20.0,
            },
        ] {
            let m = mean_of(d, 200_000);
            assert!((m - 0.010).abs() < 0.0003, "{d:?}: mean {m}");
        }
    }

    #[test]
    fn bimodal_has_two_modes_in_the_given_proportion() {
        let d = ServiceTime::Bimodal {
            slow_share: 0.05,
            slow_factor: 20.0,
        };
        let mut rng = fastrand::Rng::with_seed(3);
        let m = Duration::from_millis(10);
        // fast = 10 ms / (0.95 + 0.05 · 20) = 5.128 ms; slow = 102.6 ms.
        let (mut slow, n) = (0, 100_000);
        for _ in 0..n {
            let t = d.sample(m, &mut rng).as_secs_f64() * 1e3;
            if t > 50.0 {
                assert!((t - 102.56).abs() < 0.01, "slow draw {t}");
                slow += 1;
            } else {
                assert!((t - 5.128).abs() < 0.01, "fast draw {t}");
            }
        }
        let share = f64::from(slow) / f64::from(n);
        assert!((share - 0.05).abs() < 0.005, "slow share {share}");
    }

    #[test]
    fn validation_names_the_flag() {
        let bad = BackendConfig {
            workers: 0,
            ..BackendConfig::default()
        };
        assert_eq!(bad.validate().unwrap_err().flag, "--workers");
        let bad = BackendConfig {
            listen: "10.1.2.3:80".parse().unwrap(),
            ..BackendConfig::default()
        };
        assert_eq!(bad.validate().unwrap_err().flag, "--listen");
        let bad = BackendConfig {
            drop: Some(CapacityDrop {
                at: Duration::ZERO,
                duration: Duration::from_secs(1),
                workers: 5,
                slowdown: 1.0,
            }),
            ..BackendConfig::default()
        };
        assert_eq!(bad.validate().unwrap_err().flag, "--drop-workers");
        let bad = BackendConfig {
            distribution: ServiceTime::Bimodal {
                slow_share: 0.05,
                slow_factor: 0.5,
            },
            ..BackendConfig::default()
        };
        assert_eq!(bad.validate().unwrap_err().flag, "--slow-factor");
        assert!(BackendConfig::default().validate().is_ok());
        assert_eq!(BackendConfig::default().capacity_rps(), 400.0);
    }
}
