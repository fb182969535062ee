//! The sweep file: the matrix's axes, the model's parameters and the thresholds, as TOML.
//!
//! Why axes in a file: the full matrix of issue 28 (workers × mean service × distribution ×
//! timeout × offered load × CRITICAL share × arrivals × backend) is tens of thousands of cells,
//! most of them far too costly to simulate for long; a sweep file lists one or more
//! `[[matrix]]` blocks, each the cross product of its axes, so a file chooses which corners to
//! cover and how long to simulate each. Unknown keys are errors (a typo must not silently run
//! another experiment) and every value is checked with an error naming the key.

use serde::Deserialize;

use crate::config::ConfigError;

pub use super::spec::{ArrivalKind, BackendKind, CellSpec, Dist};

/// A sweep file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepConfig {
    /// Name (reports).
    pub name: String,
    /// What it covers.
    #[serde(default)]
    pub description: String,
    /// Seed; each cell's streams derive from it and the cell's own label, so a cell's result
    /// does not depend on the other cells in the file. Default 1.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Simulated time per run is `max_requests / offered rate`, clamped to
    /// `[min_duration_s, max_duration_s]`. Default 200 000.
    #[serde(default = "default_max_requests")]
    pub max_requests: f64,
    /// Shortest simulated offering window per run, s. Default 1.
    #[serde(default = "default_min_duration")]
    pub min_duration_s: f64,
    /// Longest simulated offering window per run, s. Default 30.
    #[serde(default = "default_max_duration")]
    pub max_duration_s: f64,
    /// Whether the proxy learns each request's deadline (a propagated deadline header, as
    /// `spillway-tower` clients send). Default true.
    #[serde(default = "yes")]
    pub propagate_deadline: bool,
    /// The model's parameters.
    #[serde(default)]
    pub model: ModelConfig,
    /// What each requirement demands.
    #[serde(default)]
    pub thresholds: Thresholds,
    /// The sub-matrices; a cell appearing in several runs once, with the budget of the first.
    #[serde(rename = "matrix")]
    pub matrices: Vec<Matrix>,
    /// Run only the cells whose label contains one of these (`spillway sim --sweep --cell`);
    /// all when empty. Not a file key: the file says what the matrix is, the command line
    /// which part of it to run now. A cell's result does not depend on the others run with it
    /// (its seed comes from its label).
    #[serde(skip)]
    pub only: Vec<String>,
}

/// The longest `--cell` pattern accepted: a full label is under 100 characters.
pub const MAX_CELL_PATTERN: usize = 200;

/// The shapes' parameters.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// σ of the log-normal distribution. Default 1.
    #[serde(default = "one_f")]
    pub lognormal_sigma: f64,
    /// Share of slow requests of the bimodal distribution. Default 0.05.
    #[serde(default = "default_slow_share")]
    pub bimodal_slow_share: f64,
    /// How many times slower the slow mode is. Default 20.
    #[serde(default = "default_slow_factor")]
    pub bimodal_slow_factor: f64,
    /// On/off bursts: on–off cycles per run. Default 4.
    #[serde(default = "default_cycles")]
    pub burst_cycles: u32,
    /// On/off bursts: share of each cycle that is on (the rate while on is the mean divided by
    /// it). Default 0.5.
    #[serde(default = "default_half")]
    pub burst_on_share: f64,
    /// Closed loop: a client's pause between an answer and its next request, ms: the round
    /// trip through a load generator and a proxy sharing one busy host (issue 28's `wrk -c
    /// 256` run cycled each connection in ~3 ms). Default 1.
    #[serde(default = "default_think")]
    pub closed_think_ms: f64,
    /// Slowdown backend: service time × `1 + alpha · max(0, held / workers − threshold_x)`,
    /// `held` = requests queued or served at the backend. Default alpha 1.
    #[serde(default = "one_f")]
    pub slowdown_alpha: f64,
    /// Slowdown backend: requests held per worker before it slows. Default 1.
    #[serde(default = "one_f")]
    pub slowdown_threshold_x: f64,
    /// Capacity drop: start, as a share of the run. Default 0.4.
    #[serde(default = "default_drop_at")]
    pub drop_at: f64,
    /// Capacity drop: length, as a share of the run. Default 0.3.
    #[serde(default = "default_drop_for")]
    pub drop_for: f64,
    /// Capacity drop: the backend's speed during it. Default 0.5.
    #[serde(default = "default_half")]
    pub drop_factor: f64,
    /// The backend's timer tick, ms: a worker's service ends on the first tick at or after
    /// it has slept its service time, less what it still owes from earlier overshoots (at most
    /// 3 ms), as `spillway backend`'s sleeping workers do on tokio's 1 ms timer. 0 (the
    /// default): service times are exact, an ideal service. `bench/robustness.sh` sets 1 to
    /// simulate the real backend it runs: the mean holds, the times come in whole ticks.
    #[serde(default)]
    pub backend_timer_tick_ms: f64,
    /// Mean of the delay, ms, with which a worker wakes after its sleep (exponential): the
    /// scheduler's, on a host whose cores are shared. It is owed like the tick's overshoot, so
    /// only what exceeds the 3 ms repayment (or a shorter next service) costs capacity. 0 (the
    /// default): none. `bench/robustness.sh` sets what its overloaded backends served.
    #[serde(default)]
    pub backend_wake_ms: f64,
    /// Time a request spends outside the backend and the proxy's queue, ms: the loopback hops
    /// and the load generator, proxy and backend each taking their turn on a shared host. An
    /// answer must leave the backend this long before the client's deadline to count. 0 (the
    /// default): none. `bench/robustness.sh` sets what its unprotected runs measure.
    #[serde(default)]
    pub overhead_ms: f64,
}

impl Default for ModelConfig {
    fn default() -> Self {
        toml::from_str("").expect("every model key has a default")
    }
}

/// What each requirement demands (issue 28's figures by default).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Thresholds {
    /// R1: protected success within the timeout may trail the unprotected by this much,
    /// percentage points (closed loop: goodput, relative). Default 0.1.
    #[serde(default = "default_harm_pp")]
    pub do_no_harm_pp: f64,
    /// R1 applies at offered load up to this. Default 0.9.
    #[serde(default = "default_below")]
    pub do_no_harm_upto: f64,
    /// R2: CRITICAL success at least this. Default 0.999.
    #[serde(default = "default_critical")]
    pub critical_success: f64,
    /// R2 applies while CRITICAL offered is at most this share of (the lowest) capacity.
    /// Default 0.8.
    #[serde(default = "default_critical_share")]
    pub critical_share_max: f64,
    /// R2 and R3 apply from this overload … Default 1.
    #[serde(default = "one_f")]
    pub overload_from: f64,
    /// … up to this one. Default 10.
    #[serde(default = "default_overload_to")]
    pub overload_to: f64,
    /// R3: goodput at least this share of min(offered, capacity). Default 0.95.
    #[serde(default = "default_goodput")]
    pub goodput_fraction: f64,
    /// R4: median arrival → refusal at most this, ms. Default 10.
    #[serde(default = "default_refusal_ms")]
    pub refusal_median_ms: f64,
    /// R4's median applies from this offered load ("sustained overload"). Default 2.
    #[serde(default = "default_sustained")]
    pub sustained_from: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        toml::from_str("").expect("every threshold has a default")
    }
}

/// One sub-matrix: the cross product of its axes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Matrix {
    /// Name (reports).
    pub name: String,
    /// Backend workers.
    pub workers: Vec<u32>,
    /// Mean service times, ms.
    pub mean_ms: Vec<f64>,
    /// `const`, `exp`, `lognormal`, `bimodal`.
    pub distribution: Vec<String>,
    /// Client timeouts, as multiples of the mean service time.
    pub timeout_x: Vec<f64>,
    /// Offered load, as multiples of capacity (ignored by closed-loop arrivals).
    pub offered: Vec<f64>,
    /// CRITICAL offered as a share of capacity (the rest is SHEDDABLE), at most all that is
    /// offered: a share at or above the offered load makes every request CRITICAL (the
    /// zero-config default, where no request carries a criticality); for closed-loop arrivals,
    /// the share of clients sending CRITICAL (at most all of them).
    pub critical_share: Vec<f64>,
    /// `poisson`, `on_off`, `closed:N` (N clients, each sending again as soon as answered).
    pub arrivals: Vec<String>,
    /// `plain`, `slowdown`, `capacity_drop`. Default `["plain"]`.
    #[serde(default = "default_backends")]
    pub backend: Vec<String>,
    /// Overrides the file's `max_requests` for these cells.
    #[serde(default)]
    pub max_requests: Option<f64>,
    /// Overrides the file's `min_duration_s` for these cells.
    #[serde(default)]
    pub min_duration_s: Option<f64>,
    /// Overrides the file's `max_duration_s` for these cells.
    #[serde(default)]
    pub max_duration_s: Option<f64>,
}

impl SweepConfig {
    /// Parses and validates a sweep file; `source` names it in errors.
    pub fn from_toml(text: &str, source: &str) -> Result<SweepConfig, ConfigError> {
        let cfg: SweepConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            source_name: source.to_owned(),
            message: e.to_string(),
        })?;
        cfg.cells()?;
        Ok(cfg)
    }

    fn invalid(&self, key: String, value: String, expected: &str) -> ConfigError {
        ConfigError::Invalid {
            scenario: self.name.clone(),
            key,
            value,
            expected: expected.to_owned(),
        }
    }

    /// Checks the file and lists its cells, each once, in file order.
    pub fn cells(&self) -> Result<Vec<CellSpec>, ConfigError> {
        let num = |key: &str, v: f64, lo: f64, hi: f64, what: &str| {
            if v.is_finite() && (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(self.invalid(key.to_owned(), v.to_string(), what))
            }
        };
        self.check_budget(
            "",
            self.max_requests,
            self.min_duration_s,
            self.max_duration_s,
        )?;
        let m = &self.model;
        num(
            "model.lognormal_sigma",
            m.lognormal_sigma,
            0.01,
            3.0,
            "0.01 to 3",
        )?;
        num(
            "model.bimodal_slow_share",
            m.bimodal_slow_share,
            0.0,
            1.0,
            "0 to 1",
        )?;
        num(
            "model.bimodal_slow_factor",
            m.bimodal_slow_factor,
            1.0,
            1e4,
            "1 to 10000",
        )?;
        num(
            "model.burst_cycles",
            f64::from(m.burst_cycles),
            1.0,
            1e4,
            "1 to 10000",
        )?;
        num(
            "model.burst_on_share",
            m.burst_on_share,
            0.01,
            1.0,
            "0.01 to 1",
        )?;
        num(
            "model.closed_think_ms",
            m.closed_think_ms,
            0.0,
            3.6e6,
            "0 to 3600000 ms",
        )?;
        num(
            "model.slowdown_alpha",
            m.slowdown_alpha,
            0.0,
            1e3,
            "0 to 1000",
        )?;
        num(
            "model.slowdown_threshold_x",
            m.slowdown_threshold_x,
            0.0,
            1e6,
            "0 to 1e6",
        )?;
        num(
            "model.drop_at",
            m.drop_at,
            0.0,
            1.0,
            "a share of the run, 0 to 1",
        )?;
        num(
            "model.drop_for",
            m.drop_for,
            0.0,
            1.0 - m.drop_at,
            "0 to 1 − drop_at",
        )?;
        num("model.drop_factor", m.drop_factor, 0.01, 1.0, "0.01 to 1")?;
        num(
            "model.backend_timer_tick_ms",
            m.backend_timer_tick_ms,
            0.0,
            1e3,
            "0 to 1000 ms",
        )?;
        num(
            "model.overhead_ms",
            m.overhead_ms,
            0.0,
            6e4,
            "0 to 60000 ms",
        )?;
        num(
            "model.backend_wake_ms",
            m.backend_wake_ms,
            0.0,
            1e3,
            "0 to 1000 ms",
        )?;
        let t = &self.thresholds;
        num(
            "thresholds.do_no_harm_pp",
            t.do_no_harm_pp,
            0.0,
            100.0,
            "0 to 100",
        )?;
        num(
            "thresholds.critical_success",
            t.critical_success,
            0.0,
            1.0,
            "0 to 1",
        )?;
        num(
            "thresholds.goodput_fraction",
            t.goodput_fraction,
            0.0,
            1.0,
            "0 to 1",
        )?;
        num(
            "thresholds.refusal_median_ms",
            t.refusal_median_ms,
            0.0,
            1e7,
            "≥ 0 ms",
        )?;
        for (k, v) in [
            ("thresholds.do_no_harm_upto", t.do_no_harm_upto),
            ("thresholds.critical_share_max", t.critical_share_max),
            ("thresholds.overload_from", t.overload_from),
            ("thresholds.overload_to", t.overload_to),
            ("thresholds.sustained_from", t.sustained_from),
        ] {
            num(k, v, 0.0, 1e4, "0 to 10000")?;
        }
        if self.matrices.is_empty() {
            return Err(self.invalid("matrix".into(), "none".into(), "one [[matrix]] or more"));
        }
        // A cell is its label (the budget aside: the first matrix listing it sets that).
        let mut seen = std::collections::HashSet::new();
        let mut cells: Vec<CellSpec> = Vec::new();
        for mx in &self.matrices {
            for c in self.expand(mx)? {
                if seen.insert(c.label()) {
                    cells.push(c);
                }
            }
        }
        self.select(cells)
    }

    /// The cells [`only`](Self::only) names, or all of them; an error for a pattern that is
    /// empty, too long or names no cell (with a label to show what they look like).
    fn select(&self, cells: Vec<CellSpec>) -> Result<Vec<CellSpec>, ConfigError> {
        if self.only.is_empty() {
            return Ok(cells);
        }
        let labels: Vec<String> = cells.iter().map(CellSpec::label).collect();
        let example = labels.first().cloned().unwrap_or_default();
        for p in &self.only {
            let expected = format!(
                "a part of a cell's label, 1 to {MAX_CELL_PATTERN} characters, \
                 e.g. \"{example}\" (labels are in the --json output)"
            );
            if p.is_empty() || p.chars().count() > MAX_CELL_PATTERN {
                return Err(self.invalid("--cell".into(), format!("{p:?}"), &expected));
            }
            if !labels.iter().any(|l| l.contains(p.as_str())) {
                return Err(self.invalid(
                    "--cell".into(),
                    format!("{p:?} (no cell's label contains it)"),
                    &expected,
                ));
            }
        }
        Ok(cells
            .into_iter()
            .zip(labels)
            .filter(|(_, label)| self.only.iter().any(|p| label.contains(p.as_str())))
            .map(|(c, _)| c)
            .collect())
    }

    fn check_budget(
        &self,
        prefix: &str,
        max_requests: f64,
        min_s: f64,
        max_s: f64,
    ) -> Result<(), ConfigError> {
        let num = |key: &str, v: f64, lo: f64, hi: f64, what: &str| {
            if v.is_finite() && (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(self.invalid(format!("{prefix}{key}"), v.to_string(), what))
            }
        };
        num("max_requests", max_requests, 10.0, 1e9, "10 to 1e9")?;
        num(
            "min_duration_s",
            min_s,
            1e-6,
            86_400.0,
            "0.000001 to 86400 s",
        )?;
        num(
            "max_duration_s",
            max_s,
            min_s,
            86_400.0,
            "min_duration_s to 86400 s",
        )
    }

    fn expand(&self, mx: &Matrix) -> Result<Vec<CellSpec>, ConfigError> {
        let key = |k: &str| format!("matrix[{}].{k}", mx.name);
        let (max_requests, min_duration_s, max_duration_s) = (
            mx.max_requests.unwrap_or(self.max_requests),
            mx.min_duration_s.unwrap_or(self.min_duration_s),
            mx.max_duration_s.unwrap_or(self.max_duration_s),
        );
        self.check_budget(
            &format!("matrix[{}].", mx.name),
            max_requests,
            min_duration_s,
            max_duration_s,
        )?;
        let nonempty = |k: &str, n: usize| {
            if n == 0 {
                Err(self.invalid(key(k), "[]".into(), "at least one value"))
            } else {
                Ok(())
            }
        };
        let in_range = |k: &str, v: f64, lo: f64, hi: f64, what: &str| {
            if v.is_finite() && (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(self.invalid(key(k), v.to_string(), what))
            }
        };
        nonempty("workers", mx.workers.len())?;
        for w in &mx.workers {
            in_range("workers", f64::from(*w), 1.0, 1e6, "1 to 1000000")?;
        }
        nonempty("mean_ms", mx.mean_ms.len())?;
        for v in &mx.mean_ms {
            in_range("mean_ms", *v, 0.001, 3.6e6, "0.001 to 3600000 ms")?;
        }
        nonempty("timeout_x", mx.timeout_x.len())?;
        for v in &mx.timeout_x {
            in_range("timeout_x", *v, 0.01, 1e6, "0.01 to 1e6 × the mean")?;
        }
        nonempty("offered", mx.offered.len())?;
        for v in &mx.offered {
            in_range("offered", *v, 0.001, 1e4, "0.001 to 10000 × capacity")?;
        }
        nonempty("critical_share", mx.critical_share.len())?;
        for v in &mx.critical_share {
            in_range("critical_share", *v, 0.0, 1e4, "0 to 10000 × capacity")?;
        }
        nonempty("distribution", mx.distribution.len())?;
        nonempty("arrivals", mx.arrivals.len())?;
        nonempty("backend", mx.backend.len())?;
        let dists = mx
            .distribution
            .iter()
            .map(|s| {
                Dist::parse(s).ok_or_else(|| {
                    self.invalid(
                        key("distribution"),
                        format!("{s:?}"),
                        "const, exp, lognormal, bimodal",
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let arrivals = mx
            .arrivals
            .iter()
            .map(|s| {
                ArrivalKind::parse(s).ok_or_else(|| {
                    self.invalid(
                        key("arrivals"),
                        format!("{s:?}"),
                        "poisson, on_off, closed:N (N clients, 1 to 100000)",
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let backends = mx
            .backend
            .iter()
            .map(|s| {
                BackendKind::parse(s).ok_or_else(|| {
                    self.invalid(
                        key("backend"),
                        format!("{s:?}"),
                        "plain, slowdown, capacity_drop",
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut out = Vec::new();
        for &workers in &mx.workers {
            for &mean_ms in &mx.mean_ms {
                for &dist in &dists {
                    for &timeout_x in &mx.timeout_x {
                        for &arrivals in &arrivals {
                            // A closed loop offers what its clients send: one cell, not one
                            // per offered level.
                            let offered: &[f64] = if arrivals.is_open() {
                                &mx.offered
                            } else {
                                &[0.0]
                            };
                            for &offered in offered {
                                for &critical_share in &mx.critical_share {
                                    for &backend in &backends {
                                        let c = CellSpec {
                                            workers,
                                            mean_ms,
                                            dist,
                                            timeout_x,
                                            offered,
                                            critical_share,
                                            arrivals,
                                            backend,
                                            max_requests,
                                            min_duration_s,
                                            max_duration_s,
                                        };
                                        out.push(c);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(out)
    }
}

fn default_seed() -> u64 {
    1
}
fn default_max_requests() -> f64 {
    200_000.0
}
fn default_min_duration() -> f64 {
    1.0
}
fn default_max_duration() -> f64 {
    30.0
}
fn yes() -> bool {
    true
}
fn one_f() -> f64 {
    1.0
}
fn default_slow_share() -> f64 {
    0.05
}
fn default_slow_factor() -> f64 {
    20.0
}
fn default_cycles() -> u32 {
    4
}
fn default_half() -> f64 {
    0.5
}
fn default_think() -> f64 {
    1.0
}
fn default_drop_at() -> f64 {
    0.4
}
fn default_drop_for() -> f64 {
    0.3
}
fn default_harm_pp() -> f64 {
    0.1
}
fn default_below() -> f64 {
    0.9
}
fn default_critical() -> f64 {
    0.999
}
fn default_critical_share() -> f64 {
    0.8
}
fn default_overload_to() -> f64 {
    10.0
}
fn default_goodput() -> f64 {
    0.95
}
fn default_refusal_ms() -> f64 {
    10.0
}
fn default_sustained() -> f64 {
    2.0
}
fn default_backends() -> Vec<String> {
    vec!["plain".into()]
}
