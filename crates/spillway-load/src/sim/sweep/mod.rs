//! `spillway sim --sweep FILE`: the robustness matrix of issue 28, in simulated time.
//!
//! Why: a policy tuned until one demo passes proves nothing about services it has never seen.
//! The sweep runs every cell of a matrix — backend workers × mean service time × service-time
//! distribution × client timeout × offered load × CRITICAL share × arrival process × backend
//! shape — twice, unprotected and behind the proxy's zero-config admission (the core's own
//! `AdmissionController`, as `spillway proxy` builds it by default), and judges requirements
//! 1–4 of the issue on each ([`judge`]). The axes come from a TOML file ([`config`];
//! `examples/sim/robustness.toml`); cells run in parallel, each deterministic from the sweep's
//! seed and its own label, so results never depend on the machine or the thread count.

pub mod cell;
pub mod config;
mod figures;
pub mod judge;
mod output;
mod spec;
mod state;

use std::sync::atomic::{AtomicUsize, Ordering};

pub use cell::{run_cell, RunFigures};
pub use config::{CellSpec, SweepConfig};
pub use judge::{Check, Verdict, CHECKS};
pub use output::{summary_text, write_html, write_json};

use crate::sim::SimError;

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
    /// Per check (in [`CHECKS`] order), `None` where it does not apply.
    pub verdicts: [Option<Verdict>; 5],
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
}

impl CheckSummary {
    /// Passed in every cell it applies to.
    pub fn pass(&self) -> bool {
        self.failing == 0
    }
}

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
    let protected = run_cell(spec, sweep, true).map_err(core)?;
    let unprotected = run_cell(spec, sweep, false).map_err(core)?;
    let verdicts = CHECKS.map(|c| judge::judge(c, spec, sweep, &protected, &unprotected));
    Ok(CellResult {
        spec: *spec,
        label: spec.label(),
        capacity_rps: spec.capacity(),
        protected,
        unprotected,
        verdicts,
    })
}

/// Runs every cell of `sweep`, up to `jobs` at once (`0`: one per CPU), calling `progress`
/// with (cells done, cells in all) as each ends.
pub fn run_sweep(
    sweep: &SweepConfig,
    jobs: usize,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<SweepReport, SimError> {
    let specs = sweep.cells()?;
    let jobs = crate::sim::jobs_for(jobs, specs.len()).max(1);
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
            for (i, c) in cells.iter().enumerate() {
                let Some(v) = c.verdicts[k] else { continue };
                applicable += 1;
                failing += usize::from(!v.pass);
                if worst.map_or(true, |(_, w)| judge::worse(check, &v, &w)) {
                    worst = Some((i, v));
                }
            }
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

#[cfg(test)]
mod tests;
