//! `spillway demo`: unprotected vs Spillway vs Spillway with client throttling, on loopback, in
//! one command — the goodput curve of SRE book ch. 21 measured on this machine.
//!
//! Why a thin layer: the scenario and its table live in `spillway_load::demo` (tests run the
//! same code); this module prints them and checks the figures against the project's targets.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use spillway_load::demo::{self, DemoConfig, DemoRow, Mode};
use spillway_load::report;

use crate::load::emit;
use crate::UsageError;

/// `spillway demo` arguments.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Short smoke-test form: 2 workers (capacity 50/s), 15 s per run (about 50 s in all).
    #[arg(long)]
    quick: bool,
    /// Runs to make, comma-separated, in order: unprotected, spillway, spillway+throttle.
    #[arg(long, value_name = "RUNS", value_delimiter = ',', value_parser = parse_mode,
          default_value = "unprotected,spillway,spillway+throttle")]
    runs: Vec<Mode>,
    /// Print the `spillway load` arguments of the scenario's two streams (one line each:
    /// `--rate ... --class ...`) and exit (used by bench/peers.sh).
    #[arg(long, conflicts_with = "from_json")]
    print_streams: bool,
    /// Where to write the HTML report (three runs side by side).
    #[arg(long, value_name = "FILE", default_value = "spillway-demo.html")]
    html: PathBuf,
    /// Where to write the JSON report.
    #[arg(long, value_name = "FILE", default_value = "spillway-demo.json")]
    json: PathBuf,
    /// Seed of arrivals, mix and service times.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// No progress bars.
    #[arg(long)]
    quiet: bool,
    /// Serve the proxy's live dashboard here while the protected runs go on (loopback only; a
    /// free port is used if this one is taken).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9901")]
    dashboard: std::net::SocketAddr,
    /// Do not serve the dashboard.
    #[arg(long, conflicts_with = "dashboard")]
    no_dashboard: bool,
    /// Run nothing: read reports written by `spillway load --json` (or a previous demo) for the
    /// full demo's scenario and print their table and targets (used by bench/peers.sh).
    /// Reports with the same title are one run's two streams and are merged.
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with = "quick")]
    from_json: Vec<PathBuf>,
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    Mode::parse(s).ok_or_else(|| {
        format!("unknown run {s:?}; expected unprotected, spillway or spillway+throttle")
    })
}

/// Runs `spillway demo`.
pub fn run(args: &DemoArgs) -> Result<()> {
    let mut cfg = if args.quick {
        DemoConfig::quick()
    } else {
        DemoConfig::full()
    };
    cfg.seed = args.seed;
    if !args.dashboard.ip().is_loopback() {
        return Err(UsageError(format!(
            "--dashboard {}: expected a loopback address (127.0.0.0/8 or [::1]); the demo's \
             dashboard has no token",
            args.dashboard
        ))
        .into());
    }
    cfg.dashboard = (!args.no_dashboard).then_some(args.dashboard);
    cfg.modes = args.runs.clone();
    if args.print_streams {
        for stream in cfg.streams() {
            let mut line = format!(
                "--rate {} --seed {}",
                DemoConfig::rate_arg(&stream.shape),
                cfg.seed.wrapping_add(stream.seed_offset)
            );
            for class in DemoConfig::class_args(&stream.mix) {
                let _ = write!(line, " --class {class}");
            }
            emit(&format!("{}\n", line))?;
        }
        return Ok(());
    }
    let c = cfg.capacity();
    let secs = |d: std::time::Duration| d.as_secs_f64();
    let levels: Vec<String> = cfg.levels.iter().map(|l| format!("{l}×")).collect();
    emit(&format!(
        "spillway demo: backend {} workers × {:?} mean ({:?}) = capacity {c:.0} requests/s, \
         unbounded FIFO queue.\nScenario per run: {}s at 0.5×, then {} (each reached by a {}s \
         rise, held {}s), {}s at 0.5×, jump to {}× for {}s, {}s at 0.5×; 1 s timeout, {} \
         attempts.\nCustomer `good` sends a steady {:.0} requests/s (half CRITICAL, half \
         SHEDDABLE_PLUS); customer `noisy` sends the rest of the load, {:.0}% CRITICAL and the \
         rest SHEDDABLE (CRITICAL peaks at {:.2}× capacity).\nThe proxy is \
         given no capacity figure (zero-config adaptive limit). Goodput at a level: over its \
         held seconds after the first, as a share of min(offered, capacity).\n\n",
        cfg.workers,
        cfg.service,
        cfg.distribution,
        secs(cfg.warm),
        levels.join(", "),
        secs(cfg.rise),
        secs(cfg.hold),
        secs(cfg.calm),
        cfg.top(),
        secs(cfg.jump),
        secs(cfg.recover),
        cfg.attempts,
        cfg.good_rate(),
        cfg.noisy_critical_share * 100.0,
        (cfg.good_rate() / 2.0 + cfg.noisy_critical_share * (cfg.top() * c - cfg.good_rate())) / c,
    ))?;
    if !args.from_json.is_empty() {
        let mut reports = Vec::new();
        for path in &args.from_json {
            reports.extend(report::read_json(path).map_err(|e| UsageError(e.to_string()))?);
        }
        let reports = demo::merge_by_title(reports);
        let rows: Vec<DemoRow> = reports.iter().map(|r| demo::summarise(&cfg, r)).collect();
        emit(&format!(
            "{}\n{}",
            demo::render_table(&rows),
            targets(&rows)
        ))?;
        return Ok(());
    }
    let reports = demo::run_blocking(&cfg, !args.quiet)?;
    for r in &reports {
        emit(&format!("{}\n", crate::load::summary(r)))?;
    }
    let rows: Vec<DemoRow> = reports.iter().map(|r| demo::summarise(&cfg, r)).collect();
    emit(&format!(
        "{}\n{}",
        demo::render_table(&rows),
        targets(&rows)
    ))?;
    report::write_json(&reports, &args.json).with_context(|| "writing --json")?;
    report::write_html(&reports, &args.html).with_context(|| "writing --html")?;
    emit(&format!(
        "\nReports: {} and {}\n",
        args.html.display(),
        args.json.display()
    ))?;
    Ok(())
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

/// Goodput target at every level from 1× on and over the jump: a share of min(offered, capacity).
pub(crate) const GOODPUT_TARGET: f64 = 0.95;
/// CRITICAL success target, over the run and over the 10× seconds.
pub(crate) const CRITICAL_TARGET: f64 = 0.999;
/// Success target of the well-behaved customer `good`.
pub(crate) const GOOD_TARGET: f64 = 0.99;
/// Whole seconds after the jump within which goodput is back to 95%.
pub(crate) const RECOVERY_TARGET_S: u64 = 2;

/// A protected run's lowest goodput from 1× on, the jump included (0 for a level not measured).
pub(crate) fn lowest_goodput(r: &DemoRow) -> f64 {
    r.levels
        .iter()
        .zip(&r.goodput_at)
        .filter(|(level, _)| **level >= 1.0)
        .map(|(_, g)| *g)
        .chain([r.jump_goodput])
        .map(|g| g.unwrap_or(0.0))
        .fold(f64::INFINITY, f64::min)
}

/// Which of issue 5's targets a protected run met; one judgement for `spillway demo`'s verdicts
/// and `spillway sim --demo-seeds`' tallies. A figure the run did not measure (no CRITICAL
/// request, no recovery) misses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TargetsMet {
    /// Goodput at every level from 1× on and over the jump.
    pub goodput: bool,
    /// CRITICAL success over the run.
    pub critical: bool,
    /// CRITICAL success over the top level's seconds.
    pub critical_at_top: bool,
    /// The `good` customer's success.
    pub good: bool,
    /// Goodput back within `RECOVERY_TARGET_S` after the jump.
    pub recovered: bool,
}

impl TargetsMet {
    pub(crate) fn of(r: &DemoRow) -> Self {
        let at_least = |v: Option<f64>, target: f64| v.unwrap_or(0.0) >= target;
        TargetsMet {
            goodput: lowest_goodput(r) >= GOODPUT_TARGET,
            critical: at_least(demo::share(r.critical_counts), CRITICAL_TARGET),
            critical_at_top: at_least(demo::share(r.critical_at_top), CRITICAL_TARGET),
            good: at_least(r.good_success, GOOD_TARGET),
            recovered: r.recovery_s.is_some_and(|s| s <= RECOVERY_TARGET_S),
        }
    }

    /// Every target.
    pub(crate) fn all(&self) -> bool {
        self.goodput && self.critical && self.critical_at_top && self.good && self.recovered
    }
}

/// Each target of issue 5 with the measured figure and whether it was met.
fn targets(rows: &[DemoRow]) -> String {
    let mut out = String::new();
    let find = |m: Mode| rows.iter().find(|r| r.title == m.title());
    let fmt = |v: Option<f64>| v.map_or_else(|| "–".into(), |v| format!("{:.1}%", v * 100.0));
    let _ = writeln!(out, "Targets:");
    if let Some(u) = find(Mode::Unprotected) {
        let worst = u
            .goodput_at
            .last()
            .copied()
            .flatten()
            .into_iter()
            .chain(u.jump_goodput)
            .fold(f64::NAN, f64::max);
        let ok = worst < 0.2;
        let _ = writeln!(
            out,
            "  unprotected goodput at 10× below 20% of capacity: {} (ramp end and jump, the \
             higher) — {}",
            fmt(Some(worst)),
            verdict(ok)
        );
    }
    for r in rows.iter().filter(|r| r.title != Mode::Unprotected.title()) {
        let met = TargetsMet::of(r);
        let _ = writeln!(
            out,
            "  {}: goodput ≥ 95% of min(offered, capacity) from 1× to 10×: lowest {} — {}",
            r.title,
            fmt(Some(lowest_goodput(r))),
            verdict(met.goodput)
        );
        let _ = writeln!(
            out,
            "  {}: CRITICAL success ≥ 99.9% (CRITICAL below capacity throughout): {} over the \
             run — {}; {} over the 10× seconds (staircase hold and jump) — {}",
            r.title,
            demo::pct_of(r.critical_counts),
            verdict(met.critical),
            demo::pct_of(r.critical_at_top),
            verdict(met.critical_at_top)
        );
        let _ = writeln!(
            out,
            "  {}: customer `good` success ≥ 99%: {} — {}",
            r.title,
            fmt(r.good_success),
            verdict(met.good)
        );
        let secs = |v: Option<u64>| v.map_or_else(|| "not recovered".into(), |s| format!("{s} s"));
        let _ = writeln!(
            out,
            "  {}: goodput back to ≥ 95% within 2 s after the jump: {} — {}",
            r.title,
            secs(r.recovery_s),
            verdict(met.recovered)
        );
        if r.server_recovery_s != r.recovery_s {
            let _ = writeln!(
                out,
                "    (of the requests the clients' own throttle let through: {})",
                secs(r.server_recovery_s)
            );
        }
    }
    out
}
