//! `spillway sim --sweep FILE`: the robustness matrix of issue 28, in simulated time.
//!
//! Why: a policy tuned until one demo passes proves nothing about services it has never seen.
//! The sweep runs every cell of a matrix — backend workers × mean service time × service-time
//! distribution × client timeout × offered load × CRITICAL share × arrival process × backend
//! shape — twice, unprotected and behind the proxy's zero-config admission (the core's own
//! `AdmissionController`, as `spillway proxy` builds it by default), and judges requirements
//! 1–4 of the issue on each ([`judge`]). Where a cell fails, two reference runs of it — the
//! tuned HAProxy baseline and an oracle ([`cell::Mode`]) — say whether any policy could have
//! met the requirement there and whether the tuned baseline does ([`classify`]). The axes come from a TOML file ([`config`];
//! `examples/sim/robustness.toml`); cells run in parallel, each deterministic from the sweep's
//! seed and its own label, so results never depend on the machine or the thread count.

pub mod cell;
pub mod classify;
pub mod config;
mod figures;
pub mod judge;
mod output;
mod spec;
mod state;

use std::sync::atomic::{AtomicUsize, Ordering};

pub use cell::{run_cell, run_mode, Mode, RunFigures};
pub use classify::Class;
pub use config::{CellSpec, SweepConfig};
pub use judge::{Check, Verdict, CHECKS};
pub use output::{summary_text, write_html, write_json};

use crate::SimError;

/// One cell's runs and verdicts.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CellResult {
    /// The cell.
    pub spec: CellSpec,
    /// Its readable label.
    pub label: String,
    /// Capacity, requests/s.
    pub capacity_rps: f64,
    /// Behind the proxy's zero-config admission.
    pub protected: RunFigures,
    /// The backend alone.
    pub unprotected: RunFigures,
    /// Behind the tuned baseline (HAProxy as `bench/robustness.sh` runs it).
    pub tuned: RunFigures,
    /// The oracle with the CRITICAL traffic alone: run where R2 fails.
    pub oracle_critical: Option<RunFigures>,
    /// The oracle with all the traffic: run where R3 fails.
    pub oracle_goodput: Option<RunFigures>,
    /// Per check (in [`CHECKS`] order), `None` where it does not apply.
    pub verdicts: [Option<Verdict>; 5],
    /// Per check, why it fails (`None` where it passes or does not apply).
    pub classes: [Option<Class>; 5],
}

impl CellResult {
    /// The cell's reference runs.
    pub fn references(&self) -> classify::References<'_> {
        classify::References {
            unprotected: &self.unprotected,
            tuned: &self.tuned,
            oracle_critical: self.oracle_critical.as_ref(),
            oracle_goodput: self.oracle_goodput.as_ref(),
        }
    }

    /// How far Spillway trails the reference on check `k` (in [`CHECKS`] order), in the
    /// verdict's units; `None` where the check does not apply.
    pub fn gap(&self, k: usize, sweep: &SweepConfig) -> Option<f64> {
        let v = self.verdicts[k]?;
        let r = classify::reference(CHECKS[k], &self.spec, sweep, self.references())?;
        Some(classify::gap(CHECKS[k], v.figure, r.figure))
    }
}

/// One check over the whole sweep.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CheckSummary {
    /// The check.
    pub check: Check,
    /// Its id (`R1` …).
    pub id: &'static str,
    /// What it demands.
    pub title: String,
    /// Cells it applies to.
    pub applicable: usize,
    /// Cells that fail it.
    pub failing: usize,
    /// The worst cell's index in [`SweepReport::cells`], its label and its figures.
    pub worst: Option<(usize, String, String)>,
    /// Failing cells no policy could pass (the oracle misses the threshold too).
    pub infeasible: usize,
    /// Failing cells where the reference passes, or does better by more than the tolerance.
    pub behind_tuned: usize,
    /// Failing cells where the reference fails too, within the tolerance.
    pub fails_like_tuned: usize,
    /// The `behind_tuned` cells furthest behind the reference, worst first (at most
    /// [`BEHIND_LISTED`]): index, label, Spillway's figure against the reference's and the
    /// oracle's, then the check's figures.
    pub behind_tuned_worst: Vec<(usize, String, String)>,
}

impl CheckSummary {
    /// Passed in every cell it applies to.
    pub fn pass(&self) -> bool {
        self.failing == 0
    }
}

/// How many `behind_tuned` cells a check's summary lists.
pub const BEHIND_LISTED: usize = 20;

/// A whole sweep's results.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SweepReport {
    /// The sweep file's name.
    pub name: String,
    /// Its description.
    pub description: String,
    /// Its seed.
    pub seed: u64,
    /// Per check.
    pub checks: Vec<CheckSummary>,
    /// Per cell, in file order.
    pub cells: Vec<CellResult>,
}

/// Runs one cell both ways and judges it.
pub fn run_one(spec: &CellSpec, sweep: &SweepConfig) -> Result<CellResult, SimError> {
    let core = |source| SimError::Core {
        scenario: format!("{} / {}", sweep.name, spec.label()),
        source,
    };
    let protected = run_mode(spec, sweep, Mode::Protected).map_err(core)?;
    let unprotected = run_mode(spec, sweep, Mode::Unprotected).map_err(core)?;
    let tuned = run_mode(spec, sweep, Mode::Tuned).map_err(core)?;
    let verdicts = CHECKS.map(|c| judge::judge(c, spec, sweep, &protected, &unprotected));
    let fails = |c: Check| {
        CHECKS
            .iter()
            .position(|&k| k == c)
            .and_then(|k| verdicts[k])
            .is_some_and(|v| !v.pass)
    };
    // The oracles only where they can change a verdict's class: they cost a run each.
    let oracle = |critical_only, needed: bool| {
        needed
            .then(|| run_mode(spec, sweep, Mode::Oracle { critical_only }))
            .transpose()
            .map_err(core)
    };
    let oracle_critical = oracle(true, fails(Check::Critical))?;
    let oracle_goodput = oracle(false, fails(Check::Goodput))?;
    let mut cell = CellResult {
        spec: *spec,
        label: spec.label(),
        capacity_rps: spec.capacity(),
        protected,
        unprotected,
        tuned,
        oracle_critical,
        oracle_goodput,
        verdicts,
        classes: [None; 5],
    };
    for (k, &check) in CHECKS.iter().enumerate() {
        cell.classes[k] = cell.verdicts[k]
            .and_then(|v| classify::classify(check, &v, &cell.spec, sweep, cell.references()));
    }
    Ok(cell)
}

/// Runs every cell of `sweep`, up to `jobs` at once (`0`: one per CPU), calling `progress`
/// with (cells done, cells in all) as each ends.
pub fn run_sweep(
    sweep: &SweepConfig,
    jobs: usize,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<SweepReport, SimError> {
    let specs = sweep.cells()?;
    let jobs = crate::jobs_for(jobs, specs.len()).max(1);
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let mut slots: Vec<Option<Result<CellResult, SimError>>> =
        (0..specs.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..jobs)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(spec) = specs.get(i) else {
                            return mine;
                        };
                        mine.push((i, run_one(spec, sweep)));
                        progress(done.fetch_add(1, Ordering::Relaxed) + 1, specs.len());
                    }
                })
            })
            .collect();
        for w in workers {
            // A cell that panicked panics here too, as it would have run alone.
            let mine = w.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            for (i, r) in mine {
                slots[i] = Some(r);
            }
        }
    });
    let cells = slots
        .into_iter()
        .map(|r| r.expect("every cell was taken by a thread"))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(summarise(sweep, cells))
}

/// Per check: cells it applies to, failing cells, the worst cell.
pub fn summarise(sweep: &SweepConfig, cells: Vec<CellResult>) -> SweepReport {
    let checks = CHECKS
        .iter()
        .enumerate()
        .map(|(k, &check)| {
            let mut applicable = 0;
            let mut failing = 0;
            let mut worst: Option<(usize, Verdict)> = None;
            let mut by_class = [0usize; 3];
            let mut behind = Vec::new();
            for (i, c) in cells.iter().enumerate() {
                let Some(v) = c.verdicts[k] else { continue };
                applicable += 1;
                failing += usize::from(!v.pass);
                if worst.is_none_or(|(_, w)| judge::worse(check, &v, &w)) {
                    worst = Some((i, v));
                }
                let Some(class) = c.classes[k] else { continue };
                by_class[Class::ALL.iter().position(|&x| x == class).unwrap_or(0)] += 1;
                if class == Class::BehindTuned {
                    behind.push((i, c.gap(k, sweep).unwrap_or(f64::INFINITY)));
                }
            }
            // Furthest behind first; a tie (or no figure) in file order.
            behind.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            CheckSummary {
                check,
                id: check.id(),
                title: check.title(&sweep.thresholds),
                applicable,
                failing,
                worst: worst.map(|(i, _)| {
                    let c = &cells[i];
                    (
                        i,
                        c.label.clone(),
                        judge::describe(check, &c.spec, &c.protected, &c.unprotected),
                    )
                }),
                infeasible: by_class[0],
                behind_tuned: by_class[1],
                fails_like_tuned: by_class[2],
                behind_tuned_worst: behind
                    .iter()
                    .take(BEHIND_LISTED)
                    .map(|&(i, _)| {
                        let c = &cells[i];
                        (i, c.label.clone(), versus_line(sweep, c, k))
                    })
                    .collect(),
            }
        })
        .collect();
    SweepReport {
        name: sweep.name.clone(),
        description: sweep.description.clone(),
        seed: sweep.seed,
        checks,
        cells,
    }
}

/// A failing cell against its references, then the check's figures, as one line.
pub fn versus_line(sweep: &SweepConfig, c: &CellResult, k: usize) -> String {
    let check = CHECKS[k];
    let Some(v) = c.verdicts[k] else {
        return String::new();
    };
    format!(
        "{}; {}",
        classify::versus(check, &v, &c.spec, sweep, c.references()),
        judge::describe(check, &c.spec, &c.protected, &c.unprotected)
    )
}

#[cfg(test)]
mod tests;
