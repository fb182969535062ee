//! Why a cell fails a requirement: because no admission policy could meet it there, because
//! the tuned baseline meets it (or does clearly better) and Spillway does not, or because the
//! tuned baseline fails it just as Spillway does.
//!
//! Why: the thresholds of requirements 1–4 are absolute, and many cells cannot meet them at
//! all — one worker with exponential 10 ms service and a 50 ms client timeout loses e^-5 =
//! 0.67 % of its requests to service times alone, so CRITICAL ≥ 99.9 % is out of reach however
//! it is admitted. A failing count that mixes those with the policy's own failures tells no one
//! what to fix. Each failing verdict is therefore set beside two reference runs of the same
//! cell (same arrivals, same service times, same backend; `cell::Mode`):
//!
//! - the oracle — the tuned queue told each request's service time, so that no worker ever
//!   spends time on a request that cannot end in time; for R2 with the CRITICAL traffic alone.
//!   Where even it (or any reference run, should one do better) misses the threshold, the cell
//!   is `infeasible`; for R2 also where the service alone makes it miss in expectation — the
//!   share of requests whose service time exceeds the client's timeout ([`service_ceiling`];
//!   a run of a few hundred CRITICAL requests can be lucky). A sampled oracle counts as
//!   missing only by more than two standard errors: a near miss is no proof. R1's oracle is the unprotected service itself (it meets R1 by definition);
//!   R4's is "refuse at once" / "refuse at deadline − mean service", which always meets it.
//! - the reference — the tuned baseline (HAProxy as `bench/robustness.sh` runs it), judged as
//!   Spillway's run is (for R1: its own harm against the unprotected service, since a strict
//!   priority queue in front of a FIFO backend delays the lowest level too). Where it meets the
//!   threshold, or Spillway trails it by more than the requirement's own slack
//!   ([`tolerance`]), the cell is `behind_tuned`; otherwise `fails_like_tuned`.

use super::cell::RunFigures;
use super::config::{CellSpec, Dist, ModelConfig, SweepConfig, Thresholds};
use super::judge::{judge, Check, Verdict};

/// Why a failing verdict fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// The oracle itself misses the threshold.
    Infeasible,
    /// The reference meets it, or does better than Spillway by more than the tolerance.
    BehindTuned,
    /// The reference fails it too, within the tolerance of Spillway's figure.
    FailsLikeTuned,
}

impl Class {
    /// Every class, in report order.
    pub const ALL: [Class; 3] = [Class::Infeasible, Class::BehindTuned, Class::FailsLikeTuned];

    /// As the report names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Infeasible => "infeasible",
            Class::BehindTuned => "behind_tuned",
            Class::FailsLikeTuned => "fails_like_tuned",
        }
    }
}

/// The reference runs of a cell.
#[derive(Debug, Clone, Copy)]
pub struct References<'a> {
    /// The backend alone.
    pub unprotected: &'a RunFigures,
    /// The tuned baseline.
    pub tuned: &'a RunFigures,
    /// The oracle with the CRITICAL traffic alone (where R2 was failed).
    pub oracle_critical: Option<&'a RunFigures>,
    /// The oracle with all the traffic (where R3 was failed).
    pub oracle_goodput: Option<&'a RunFigures>,
}

/// How far Spillway may trail the reference, in the verdict's units, before it is behind: the
/// slack the requirement grants itself — R1 its 0.1 pp; R2 100 % − 99.9 %; R3 100 % − 95 %;
/// R4a the 10 ms it allows; R4b none.
pub fn tolerance(check: Check, t: &Thresholds) -> f64 {
    match check {
        Check::DoNoHarm => t.do_no_harm_pp,
        Check::Critical => 1.0 - t.critical_success,
        Check::Goodput => 1.0 - t.goodput_fraction,
        Check::RefuseEarly => t.refusal_median_ms,
        Check::QueueWait => 0.0,
    }
}

/// How much worse `figure` is than `reference` for `check` (positive: worse).
pub fn gap(check: Check, figure: f64, reference: f64) -> f64 {
    match check {
        Check::DoNoHarm | Check::Critical | Check::Goodput => reference - figure,
        Check::RefuseEarly | Check::QueueWait => {
            if figure == reference {
                0.0
            } else {
                figure - reference
            }
        }
    }
}

/// The reference's verdict: the tuned baseline's, judged as Spillway's run is (R1: its harm
/// against the unprotected service, as Spillway's).
pub fn reference(
    check: Check,
    spec: &CellSpec,
    sweep: &SweepConfig,
    refs: References<'_>,
) -> Option<Verdict> {
    judge(check, spec, sweep, refs.tuned, refs.unprotected)
}

/// The share of a cell's requests whose service time alone (at full speed) is within the
/// client's timeout: no admission policy serves more of them in time, in expectation.
pub fn service_ceiling(spec: &CellSpec, model: &ModelConfig) -> f64 {
    let x = spec.timeout_x;
    let late = match spec.dist {
        Dist::Const => f64::from(u8::from(x < 1.0)),
        Dist::Exp => (-x).exp(),
        Dist::Lognormal => {
            // S = mean · e^(σZ − σ²/2): S > x · mean ⇔ Z > (ln x + σ²/2) / σ.
            let sigma = model.lognormal_sigma;
            if x <= 0.0 || sigma <= 0.0 {
                f64::from(u8::from(x < 1.0))
            } else {
                normal_tail((x.ln() + sigma * sigma / 2.0) / sigma)
            }
        }
        Dist::Bimodal => {
            // Two constant modes with the mean: fast · (1 − s + s · f) = mean.
            let (s, f) = (model.bimodal_slow_share, model.bimodal_slow_factor);
            let fast = 1.0 / (1.0 - s + s * f);
            if fast > x {
                1.0
            } else if fast * f > x {
                s
            } else {
                0.0
            }
        }
    };
    1.0 - late
}

/// P(Z > z) for a standard normal Z (Abramowitz & Stegun 7.1.26, error below 1.5e-7).
fn normal_tail(z: f64) -> f64 {
    let x = z.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erfc = poly * (-x * x).exp();
    if z >= 0.0 {
        erfc / 2.0
    } else {
        1.0 - erfc / 2.0
    }
}

/// The best figure an admission policy could reach for `check`, as far as the oracle runs and
/// the service-time ceiling tell (`None`: feasible by construction).
pub fn oracle(
    check: Check,
    spec: &CellSpec,
    sweep: &SweepConfig,
    refs: References<'_>,
) -> Option<f64> {
    match check {
        // Any reference run that does better shows the cell is not that hard; none beats the
        // service times themselves in expectation.
        Check::Critical => [
            refs.oracle_critical,
            Some(refs.tuned),
            Some(refs.unprotected),
        ]
        .into_iter()
        .flatten()
        .filter_map(RunFigures::critical_success)
        .reduce(f64::max)
        .map(|best| best.min(service_ceiling(spec, &sweep.model))),
        Check::Goodput => [
            refs.oracle_goodput,
            Some(refs.tuned),
            Some(refs.unprotected),
        ]
        .into_iter()
        .flatten()
        .map(RunFigures::goodput_fraction)
        .reduce(f64::max),
        Check::DoNoHarm | Check::RefuseEarly | Check::QueueWait => None,
    }
}

/// Whether no policy could meet `check` in this cell: the service-time ceiling misses the
/// threshold (R2), or every reference run misses it by more than chance explains — for R2 by
/// more than two standard errors of a share of `n` CRITICAL requests at the threshold, since
/// a run of a few thousand requests at 99.9 % expects only a few misses.
fn oracle_misses(check: Check, spec: &CellSpec, sweep: &SweepConfig, refs: References<'_>) -> bool {
    let t = &sweep.thresholds;
    match check {
        Check::Critical => {
            let p = t.critical_success;
            if service_ceiling(spec, &sweep.model) < p {
                return true;
            }
            let runs = [
                refs.oracle_critical,
                Some(refs.tuned),
                Some(refs.unprotected),
            ];
            let mut seen = false;
            for f in runs.into_iter().flatten() {
                let Some(s) = f.critical_success() else {
                    continue;
                };
                seen = true;
                let n = f.critical_offered as f64;
                if s + 2.0 * (p * (1.0 - p) / n).sqrt() >= p {
                    return false;
                }
            }
            seen
        }
        Check::Goodput => oracle(check, spec, sweep, refs).is_some_and(|o| o < t.goodput_fraction),
        Check::DoNoHarm | Check::RefuseEarly | Check::QueueWait => false,
    }
}

/// Why `verdict` fails (`None` where it passes).
pub fn classify(
    check: Check,
    verdict: &Verdict,
    spec: &CellSpec,
    sweep: &SweepConfig,
    refs: References<'_>,
) -> Option<Class> {
    if verdict.pass {
        return None;
    }
    let t = &sweep.thresholds;
    if oracle_misses(check, spec, sweep, refs) {
        return Some(Class::Infeasible);
    }
    let Some(r) = reference(check, spec, sweep, refs) else {
        // The reference is judged where Spillway's run is; should it not be, nothing shows
        // the cell is any harder for the reference than for Spillway.
        return Some(Class::BehindTuned);
    };
    Some(
        if r.pass || gap(check, verdict.figure, r.figure) > tolerance(check, t) + 1e-12 {
            Class::BehindTuned
        } else {
            Class::FailsLikeTuned
        },
    )
}

/// A verdict's figure as the report prints it.
pub fn figure_text(check: Check, spec: &CellSpec, figure: f64) -> String {
    match check {
        Check::DoNoHarm if spec.arrivals.is_open() => format!("{figure:+.2} pp"),
        Check::DoNoHarm => format!("{figure:+.2} %"),
        Check::Critical | Check::Goodput => format!("{:.2}%", figure * 100.0),
        Check::RefuseEarly if figure.is_infinite() => "none refused".to_owned(),
        Check::RefuseEarly => format!("{figure:.2} ms"),
        Check::QueueWait => format!("{figure:.0} late"),
    }
}

/// Spillway's figure, the reference's and the oracle's, as one line.
pub fn versus(
    check: Check,
    verdict: &Verdict,
    spec: &CellSpec,
    sweep: &SweepConfig,
    refs: References<'_>,
) -> String {
    let r = reference(check, spec, sweep, refs);
    let mut s = format!(
        "spillway {} vs tuned {}",
        figure_text(check, spec, verdict.figure),
        r.map_or("n/a".to_owned(), |r| figure_text(check, spec, r.figure))
    );
    if let Some(o) = oracle(check, spec, sweep, refs) {
        s.push_str(&format!("; oracle {}", figure_text(check, spec, o)));
    }
    if check == Check::Critical {
        let c = service_ceiling(spec, &sweep.model);
        s.push_str(&format!(" (service within the timeout: {:.2}%)", c * 100.0));
    }
    s
}

#[cfg(test)]
mod tests;
