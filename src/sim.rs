//! `spillway sim`: run a scenario of the policies at fleet scale, in simulated time.
//!
//! Why a subcommand: the simulator answers "what do the real policies do with ten thousand
//! tasks and their clients?" deterministically and in seconds; this module only picks the
//! scenario (shipped by name, or a file), applies the command-line overrides, runs it through
//! `spillway_sim` and prints/writes the results. Exit code 2 for a bad argument or an
//! invalid scenario (the message names the key), 1 for I/O failures.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use spillway_load::units::parse_duration;
use spillway_sim::report::{write_html, write_json, RunReport};
use spillway_sim::{self as sim, builtin, output, Scenario};

use crate::UsageError;

/// `spillway sim` arguments.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// A shipped scenario (see --list), e.g. retry-amplification.
    #[arg(value_name = "NAME", conflicts_with = "scenario")]
    name: Option<String>,
    /// A scenario file (TOML; see examples/sim/ for the format).
    #[arg(long, value_name = "FILE")]
    scenario: Option<PathBuf>,
    /// List the shipped scenarios and exit.
    #[arg(long)]
    list: bool,
    /// Print a shipped scenario's TOML (a starting point for your own) and exit.
    #[arg(long, requires = "name")]
    show: bool,
    /// Override the scenario's seed.
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// Override the offering window (1ms to 24h), e.g. 300s or 5m.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    duration: Option<std::time::Duration>,
    /// Scale tasks, client instances, global quotas and offered load by this factor (0.001 to
    /// 1000), keeping the load per task.
    #[arg(long, value_name = "F")]
    scale: Option<f64>,
    /// Override the scenario's `shards`: simulate the fleet in N parts, one thread each, that
    /// advance together in windows of the smallest network delay (1 to 64; more than 1 needs
    /// every layer's `network_ms` > 0, see --network-ms). Results depend on N, never on the
    /// machine.
    #[arg(long, value_name = "N")]
    shards: Option<u32>,
    /// Set every layer's one-way network delay, ms (0 to 3600000): the time an attempt, an
    /// answer or a cancellation takes between a caller and a task.
    #[arg(long, value_name = "MS")]
    network_ms: Option<f64>,
    /// Variants simulated at once, each on its own thread (0: one per CPU, divided by the
    /// shards). Results are the same for any value; memory is that of the fleets run at once.
    #[arg(long, value_name = "N", default_value_t = 0)]
    jobs: usize,
    /// Run only these variants (repeatable; default all).
    #[arg(long, value_name = "NAME")]
    variant: Vec<String>,
    /// Write the run reports as JSON here.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write a self-contained HTML report with charts here.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Print the per-second series of every run.
    #[arg(long)]
    series: bool,
    /// Run `spillway demo`'s protected scenario both ways — simulated, and measured for real
    /// (backend, proxy and load generator on loopback) — and print their goodput side by side.
    #[arg(long, conflicts_with_all = ["name", "scenario"])]
    versus_demo: bool,
    /// Run a robustness sweep (TOML; e.g. examples/sim/robustness.toml): every cell of its
    /// matrix unprotected, behind the proxy's zero-config admission and behind the tuned
    /// HAProxy baseline, judged against issue 28's requirements 1-4; prints per requirement
    /// pass/fail, failing cells (infeasible / behind_tuned / fails_like_tuned, by an oracle
    /// run where needed) and the worst cell. Exit code 0 whatever the verdicts (they are the output); --json/--html write the
    /// cells.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["name", "scenario", "versus_demo"])]
    sweep: Option<PathBuf>,
    /// With --sweep: run only the cells whose label contains TEXT (repeatable: any of them),
    /// e.g. --cell "c=4 mean=10ms exp timeout=20x offered=0.9x"; each cell's result is the
    /// same as in the whole sweep.
    #[arg(long, value_name = "TEXT", requires = "sweep")]
    cell: Vec<String>,
    /// Run a fleet quota lease scenario (examples/sim/fleet-lease.toml): quota accuracy and
    /// convergence of the Redis leases for every fleet size × lease interval in the file.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["name", "scenario", "versus_demo", "sweep"])]
    lease: Option<PathBuf>,
    /// Run `spillway demo`'s protected scenario simulated at N seeds (from --seed, default 1)
    /// and print, per target, the mean and lowest figure and how many seeds missed it.
    #[arg(
        long,
        value_name = "N",
        conflicts_with_all = [
            "name", "scenario", "versus_demo", "sweep", "lease", "duration", "scale", "shards",
            "network_ms", "variant", "json", "html", "series",
        ]
    )]
    demo_seeds: Option<u64>,
    /// With --versus-demo or --demo-seeds: the demo's --quick form (15 s instead of 34 s).
    #[arg(long)]
    quick: bool,
}

/// `--versus-demo`: the simulated and the measured protected demo, their table rows and plateaus.
fn versus_demo(args: &SimArgs, out: &mut impl Write) -> Result<()> {
    use spillway_load::demo::{
        render_table, run_blocking, simulated as demo, summarise, DemoConfig, Mode,
    };
    let mut cfg = if args.quick {
        DemoConfig::quick()
    } else {
        DemoConfig::full()
    };
    cfg.dashboard = None;
    if let Some(seed) = args.seed {
        cfg.seed = seed;
    }
    let sc = demo::scenario(&cfg, Mode::Spillway).map_err(UsageError)?;
    let mut simulated = sim::run_one(&sc, "spillway")
        .map_err(|e| UsageError(e.to_string()))?
        .report;
    simulated.title = "spillway, simulated".into();
    writeln!(
        out,
        "measuring spillway demo{} (protected run, {:.0} s on loopback)...",
        if args.quick { " --quick" } else { "" },
        cfg.total().as_secs_f64()
    )?;
    out.flush()?;
    cfg.modes = vec![Mode::Spillway];
    let mut measured = run_blocking(&cfg, false)
        .context("running the demo")?
        .pop()
        .context("the demo made no run")?;
    measured.title = "spillway, measured".into();
    let rows = [summarise(&cfg, &simulated), summarise(&cfg, &measured)];
    out.write_all(render_table(&rows).as_bytes())?;
    let (sim_p, real_p) = (
        demo::plateau(&cfg, &simulated),
        demo::plateau(&cfg, &measured),
    );
    if let (Some(s), Some(m)) = (sim_p, real_p) {
        writeln!(
            out,
            "goodput plateau (seconds {:?}, x capacity {}/s): simulated {s:.3}, measured {m:.3}, \
             {:.1}% apart (target: within 10%)",
            demo::plateau_seconds(&cfg),
            cfg.capacity(),
            (s - m).abs() / m * 100.0
        )?;
    }
    let reports = [simulated, measured];
    write_outputs(args, &reports, out)
}

fn load(args: &SimArgs) -> Result<Scenario> {
    let mut sc = match (&args.name, &args.scenario) {
        (Some(name), _) => match builtin::scenario(name) {
            Some(s) => s.map_err(|e| UsageError(e.to_string()))?,
            None => {
                let names: Vec<_> = builtin::names().collect();
                return Err(UsageError(format!(
                    "unknown scenario {name:?}: expected one of {} (or --scenario FILE)",
                    names.join(", ")
                ))
                .into());
            }
        },
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading scenario file {}", path.display()))?;
            Scenario::from_toml(&text, &path.display().to_string())
                .map_err(|e| UsageError(e.to_string()))?
        }
        (None, None) => {
            return Err(UsageError(
                "a scenario is required: spillway sim NAME (see --list) or --scenario FILE".into(),
            )
            .into())
        }
    };
    if let Some(seed) = args.seed {
        sc.seed = seed;
    }
    if let Some(d) = args.duration {
        sc.duration_s = d.as_secs_f64();
    }
    if let Some(ms) = args.network_ms {
        sc.layers.iter_mut().for_each(|l| l.network_ms = ms);
    }
    if let Some(n) = args.shards {
        sc.shards = n;
    }
    if let Some(f) = args.scale {
        if !(f.is_finite() && (0.001..=1000.0).contains(&f)) {
            return Err(
                UsageError(format!("--scale {f}: expected a factor in 0.001..=1000")).into(),
            );
        }
        sc = sc.scaled(f);
    }
    if !args.variant.is_empty() {
        for v in &args.variant {
            if !sc.variants.iter().any(|x| &x.name == v) {
                let names: Vec<_> = sc.variants.iter().map(|x| x.name.as_str()).collect();
                return Err(UsageError(format!(
                    "--variant {v:?}: scenario {} has variants: {}",
                    sc.name,
                    if names.is_empty() {
                        "none".to_owned()
                    } else {
                        names.join(", ")
                    }
                ))
                .into());
            }
        }
        sc.variants.retain(|x| args.variant.contains(&x.name));
    }
    sc.validate().map_err(|e| {
        let mut msg = e.to_string();
        if sc.shards > 1 && args.network_ms.is_none() && msg.contains(".network_ms") {
            msg.push_str(" (--network-ms MS gives every layer one)");
        }
        UsageError(msg)
    })?;
    Ok(sc)
}

/// Runs `spillway sim`.
pub fn run(args: &SimArgs) -> Result<()> {
    // clap's `requires` is not enforced when a conflicting argument is given (`NAME --quick`,
    // `--scenario F --cell X` ran without a word): a flag that would be ignored is an error.
    if args.quick && !args.versus_demo && args.demo_seeds.is_none() {
        return Err(
            UsageError("--quick applies only with --versus-demo or --demo-seeds".into()).into(),
        );
    }
    if !args.cell.is_empty() && args.sweep.is_none() {
        return Err(UsageError("--cell applies only with --sweep FILE".into()).into());
    }
    let mut out = std::io::stdout().lock();
    if args.list {
        for (name, text) in builtin::SCENARIOS {
            let desc = Scenario::from_toml(text, name)
                .map(|s| s.description)
                .unwrap_or_default();
            writeln!(out, "{name:<22} {desc}")?;
        }
        return Ok(());
    }
    if args.show {
        if let Some((_, text)) = builtin::SCENARIOS
            .iter()
            .find(|(n, _)| Some(*n) == args.name.as_deref())
        {
            out.write_all(text.as_bytes())?;
            return Ok(());
        }
    }
    if args.versus_demo {
        return versus_demo(args, &mut out);
    }
    if let Some(n) = args.demo_seeds {
        let cfg = if args.quick {
            spillway_load::demo::DemoConfig::quick()
        } else {
            spillway_load::demo::DemoConfig::full()
        };
        return crate::sim_demo::demo_seeds(&cfg, args.seed.unwrap_or(cfg.seed), n, &mut out);
    }
    if let Some(path) = &args.sweep {
        return sweep(args, path, &mut out);
    }
    if let Some(path) = &args.lease {
        return lease(args, path, &mut out);
    }
    let sc = load(args)?;
    writeln!(out, "scenario {}: {}", sc.name, sc.description)?;
    writeln!(
        out,
        "seed {}, {} s offered{}",
        sc.seed,
        sc.duration_s,
        sim::capacity_rps(&sc)
            .map(|c| format!(", capacity {c:.0} requests/s"))
            .unwrap_or_default()
    )?;
    let started = Instant::now();
    let runs = sim::run_scenario_with(&sc, args.jobs).map_err(|e| UsageError(e.to_string()))?;
    let wall = started.elapsed().as_secs_f64();
    out.write_all(output::summary_table(&runs).as_bytes())?;
    if args.series {
        for r in &runs {
            writeln!(out)?;
            out.write_all(output::series_table(r).as_bytes())?;
        }
    }
    out.flush()?;
    let offered: u64 = runs.iter().map(|r| r.offered).sum();
    let attempts: u64 = runs.iter().map(|r| r.attempts).sum();
    let events: u64 = runs.iter().map(|r| r.events).sum();
    let peak = runs.iter().map(|r| r.peak_in_flight).max().unwrap_or(0);
    // With several variants run side by side the rate is the command's, over all of them.
    let side_by_side = match runs.len() {
        0 | 1 => String::new(),
        n => format!(" ({n} runs, up to {} at once)", sim::jobs_for(args.jobs, n)),
    };
    eprintln!(
        "simulated {offered} requests ({attempts} attempts, {events} events, at most {peak} in \
         flight) in {wall:.2} s wall{side_by_side}: {:.0} requests/s, {:.0} attempts/s",
        offered as f64 / wall.max(1e-9),
        attempts as f64 / wall.max(1e-9)
    );
    let reports: Vec<_> = runs.into_iter().map(|r| r.report).collect();
    write_outputs(args, &reports, &mut out)
}

/// `--lease FILE`: runs the lease model for each fleet size × interval and prints the table.
fn lease(args: &SimArgs, path: &std::path::Path, out: &mut impl Write) -> Result<()> {
    use spillway_sim::lease::{self, LeaseScenario};
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading lease scenario {}", path.display()))?;
    let mut sc =
        LeaseScenario::from_toml(&text, &path.display().to_string()).map_err(UsageError)?;
    if let Some(seed) = args.seed {
        sc.seed = seed;
    }
    if let Some(d) = args.duration {
        sc.duration_s = d.as_secs_f64();
        sc.validate().map_err(UsageError)?;
    }
    writeln!(out, "lease scenario {}: {}", sc.name, sc.description)?;
    out.write_all(lease::TABLE_HEADER.as_bytes())?;
    out.flush()?;
    for &n in &sc.instances {
        for &l in &sc.lease_ms {
            let started = Instant::now();
            let r = lease::run_one(&sc, n, l);
            eprintln!(
                "{n} instances, {l} ms: {:.2} s wall",
                started.elapsed().as_secs_f64()
            );
            out.write_all(lease::row(&r).as_bytes())?;
            out.flush()?;
        }
    }
    Ok(())
}

/// `--sweep FILE`: runs the matrix and prints the verdicts.
fn sweep(args: &SimArgs, path: &std::path::Path, out: &mut impl Write) -> Result<()> {
    use spillway_sim::sweep::{self, SweepConfig};
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading sweep file {}", path.display()))?;
    let mut cfg = SweepConfig::from_toml(&text, &path.display().to_string())
        .map_err(|e| UsageError(e.to_string()))?;
    if let Some(seed) = args.seed {
        cfg.seed = seed;
    }
    cfg.only.clone_from(&args.cell);
    let cells = cfg.cells().map_err(|e| UsageError(e.to_string()))?.len();
    writeln!(
        out,
        "sweep {}: {}\nseed {}, {cells} cells, each run unprotected, behind the proxy's \
         zero-config admission and behind the tuned baseline (HAProxy-like: cap = workers, \
         priority classes, queue timeout = client timeout); failing cells also by an oracle",
        cfg.name, cfg.description, cfg.seed
    )?;
    out.flush()?;
    let started = Instant::now();
    // Progress on stderr, at most every 10 % and at the end.
    let progress = |done: usize, all: usize| {
        let step = (all / 10).max(1);
        if done.is_multiple_of(step) || done == all {
            eprintln!(
                "  {done}/{all} cells, {:.0} s",
                started.elapsed().as_secs_f64()
            );
        }
    };
    let report =
        sweep::run_sweep(&cfg, args.jobs, &progress).map_err(|e| UsageError(e.to_string()))?;
    let wall = started.elapsed().as_secs_f64();
    out.write_all(sweep::summary_text(&report).as_bytes())?;
    let runs: Vec<_> = report
        .cells
        .iter()
        .flat_map(|c| {
            [&c.protected, &c.unprotected, &c.tuned]
                .into_iter()
                .chain(c.oracle_critical.as_ref())
                .chain(c.oracle_goodput.as_ref())
        })
        .collect();
    let events: u64 = runs.iter().map(|r| r.events).sum();
    eprintln!(
        "simulated {cells} cells ({} runs, {events} events) in {wall:.1} s wall, up to {} at once",
        runs.len(),
        spillway_sim::jobs_for(args.jobs, cells)
    );
    if let Some(p) = &args.json {
        sweep::write_json(&report, p)?;
        writeln!(out, "wrote {}", p.display())?;
    }
    if let Some(p) = &args.html {
        sweep::write_html(&report, p)?;
        writeln!(out, "wrote {}", p.display())?;
    }
    Ok(())
}

/// Writes `--json` / `--html` if asked, saying where.
fn write_outputs(args: &SimArgs, reports: &[RunReport], out: &mut impl Write) -> Result<()> {
    if let Some(p) = &args.json {
        write_json(reports, p)?;
        writeln!(out, "wrote {}", p.display())?;
    }
    if let Some(p) = &args.html {
        write_html(reports, p)?;
        writeln!(out, "wrote {}", p.display())?;
    }
    Ok(())
}
