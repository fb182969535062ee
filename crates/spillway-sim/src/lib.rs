//! Spillway's simulator: the real policies at fleet scale, in simulated time, and the run
//! reports (JSON, self-contained HTML with SVG charts) it shares with `spillway-load`.
//!
//! Why: a laptop cannot run ten thousand tasks and a million clients, and overload behaviour —
//! retry amplification down a call chain, metastable collapse after a short trigger, one
//! customer's surge, a spike of sheddable traffic — only shows at that scale. The SRE book (ch.
//! 21) itself recommends simulating "useful work" against overload and retries. So this crate
//! runs a discrete-event simulation of clients, a call graph of layers of tasks, queues and
//! workers, and drives the **same** `spillway-core` objects the proxy and the tower layers use —
//! `AdmissionController` (quota, shed policy, concurrency limit, queue), `RetryPolicy`,
//! `AdaptiveThrottle` — through a simulated clock ([`time::SimClock`]) and seeded randomness.
//! No policy is re-implemented here: the simulator only supplies time, load balancing, workers
//! and timers. A fixed seed gives byte-identical results.
//!
//! Why a crate of its own: a simulation needs no network. It depends on `spillway-core` only
//! (the proxy's zero-config policy comes from [`spillway_core::preset`]), so it builds without
//! hyper or tokio (`.ci/run` checks), and `spillway-load`'s load generator, backend and demo
//! use its [`report`] module for their own runs.
//!
//! Scenarios are TOML files ([`config::Scenario`]); the shipped ones are embedded
//! ([`builtin`]). Output is the shared run report ([`report::RunReport`]): per-second
//! counts by offered time, latency of successes, plus the simulator's view inside the fleet
//! (attempts reaching each layer, wasted work, refusals by reason) in `meta.layers`.
//!
//! Memory follows the requests in flight, not their total: requests live in a recycled slab,
//! events in a queue holding at most a few timers per in-flight attempt (stale timers of
//! finished attempts are skipped by generation and disappear as their time passes). Beside
//! them: each client instance's own throttle and retry budget (~1.45 kB a client all told at
//! 10⁶ clients), each task's controller (~2.2 kB), and the report's row per simulated second.

// Denied, not forbidden: three hints to the hardware are `unsafe` calls (a prefetch, the
// huge-page advice and a no-op waker), each allowed where it is made and said why there.
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod builtin;
pub mod config;
mod engine;
pub mod lease;
#[doc(hidden)]
pub mod lockstep;
mod model;
pub mod output;
mod pages;
pub mod report;
pub mod shape;
mod sharded;
mod stats;
pub mod sweep;
pub mod time;

pub use config::{ConfigError, Scenario};
pub use stats::LayerSummary;

use report::RunReport;

/// The simulation could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The scenario is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The core refused a configuration built from the scenario.
    #[error("scenario {scenario}: {source}")]
    Core {
        /// Scenario name.
        scenario: String,
        /// The core's error (names the field).
        source: spillway_core::ConfigError,
    },
}

/// One simulated run (one variant of a scenario).
#[derive(Debug, Clone)]
pub struct SimRun {
    /// The report: per-second series, totals, latency; `meta.layers` has [`LayerSummary`]s.
    pub report: RunReport,
    /// What each layer saw.
    pub layers: Vec<LayerSummary>,
    /// Events processed.
    pub events: u64,
    /// Top-level requests offered.
    pub offered: u64,
    /// Attempts sent, at every layer.
    pub attempts: u64,
    /// Most requests in flight at once (slab high-water mark, all layers; in shards, the sum
    /// of each shard's, an attempt that crossed counted on both sides).
    pub peak_in_flight: usize,
}

/// Runs every variant of `sc` (or `sc` itself when it has none), one per CPU at once; results
/// in the variants' order. See [`run_scenario_with`].
pub fn run_scenario(sc: &Scenario) -> Result<Vec<SimRun>, SimError> {
    run_scenario_with(sc, 0)
}

/// Runs every variant of `sc` (or `sc` itself when it has none), up to `jobs` at once (`0`: one
/// per CPU); results in the variants' order.
///
/// Why variants, and one run across threads only when the scenario asks (`shards`): a run is
/// one event loop whose every step may touch any task and any client at the same simulated
/// instant, so splitting it needs a lookahead — a network delay on every layer — and a
/// realisation of its own per shard count (`sim::sharded`). Variants share nothing — each
/// builds its own fleet, clock and random streams from the
/// scenario — so running them side by side gives byte-identical results for any `jobs`, and
/// a protected-versus-unprotected comparison takes the wall time of its slower half. Memory
/// is that of the fleets being run at once (`jobs` 1 bounds it to one).
pub fn run_scenario_with(sc: &Scenario, jobs: usize) -> Result<Vec<SimRun>, SimError> {
    sc.validate()?;
    let runs = sc.runs();
    let jobs = match jobs {
        // A sharded run takes a CPU per shard already.
        0 if sc.shards > 1 => (jobs_for(0, runs.len()) / sc.shards as usize).max(1),
        _ => jobs_for(jobs, runs.len()),
    };
    if jobs <= 1 {
        return runs.iter().map(|(title, s)| run_one(s, title)).collect();
    }
    // Each thread takes the next variant not yet started; the answers go back to their place.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut done: Vec<Option<Result<SimRun, SimError>>> = (0..runs.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..jobs)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some((title, s)) = runs.get(i) else {
                            return mine;
                        };
                        mine.push((i, run_one(s, title)));
                    }
                })
            })
            .collect();
        for w in workers {
            // A run that panicked panics here too, as it would have run alone.
            let mine = w.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            for (i, r) in mine {
                done[i] = Some(r);
            }
        }
    });
    done.into_iter()
        .map(|r| r.expect("every variant was taken by a thread"))
        .collect()
}

/// How many of `runs` variants [`run_scenario_with`] runs at once when asked for `jobs` (`0`:
/// one per CPU).
pub fn jobs_for(jobs: usize, runs: usize) -> usize {
    match jobs {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
    .min(runs)
}

/// Builds part `part` of the fleet of `sc` (validated) for a run titled `title`.
fn build(sc: &Scenario, title: &str, part: model::Part) -> Result<engine::Engine, SimError> {
    engine::Engine::new(sc, title, part).map_err(|source| SimError::Core {
        scenario: sc.name.clone(),
        source,
    })
}

/// Runs `sc` as written (variants ignored), titled `title`.
pub fn run_one(sc: &Scenario, title: &str) -> Result<SimRun, SimError> {
    sc.validate()?;
    let f = if sc.shards > 1 {
        sharded::run(sc, title)?
    } else {
        build(sc, title, model::Part::WHOLE)?.run()
    };
    let mut recorder = f.recorder;
    let seconds = sc.duration_s.ceil() as usize;
    let layers: Vec<LayerSummary> = f
        .stats
        .iter()
        .zip(&f.layer_names)
        .map(|(s, name)| s.summary(name, f.offered, seconds))
        .collect();
    recorder.set_meta("scenario", sc.name.clone());
    recorder.set_meta("variant", title.to_owned());
    recorder.set_meta("description", sc.description.clone());
    recorder.set_meta("seed", sc.seed);
    recorder.set_meta("protected", sc.protected);
    recorder.set_meta("simulated", true);
    if sc.shards > 1 {
        recorder.set_meta("shards", sc.shards);
    }
    if let Some(c) = capacity_rps(sc) {
        recorder.set_meta("capacity_rps", c);
    }
    recorder.set_meta("events", f.events);
    recorder.set_meta("attempts", f.attempts);
    recorder.set_meta("peak_in_flight", f.peak_in_flight as u64);
    recorder.set_meta(
        "layers",
        serde_json::to_value(&layers).unwrap_or(serde_json::Value::Null),
    );
    Ok(SimRun {
        report: recorder.finish(),
        layers,
        events: f.events,
        offered: f.offered,
        attempts: f.attempts,
        peak_in_flight: f.peak_in_flight,
    })
}

/// End-to-end capacity in top-level requests per second, with every task up: the smallest over
/// layers of `tasks × workers / mean service time`, divided by the calls each top-level request
/// makes to that layer.
pub fn capacity_rps(sc: &Scenario) -> Option<f64> {
    let mut fan = 1.0;
    let mut best: Option<f64> = None;
    for l in &sc.layers {
        let cap = f64::from(l.tasks) * f64::from(l.workers) / (l.service.mean_ms() / 1e3) / fan;
        best = Some(best.map_or(cap, |b: f64| b.min(cap)));
        fan *= f64::from(l.calls.max(1));
    }
    best.filter(|c| c.is_finite())
}
