//! The summary table printed after a simulation, one row per variant.
//!
//! Why these columns: the claims are goodput against offered load, success of the important
//! traffic, and the load multiplication retries cause at each layer (SRE book ch. 21); the
//! wasted-work share is what a metastable collapse looks like from inside (work finished for
//! callers that had already left).

use std::fmt::Write;

use super::SimRun;
use crate::report::Counts;

fn pct(c: &Counts) -> String {
    match c.success_ratio() {
        Some(r) => format!("{:.1}%", r * 100.0),
        None => "-".to_owned(),
    }
}

/// The table for `runs` (of one scenario), ending in a newline.
pub fn summary_table(runs: &[SimRun]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<22} {:>10} {:>10} {:>8} {:>9} {:>9} {:>9} {:>7} {:>7} {:>8} {:>9} {:>9}",
        "run",
        "offered/s",
        "goodput/s",
        "success",
        "rejected",
        "timed out",
        "throttled",
        "sent/req",
        "bottom×",
        "wasted",
        "p50 ms",
        "p99 ms"
    );
    for r in runs {
        let s = &r.report.summary;
        let bottom = r.layers.last().map_or(0.0, |l| l.amplification);
        let (served, wasted) = r
            .layers
            .iter()
            .fold((0u64, 0u64), |(a, b), l| (a + l.served, b + l.wasted));
        let wasted = if served > 0 {
            format!("{:.1}%", wasted as f64 * 100.0 / served as f64)
        } else {
            "-".to_owned()
        };
        let (p50, p99) = r
            .report
            .latency
            .as_ref()
            .map_or(("-".into(), "-".into()), |l| {
                (
                    format!("{:.1}", l.total.p50_ms),
                    format!("{:.1}", l.total.p99_ms),
                )
            });
        let _ = writeln!(
            out,
            "{:<22} {:>10.1} {:>10.1} {:>8} {:>9} {:>9} {:>9} {:>7.2} {:>7.2} {:>8} {:>9} {:>9}",
            r.report.title,
            s.offered_rps,
            s.goodput_rps,
            pct(&s.counts),
            s.counts.rejected,
            s.counts.timed_out,
            s.counts.throttled,
            s.amplification,
            bottom,
            wasted,
            p50,
            p99
        );
    }
    for r in runs {
        let s = &r.report.summary;
        let mut line = format!("  {}:", r.report.title);
        for (name, c) in &s.by_criticality {
            let _ = write!(line, " {name} {}", pct(c));
        }
        if s.by_customer.len() > 1 {
            line.push_str(" |");
            for (name, c) in &s.by_customer {
                let _ = write!(line, " {name} {}", pct(c));
            }
        }
        line.push_str(" | attempts per request at each layer (mean wait):");
        for l in &r.layers {
            let _ = write!(line, " {} {:.2}×", l.name, l.amplification);
            if let Some(w) = l.mean_wait_ms {
                let _ = write!(line, " ({w:.3} ms)");
            }
        }
        let _ = writeln!(out, "{line}");
    }
    out
}

/// Per-second rows of one run: offered, goodput and the bottom layer's arrivals.
pub fn series_table(r: &SimRun) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}\n{:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10}",
        r.report.title, "t", "offered", "goodput", "rejected", "timeout", "throttled", "bottom"
    );
    let bottom = r.layers.last();
    for s in &r.report.seconds {
        let b = bottom
            .and_then(|l| l.arrivals_per_s.get(s.t as usize))
            .copied()
            .unwrap_or(0);
        let c = &s.counts;
        let _ = writeln!(
            out,
            "{:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10}",
            s.t, c.offered, c.goodput, c.rejected, c.timed_out, c.throttled, b
        );
    }
    out
}
