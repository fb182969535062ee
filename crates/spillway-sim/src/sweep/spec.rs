//! One cell of the matrix and the values of its axes.

use super::config::ModelConfig;

/// A service-time distribution of a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dist {
    /// Always the mean.
    Const,
    /// Exponential.
    Exp,
    /// Log-normal, σ from the model.
    Lognormal,
    /// Two constant modes, the slow one rarer and slower (model).
    Bimodal,
}

/// How a cell's requests arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ArrivalKind {
    /// Poisson at the offered rate.
    Poisson,
    /// Poisson while on, nothing while off; the mean is the offered rate.
    OnOff,
    /// This many clients, each sending its next request as soon as the last ended.
    Closed(u32),
}

/// A cell's backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// Workers in front of an unbounded FIFO.
    Plain,
    /// Slower the more it holds (model).
    Slowdown,
    /// Loses speed for part of the run (model).
    CapacityDrop,
}

impl Dist {
    pub(super) fn parse(s: &str) -> Option<Dist> {
        Some(match s {
            "const" | "constant" => Dist::Const,
            "exp" | "exponential" => Dist::Exp,
            "lognormal" => Dist::Lognormal,
            "bimodal" => Dist::Bimodal,
            _ => return None,
        })
    }

    /// Short name.
    pub fn as_str(self) -> &'static str {
        match self {
            Dist::Const => "const",
            Dist::Exp => "exp",
            Dist::Lognormal => "lognormal",
            Dist::Bimodal => "bimodal",
        }
    }
}

impl ArrivalKind {
    pub(super) fn parse(s: &str) -> Option<ArrivalKind> {
        Some(match s {
            "poisson" => ArrivalKind::Poisson,
            "on_off" => ArrivalKind::OnOff,
            _ => {
                let n: u32 = s.strip_prefix("closed:")?.parse().ok()?;
                if !(1..=100_000).contains(&n) {
                    return None;
                }
                ArrivalKind::Closed(n)
            }
        })
    }

    /// Short name.
    pub fn label(self) -> String {
        match self {
            ArrivalKind::Poisson => "poisson".into(),
            ArrivalKind::OnOff => "on_off".into(),
            ArrivalKind::Closed(n) => format!("closed:{n}"),
        }
    }

    /// Whether arrivals do not wait for answers.
    pub fn is_open(self) -> bool {
        !matches!(self, ArrivalKind::Closed(_))
    }
}

impl BackendKind {
    pub(super) fn parse(s: &str) -> Option<BackendKind> {
        Some(match s {
            "plain" => BackendKind::Plain,
            "slowdown" => BackendKind::Slowdown,
            "capacity_drop" => BackendKind::CapacityDrop,
            _ => return None,
        })
    }

    /// Short name.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Plain => "plain",
            BackendKind::Slowdown => "slowdown",
            BackendKind::CapacityDrop => "capacity_drop",
        }
    }
}

/// One cell of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct CellSpec {
    /// Backend workers.
    pub workers: u32,
    /// Mean service time, ms.
    pub mean_ms: f64,
    /// Service-time distribution.
    pub dist: Dist,
    /// Client timeout, multiples of the mean.
    pub timeout_x: f64,
    /// Offered load, multiples of capacity (0 for closed loops).
    pub offered: f64,
    /// CRITICAL share of capacity (closed loops: of clients).
    pub critical_share: f64,
    /// Arrivals.
    pub arrivals: ArrivalKind,
    /// Backend.
    pub backend: BackendKind,
    /// Simulated time per run: `max_requests / offered rate` (closed loops: capacity) …
    pub max_requests: f64,
    /// … clamped to at least this, s …
    pub min_duration_s: f64,
    /// … and at most this, s.
    pub max_duration_s: f64,
}

impl CellSpec {
    /// Capacity at full speed, requests/s.
    pub fn capacity(&self) -> f64 {
        f64::from(self.workers) / (self.mean_ms / 1e3)
    }

    /// Client timeout, ms.
    pub fn timeout_ms(&self) -> f64 {
        self.timeout_x * self.mean_ms
    }

    /// A unique, readable label (also the seed's salt).
    pub fn label(&self) -> String {
        let offered = if self.arrivals.is_open() {
            format!("{}x", self.offered)
        } else {
            "closed".into()
        };
        format!(
            "c={} mean={}ms {} timeout={}x offered={offered} crit={} {} {}",
            self.workers,
            self.mean_ms,
            self.dist.as_str(),
            self.timeout_x,
            self.critical_share,
            self.arrivals.label(),
            self.backend.as_str()
        )
    }
}

/// Simulated offering window of a cell, s.
pub fn duration_s(spec: &CellSpec, model: &ModelConfig) -> f64 {
    let rate = match spec.arrivals {
        // What the clients send when every answer takes the mean service time.
        ArrivalKind::Closed(n) => spec
            .capacity()
            .max(f64::from(n) / ((model.closed_think_ms + spec.mean_ms) / 1e3)),
        _ => spec.offered * spec.capacity(),
    };
    (spec.max_requests / rate.max(1e-9)).clamp(spec.min_duration_s, spec.max_duration_s)
}

/// The seed of a cell: the sweep's, salted with the cell's label (FNV-1a), so that a cell's
/// result does not depend on which other cells the file lists.
pub fn cell_seed(seed: u64, spec: &CellSpec) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    for b in spec.label().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}
