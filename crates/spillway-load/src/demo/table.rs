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
    /// warm-up; the others at the second [`level_second`] picks: the first offering at least
    /// that level); `None` if the run had no such second.
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

/// The ramp second the table reports goodput at for `level` (a multiple of capacity above the
/// warm-up's 0.5 ×): the first whole second that offers at least `level` × capacity from its
/// start — the ramp rises, so all of it is at or just above the level. The top level (10 ×)
/// is reached only as the ramp ends, so it falls back to the ramp's last second, the highest
/// load the ramp offers (9.4–10 × with the full scenario's 16 s ramp; the jump column shows a
/// steady 10 ×). `None` if the scenario has no ramp.
///
/// Why not the second whose middle is nearest the level: at 1 × that second straddles it and
/// offers about 0.8 × on average, so its goodput could never show ≥ 95% of capacity.
pub(crate) fn level_second(cfg: &DemoConfig, level: f64) -> Option<usize> {
    let [warm, ramp, ..] = cfg.phases.map(|d| d.as_secs_f64());
    // Offered load (× capacity) at time `t`, as the ramp phase schedules it (0.5 → 10 ×).
    let rate_at = |t: f64| 0.5 + 9.5 * ((t - warm) / ramp).clamp(0.0, 1.0);
    let mut seconds = warm as usize..(warm + ramp) as usize;
    seconds
        .clone()
        .find(|&t| rate_at(t as f64) >= level)
        .or_else(|| seconds.next_back())
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
            level_second(cfg, level).and_then(goodput)
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
    fn each_level_uses_the_first_second_at_or_above_it() {
        // Quick scenario: warm-up 0..1 s, ramp 1..6 s from 0.5 × to 10 ×, so the ramp seconds
        // start at 0.5, 2.4, 4.3, 6.2 and 8.1 ×.
        let cfg = DemoConfig::quick();
        assert_eq!(level_second(&cfg, 1.0), Some(2), "second 1 starts at 0.5 ×");
        assert_eq!(level_second(&cfg, 2.0), Some(2));
        assert_eq!(level_second(&cfg, 5.0), Some(4), "second 3 starts at 4.3 ×");
        // 10 × only at the ramp's end: its last second.
        assert_eq!(level_second(&cfg, 10.0), Some(5));
        // Full scenario (3 + 16 s): 1 × at second 4 (1.09 ×), 2 × at 6, 5 × at 11, 10 × at 18.
        let full = DemoConfig::full();
        let picks: Vec<_> = [1.0, 2.0, 5.0, 10.0]
            .map(|l| level_second(&full, l))
            .to_vec();
        assert_eq!(picks, vec![Some(4), Some(6), Some(11), Some(18)]);
        // The row reports those seconds' goodput: `ok(t) = 10 t` successes plus the CRITICAL
        // ones (every 20th request, all succeed) not already counted.
        let row = summarise(&cfg, &run(|t| 10 * t as u64));
        let expect = |t: u64| {
            let ok = 10 * t;
            (ok + (0..100).step_by(20).filter(|&i| i >= ok).count() as u64) as f64 / 50.0
        };
        let at: Vec<f64> = row.goodput_at[1..].iter().map(|g| g.unwrap()).collect();
        assert_eq!(at, vec![expect(2), expect(2), expect(4), expect(5)]);
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
