//! `spillway sim --demo-seeds N`: `spillway demo`'s targets judged over many seeds of its
//! protected run, simulated.
//!
//! Why: a demo run is one draw of its arrivals and service times. At 1 × offered load equals
//! capacity, and whether the level's two seconds reach 95 % of it depends on the draw: a
//! policy change judged on a handful of real runs (1 m 44 s each) cannot tell a cost of a
//! point from luck. The simulated run (`spillway_load::demo::simulated`: the same
//! configuration, the proxy's zero-config admission taken whole) takes milliseconds, so the
//! targets can be counted over hundreds of seeds. What it does not model (network, proxy CPU,
//! the clients' own throttle) the real demo still has to show.

use std::io::Write;

use anyhow::Result;
use spillway_load::demo::{share, simulated, summarise, DemoConfig, Mode};

use crate::demo::{TargetsMet, CRITICAL_TARGET, GOODPUT_TARGET, GOOD_TARGET, RECOVERY_TARGET_S};
use crate::UsageError;

/// The most seeds one invocation runs (a few milliseconds each).
pub const MAX_SEEDS: u64 = 100_000;

/// One figure over the seeds (goodput at a level, or `good`'s success): its sum, lowest and
/// how many seeds missed the target.
#[derive(Default)]
struct Tally {
    sum: f64,
    n: u64,
    lowest: Option<f64>,
    missed: u64,
}

impl Tally {
    fn add(&mut self, v: Option<f64>, target: f64) {
        let v = v.unwrap_or(0.0);
        self.sum += v;
        self.n += 1;
        self.lowest = Some(self.lowest.map_or(v, |l| l.min(v)));
        if v < target {
            self.missed += 1;
        }
    }

    fn row(&self, name: &str) -> String {
        let pct = |v: f64| format!("{:.1}%", v * 100.0);
        let mean = if self.n == 0 {
            0.0
        } else {
            self.sum / self.n as f64
        };
        format!(
            "{name:<10} {:>8} {:>8} {:>8}",
            pct(mean),
            self.lowest.map_or_else(|| "-".into(), pct),
            self.missed
        )
    }
}

/// Runs the demo's protected scenario simulated at seeds `first..first + n` and prints, per
/// target, the mean and lowest figure and the seeds that missed it.
pub fn demo_seeds(cfg: &DemoConfig, first: u64, n: u64, out: &mut impl Write) -> Result<()> {
    if n == 0 || n > MAX_SEEDS {
        return Err(UsageError(format!("--demo-seeds {n}: expected 1 to {MAX_SEEDS}")).into());
    }
    let mut levels: Vec<(f64, Tally)> = Vec::new();
    let (mut jump, mut good) = (Tally::default(), Tally::default());
    let (mut crit, mut crit_top) = ((0u64, 0u64), (0u64, 0u64));
    let (mut crit_missed, mut slow_recovery, mut all_met) = (0u64, 0u64, 0u64);
    for k in 0..n {
        let mut c = cfg.clone();
        c.seed = first.wrapping_add(k);
        let sc = simulated::scenario(&c, Mode::Spillway).map_err(UsageError)?;
        let run = spillway_sim::run_one(&sc, "spillway").map_err(|e| UsageError(e.to_string()))?;
        let row = summarise(&c, &run.report);
        for (i, (&level, &g)) in row.levels.iter().zip(&row.goodput_at).enumerate() {
            if levels.len() <= i {
                levels.push((level, Tally::default()));
            }
            // 0.5 × is the warm-up: served in full, not a target.
            levels[i]
                .1
                .add(g, if level >= 1.0 { GOODPUT_TARGET } else { 0.0 });
        }
        jump.add(row.jump_goodput, GOODPUT_TARGET);
        good.add(row.good_success, GOOD_TARGET);
        crit = (
            crit.0 + row.critical_counts.0,
            crit.1 + row.critical_counts.1,
        );
        crit_top = (
            crit_top.0 + row.critical_at_top.0,
            crit_top.1 + row.critical_at_top.1,
        );
        let met = TargetsMet::of(&row);
        crit_missed += u64::from(!(met.critical && met.critical_at_top));
        slow_recovery += u64::from(!met.recovered);
        all_met += u64::from(met.all());
    }
    let last = first.wrapping_add(n - 1);
    writeln!(
        out,
        "spillway demo, protected run simulated at seeds {first}..={last} ({} workers, capacity \
         {:.0}/s)\n",
        cfg.workers,
        cfg.capacity()
    )?;
    writeln!(
        out,
        "{:<10} {:>8} {:>8} {:>8}",
        "success", "mean", "lowest", "missed"
    )?;
    for (level, t) in &levels {
        let target = if *level >= 1.0 {
            ""
        } else {
            " (warm-up, no target)"
        };
        writeln!(out, "{}{target}", t.row(&format!("@{level}×")))?;
    }
    writeln!(out, "{}", jump.row("jump"))?;
    writeln!(out, "{}", good.row("`good`"))?;
    let pct = |c: (u64, u64)| share(c).map_or_else(|| "-".into(), |s| format!("{:.3}%", s * 100.0));
    writeln!(
        out,
        "\nCRITICAL: {}/{} ({}) over all seeds, {} at {}× ({}/{}); seeds below {:.1}%: \
         {crit_missed}",
        crit.0,
        crit.1,
        pct(crit),
        pct(crit_top),
        cfg.top(),
        crit_top.0,
        crit_top.1,
        CRITICAL_TARGET * 100.0
    )?;
    writeln!(
        out,
        "recovery after the jump over {RECOVERY_TARGET_S} s (or never): {slow_recovery} seeds"
    )?;
    writeln!(
        out,
        "every target met (goodput ≥ {:.0}% from 1× on and over the jump, CRITICAL, `good` ≥ \
         {:.0}%, recovery): {all_met} of {n} seeds",
        GOODPUT_TARGET * 100.0,
        GOOD_TARGET * 100.0
    )?;
    Ok(())
}
