//! The demo's side-by-side table: goodput at each load level, CRITICAL success, the well-behaved
//! customer's success, and time to recover after the surge — computed from run reports.
//!
//! Why from the reports rather than live: the same numbers must be recomputable from the JSON a
//! run wrote, and testable on synthetic reports.

use std::fmt::Write as _;

use super::DemoConfig;
use crate::report::{Counts, RunReport};

/// Offered-load levels (multiples of capacity) the table reports goodput at.
pub const LEVELS: [f64; 5] = [0.5, 1.0, 2.0, 5.0, 10.0];

/// Success ratio a second must reach to count as recovered (the 95%).
const RECOVERED: f64 = 0.95;

/// One run's line of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoRow {
    /// The run.
    pub title: String,
    /// Goodput as a fraction of capacity at each of [`LEVELS`] during the ramp (0.5 × from the
    /// warm-up); `None` if the run had no such second.
    pub goodput_at: Vec<Option<f64>>,
    /// Mean goodput as a fraction of capacity during the sudden jump to 10 ×.
    pub jump_goodput: Option<f64>,
    /// CRITICAL success over the whole run (CRITICAL stays below capacity throughout).
    pub critical_success: Option<f64>,
    /// The `good` customer's success over the whole run.
    pub good_success: Option<f64>,
    /// Whole seconds after the jump ends until every remaining second succeeds ≥ 95%; `None`
    /// if it never does before the run ends.
    pub recovery_s: Option<u64>,
    /// Attempts per request.
    pub amplification: f64,
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// Computes `report`'s row of the table, given the scenario it ran.
pub fn summarise(cfg: &DemoConfig, report: &RunReport) -> DemoRow {
    let c = cfg.capacity();
    let [warm, ramp, calm, jump, _] = cfg.phases.map(|d| d.as_secs_f64());
    let rows = &report.seconds;
    let goodput = |t: usize| rows.get(t).map(|s| s.counts.goodput as f64 / c);
    let goodput_at = LEVELS
        .iter()
        .map(|&level| {
            if level <= 0.5 {
                // The warm-up's seconds, skipping the first (connections being opened).
                let from = if warm >= 2.0 { 1 } else { 0 };
                return mean((from..warm as usize).filter_map(goodput));
            }
            // The ramp second whose middle is nearest to `level` × capacity.
            let rate_at = |t: f64| 0.5 + 9.5 * ((t - warm) / ramp).clamp(0.0, 1.0);
            (warm as usize..(warm + ramp) as usize)
                .min_by(|&a, &b| {
                    let da = (rate_at(a as f64 + 0.5) - level).abs();
                    let db = (rate_at(b as f64 + 0.5) - level).abs();
                    da.total_cmp(&db)
                })
                .and_then(goodput)
        })
        .collect();
    let jump_start = warm + ramp + calm;
    let jump_end = jump_start + jump;
    let jump_goodput = mean((jump_start as usize..jump_end as usize).filter_map(goodput));
    let ok = |t: usize| {
        rows.get(t)
            .and_then(|s| s.counts.success_ratio())
            .is_some_and(|r| r >= RECOVERED)
    };
    let end = rows.len();
    let recovery_s = (jump_end as usize..end)
        .find(|&t| (t..end).all(ok))
        .map(|t| (t - jump_end as usize) as u64);
    let ratio = |c: Option<&Counts>| c.and_then(Counts::success_ratio);
    DemoRow {
        title: report.title.clone(),
        goodput_at,
        jump_goodput,
        critical_success: ratio(report.summary.by_criticality.get("CRITICAL")),
        good_success: ratio(report.summary.by_customer.get("good")),
        recovery_s,
        amplification: report.summary.amplification,
    }
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), |v| format!("{:.1}%", v * 100.0))
}

/// The rows as a Markdown table (printed by `spillway demo`, pasted into BENCHMARKS.md).
pub fn render_table(rows: &[DemoRow]) -> String {
    let mut t = String::from("| run |");
    for level in LEVELS {
        let _ = write!(t, " goodput @ {level}× |");
    }
    t.push_str(" goodput @ 10× jump | CRITICAL success | `good` customer success | recovery after jump | attempts/request |\n|---|");
    for _ in 0..LEVELS.len() + 5 {
        t.push_str("---:|");
    }
    t.push('\n');
    for r in rows {
        let _ = write!(t, "| {} |", r.title);
        for g in &r.goodput_at {
            let _ = write!(t, " {} |", pct(*g));
        }
        let recovery = r
            .recovery_s
            .map_or_else(|| "not recovered".into(), |s| format!("{s} s"));
        let _ = writeln!(
            t,
            " {} | {} | {} | {recovery} | {:.2} |",
            pct(r.jump_goodput),
            pct(r.critical_success),
            pct(r.good_success),
            r.amplification
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use spillway_core::Criticality;

    use super::*;
    use crate::report::{Outcome, Recorder, RequestRecord};

    /// A synthetic run of the quick scenario (C = 50/s, phases 1+5+2+2+2 s) where every second
    /// offers 100 requests; `ok(t)` of them succeed.
    fn run(ok: impl Fn(usize) -> u64) -> RunReport {
        let mut r = Recorder::new("synthetic", Duration::from_secs(12));
        for t in 0..12usize {
            for i in 0..100u64 {
                let customer = if i % 10 == 0 { "good" } else { "noisy" };
                let crit = if i % 20 == 0 {
                    Criticality::Critical
                } else {
                    Criticality::Sheddable
                };
                r.record(&RequestRecord {
                    offered_at: Duration::from_millis(t as u64 * 1000 + i * 10),
                    criticality: crit,
                    customer,
                    attempts: 1,
                    outcome: if i < ok(t) || crit == Criticality::Critical {
                        Outcome::Success
                    } else {
                        Outcome::TimedOut
                    },
                    latency: Some(Duration::from_millis(5)),
                    queue_ms: None,
                    service_ms: None,
                });
            }
        }
        r.finish()
    }

    #[test]
    fn levels_jump_and_recovery() {
        let cfg = DemoConfig::quick();
        assert_eq!(cfg.capacity(), 50.0);
        // 50 succeed each second except seconds 10 (40) after the jump (8..10).
        let row = summarise(&cfg, &run(|t| if t == 10 { 40 } else { 50 }));
        // 50 successes + the 5 CRITICAL ones among 100 → 50..55 / 50 ≥ 100 %.
        assert!(row.goodput_at.iter().all(|g| g.unwrap() >= 1.0), "{row:?}");
        assert!((row.jump_goodput.unwrap() - 1.0).abs() < 0.11, "{row:?}");
        assert_eq!(row.critical_success, Some(1.0));
        // Success ratio is ~50% every second: never ≥ 95% → not recovered.
        assert_eq!(row.recovery_s, None);
        // All succeed from second 11 on: recovered 1 s after the jump ended (at 10 s).
        let row = summarise(&cfg, &run(|t| if t >= 11 { 100 } else { 10 }));
        assert_eq!(row.recovery_s, Some(1));
        let row = summarise(&cfg, &run(|_| 100));
        assert_eq!(row.recovery_s, Some(0));
        assert_eq!(row.good_success, Some(1.0));
        let table = render_table(&[row]);
        assert!(
            table.contains("| synthetic |") && table.contains("0 s"),
            "{table}"
        );
    }
}
