//! The demo's side-by-side table: goodput at each load level, CRITICAL success, the well-behaved
//! customer's success, and time to recover after the surge — computed from run reports.
//!
//! Why from the reports rather than live: the same numbers must be recomputable from the JSON a
//! run wrote, and testable on synthetic reports.
//!
//! Goodput at a level is measured over the level's held seconds after the first (see
//! [`DemoConfig::level_window`]) as a share of what an ideal server could have served in them:
//! `goodput / min(offered, capacity × seconds)`. From 2 × on that is the share of capacity; at
//! 1 × it is the share of the requests actually offered when Poisson arrivals offered fewer
//! than capacity (a server cannot serve what was not asked), and at 0.5 × it is the share of
//! the offered load served.

use std::fmt::Write as _;
use std::ops::Range;

use super::DemoConfig;
#[cfg(test)]
use crate::load::RateShape;
use crate::report::{Counts, RunReport};

/// Success ratio a second must reach to count as recovered (the 95%).
const RECOVERED: f64 = 0.95;

/// One run's line of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoRow {
    /// The run.
    pub title: String,
    /// The levels of the scenario the table reports, × capacity: 0.5 (the warm-up) then
    /// [`DemoConfig::levels`].
    pub levels: Vec<f64>,
    /// Goodput measured at each of [`levels`](Self::levels) (module docs); `None` if the run
    /// has no such seconds.
    pub goodput_at: Vec<Option<f64>>,
    /// The same over the sudden jump's seconds (all of them, the first included).
    pub jump_goodput: Option<f64>,
    /// CRITICAL success over the whole run (CRITICAL stays below capacity throughout).
    pub critical_success: Option<f64>,
    /// CRITICAL requests over the whole run: (succeeded, offered).
    pub critical_counts: (u64, u64),
    /// CRITICAL success over every second offered at the top level (its whole hold on the
    /// staircase and the whole jump), where CRITICAL traffic is highest: (succeeded, offered).
    pub critical_at_top: (u64, u64),
    /// The `good` customer's success over the whole run.
    pub good_success: Option<f64>,
    /// Whole seconds after the jump ends until every remaining second succeeds ≥ 95%; `None`
    /// if it never does before the run ends.
    pub recovery_s: Option<u64>,
    /// The same for the requests that reached the server (offered minus those the client's
    /// own throttle refused): with throttling clients, recovery of what the server answers
    /// can come long before the clients stop refusing locally.
    pub server_recovery_s: Option<u64>,
    /// Attempts per request.
    pub amplification: f64,
}

/// Goodput over `seconds` of `report` as a share of `min(offered, capacity × seconds)`.
pub(crate) fn servable_share(
    report: &RunReport,
    capacity: f64,
    seconds: Range<u64>,
) -> Option<f64> {
    let mut sum = Counts::default();
    let mut n = 0u64;
    for t in seconds {
        let row = report.seconds.get(usize::try_from(t).ok()?)?;
        sum.add(&row.counts);
        n += 1;
    }
    let servable = (sum.offered as f64).min(capacity * n as f64);
    (servable > 0.0).then(|| sum.goodput as f64 / servable)
}

/// Computes `report`'s row of the table, given the scenario it ran.
pub fn summarise(cfg: &DemoConfig, report: &RunReport) -> DemoRow {
    let c = cfg.capacity();
    let levels: Vec<f64> = std::iter::once(super::CALM)
        .chain(cfg.levels.iter().copied())
        .collect();
    let goodput_at = levels
        .iter()
        .map(|&level| {
            cfg.level_window(level)
                .and_then(|w| servable_share(report, c, w))
        })
        .collect();
    let jump = cfg.jump_window();
    let jump_end = jump.end as usize;
    let jump_goodput = servable_share(report, c, jump);
    let rows = &report.seconds;
    let ok = |t: usize| {
        rows.get(t)
            .and_then(|s| s.counts.success_ratio())
            .is_some_and(|r| r >= RECOVERED)
    };
    let server_ok = |t: usize| {
        rows.get(t).is_some_and(|s| {
            let reached = s.counts.offered - s.counts.throttled;
            reached == 0 || s.counts.goodput as f64 >= RECOVERED * reached as f64
        })
    };
    let end = rows.len();
    let recovery = |ok: &dyn Fn(usize) -> bool| {
        (jump_end..end)
            .find(|&t| (t..end).all(ok))
            .map(|t| (t - jump_end) as u64)
    };
    let recovery_s = recovery(&ok);
    let server_recovery_s = recovery(&server_ok);
    let ratio = |c: Option<&Counts>| c.and_then(Counts::success_ratio);
    let pair = |c: Option<&Counts>| c.map_or((0, 0), |c| (c.goodput, c.offered));
    let top = cfg.top();
    let mut at_top = Counts::default();
    for t in cfg
        .level_hold(top)
        .into_iter()
        .flatten()
        .chain(cfg.jump_window())
    {
        if let Some(c) = rows
            .get(t as usize)
            .and_then(|s| s.by_criticality.get("CRITICAL"))
        {
            at_top.add(c);
        }
    }
    DemoRow {
        title: report.title.clone(),
        levels,
        goodput_at,
        jump_goodput,
        critical_success: ratio(report.summary.by_criticality.get("CRITICAL")),
        critical_counts: pair(report.summary.by_criticality.get("CRITICAL")),
        critical_at_top: (at_top.goodput, at_top.offered),
        good_success: ratio(report.summary.by_customer.get("good")),
        recovery_s,
        server_recovery_s,
        amplification: report.summary.amplification,
    }
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), |v| format!("{:.1}%", v * 100.0))
}

/// `succeeded / offered` as a ratio (`None` when nothing was offered).
pub fn share((ok, of): (u64, u64)) -> Option<f64> {
    (of > 0).then(|| ok as f64 / of as f64)
}

/// `99.8% (498/499)`: the ratio with its counts (a 99.9% bar needs both to be read).
pub fn pct_of(counts: (u64, u64)) -> String {
    match share(counts) {
        None => "–".into(),
        Some(v) => format!("{:.1}% ({}/{})", v * 100.0, counts.0, counts.1),
    }
}

/// The rows as a Markdown table (printed by `spillway demo`, pasted into BENCHMARKS.md). The
/// columns are the first row's levels.
pub fn render_table(rows: &[DemoRow]) -> String {
    let levels: Vec<f64> = rows.first().map(|r| r.levels.clone()).unwrap_or_default();
    let mut t = String::from("| run |");
    for level in &levels {
        let _ = write!(t, " goodput @ {level}× |");
    }
    t.push_str(" goodput @ 10× jump | CRITICAL success | CRITICAL success @ 10× | `good` customer success | recovery after jump | attempts/request |\n|---|");
    for _ in 0..levels.len() + 6 {
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
            " {} | {} | {} | {} | {recovery} | {:.2} |",
            pct(r.jump_goodput),
            pct_of(r.critical_counts),
            pct_of(r.critical_at_top),
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

    /// A synthetic run of the quick scenario (C = 50/s, 15 s) where second `t` offers
    /// `offered(t)` requests, the first `ok(t)` of which succeed; every 10th is customer `good`,
    /// every 20th CRITICAL.
    fn run(offered: impl Fn(usize) -> u64, ok: impl Fn(usize) -> u64) -> RunReport {
        run_failing(offered, ok, Outcome::TimedOut)
    }

    /// [`run`], with the failures ending as `failure`.
    fn run_failing(
        offered: impl Fn(usize) -> u64,
        ok: impl Fn(usize) -> u64,
        failure: Outcome,
    ) -> RunReport {
        let mut r = Recorder::new("synthetic", Duration::from_secs(15));
        for t in 0..15usize {
            for i in 0..offered(t) {
                r.record(&RequestRecord {
                    offered_at: Duration::from_millis(t as u64 * 1000 + i),
                    criticality: if i % 20 == 0 {
                        Criticality::Critical
                    } else {
                        Criticality::Sheddable
                    },
                    customer: if i % 10 == 0 { "good" } else { "noisy" },
                    attempts: 1,
                    outcome: if i < ok(t) { Outcome::Success } else { failure },
                    latency: Some(Duration::from_millis(5)),
                    queue_ms: None,
                    service_ms: None,
                });
            }
        }
        r.finish()
    }

    #[test]
    fn windows_skip_each_holds_settling_second() {
        // Quick: warm 0, then 1 × held 1..3, 2 × 3..5, 5 × 5..7, 10 × 7..9, calm 9..11,
        // jump 11..13, recovery 13..15.
        let q = DemoConfig::quick();
        assert_eq!(q.total(), Duration::from_secs(15));
        let w: Vec<_> = [0.5, 1.0, 2.0, 5.0, 10.0]
            .map(|l| q.level_window(l))
            .to_vec();
        assert_eq!(
            w,
            vec![Some(0..1), Some(2..3), Some(4..5), Some(6..7), Some(8..9)]
        );
        assert_eq!(q.jump_window(), 11..13);
        assert_eq!(q.level_window(3.0), None);
        assert_eq!(q.level_hold(10.0), Some(7..9));
        assert_eq!(q.level_hold(0.5), Some(0..1));
        // Full: warm 0..3; each level is reached by a 1 s rise and held 3 s; calm 4 s; jump
        // 5 s; recovery 6 s.
        let f = DemoConfig::full();
        assert_eq!(f.total(), Duration::from_secs(34));
        let w: Vec<_> = [0.5, 1.0, 2.0, 5.0, 10.0]
            .map(|l| f.level_window(l))
            .to_vec();
        assert_eq!(
            w,
            vec![
                Some(1..3),
                Some(5..7),
                Some(9..11),
                Some(13..15),
                Some(17..19)
            ]
        );
        assert_eq!(f.jump_window(), 23..28);
        assert_eq!(f.level_hold(10.0), Some(16..19));
    }

    #[test]
    fn goodput_is_a_share_of_what_could_be_served() {
        let cfg = DemoConfig::quick();
        assert_eq!(cfg.capacity(), 50.0);
        // 100 offered each second, 45 served: 90% of capacity at every overloaded level.
        let row = summarise(&cfg, &run(|_| 100, |_| 45));
        assert_eq!(row.levels, vec![0.5, 1.0, 2.0, 5.0, 10.0]);
        let at: Vec<_> = row.goodput_at.iter().map(|g| g.unwrap()).collect();
        assert!(at.iter().all(|g| (g - 0.9).abs() < 1e-9), "{at:?}");
        assert!((row.jump_goodput.unwrap() - 0.9).abs() < 1e-9);
        // Only 40 offered in the 1 × window (second 2), all served: 100% of what was servable
        // (not 80% of capacity).
        let row = summarise(&cfg, &run(|t| if t == 2 { 40 } else { 100 }, |_| 50));
        assert_eq!(row.goodput_at[1], Some(1.0));
        assert_eq!(row.goodput_at[2], Some(1.0));
        // Nothing offered: no figure.
        let row = summarise(&cfg, &run(|t| if t == 4 { 0 } else { 100 }, |_| 50));
        assert_eq!(row.goodput_at[2], None);
    }

    #[test]
    fn recovery_and_success_ratios() {
        let cfg = DemoConfig::quick();
        // ~50% success every second: never ≥ 95% → not recovered. Every 20th request is
        // CRITICAL and among the first 50 of each second only for i in {0, 20, 40}.
        let row = summarise(&cfg, &run(|_| 100, |_| 50));
        assert_eq!(row.recovery_s, None);
        assert_eq!(row.critical_success, Some(0.6));
        // 15 s × 3 of 5; at the top level (hold 7..9 and jump 11..13) 4 s × 3 of 5.
        assert_eq!(row.critical_counts, (45, 75));
        assert_eq!(row.critical_at_top, (12, 20));
        assert_eq!(pct_of(row.critical_at_top), "60.0% (12/20)");
        assert_eq!(row.good_success, Some(0.5));
        // CRITICAL fails only while the top level is offered: the whole-run figure dilutes
        // it (65/75), the top-level one does not (0/20).
        let top = |t: usize| (7..9).contains(&t) || (11..13).contains(&t);
        let row = summarise(&cfg, &run(|_| 100, |t| if top(t) { 0 } else { 100 }));
        assert_eq!(row.critical_counts, (55, 75));
        assert_eq!(row.critical_at_top, (0, 20));
        assert_eq!(share(row.critical_at_top), Some(0.0));
        assert_eq!(share((0, 0)), None);
        // All succeed from second 14 on: recovered 1 s after the jump ended (at 13 s).
        let row = summarise(&cfg, &run(|_| 100, |t| if t >= 14 { 100 } else { 10 }));
        assert_eq!(row.recovery_s, Some(1));
        let row = summarise(&cfg, &run(|_| 100, |_| 100));
        assert_eq!(row.recovery_s, Some(0));
        assert_eq!(row.server_recovery_s, Some(0));
        assert_eq!(row.good_success, Some(1.0));
        // Throttling clients: half refused locally until the end, but every request they let
        // through succeeds — the server recovered at once, the clients did not.
        let row = summarise(
            &cfg,
            &run_failing(
                |_| 100,
                |t| if t >= 14 { 50 } else { 10 },
                Outcome::Throttled,
            ),
        );
        assert_eq!(row.recovery_s, None);
        assert_eq!(row.server_recovery_s, Some(0));
        // Server-side failures count for both.
        let row = summarise(&cfg, &run(|_| 100, |t| if t >= 14 { 100 } else { 10 }));
        assert_eq!((row.recovery_s, row.server_recovery_s), (Some(1), Some(1)));
        let row = summarise(&cfg, &run(|_| 100, |_| 100));
        let table = render_table(&[row]);
        assert!(
            table.contains("| synthetic |") && table.contains("0 s") && table.contains("@ 10×"),
            "{table}"
        );
    }

    #[test]
    fn streams_add_up_to_the_shape() {
        for cfg in [DemoConfig::full(), DemoConfig::quick()] {
            let total = cfg.total().as_secs_f64();
            let streams = cfg.streams();
            let mut peak_critical = 0.0f64;
            assert_eq!(streams.len(), 2);
            assert_eq!(streams[0].customer, "good");
            for i in 0..(total * 10.0) as usize {
                let t = i as f64 / 10.0 + 0.05;
                let sum: f64 = streams.iter().map(|s| s.shape.rate_at(t, total)).sum();
                let want = cfg.shape().rate_at(t, total);
                assert!((sum - want).abs() < 1e-6, "t={t}: {sum} vs {want}");
                // good is steady at 0.2 C whatever the level.
                let good = streams[0].shape.rate_at(t, total);
                assert!((good - 0.2 * cfg.capacity()).abs() < 1e-9);
                // CRITICAL, and CRITICAL with SHEDDABLE_PLUS, stay below capacity (the
                // CRITICAL target's precondition) at every instant.
                let rate_of = |want: &[Criticality]| -> f64 {
                    streams
                        .iter()
                        .map(|s| {
                            let classes = s.mix.classes();
                            let sum: f64 = classes.iter().map(|c| c.weight).sum();
                            let w: f64 = classes
                                .iter()
                                .filter(|c| want.contains(&c.criticality))
                                .map(|c| c.weight)
                                .sum();
                            s.shape.rate_at(t, total) * w / sum
                        })
                        .sum()
                };
                let critical = rate_of(&[Criticality::Critical]);
                let protected = rate_of(&[Criticality::Critical, Criticality::SheddablePlus]);
                assert!(protected < 0.75 * cfg.capacity(), "t={t}: {protected}");
                peak_critical = peak_critical.max(critical / cfg.capacity());
            }
            // ... and CRITICAL does grow with the surge: 0.1 C from `good` + 5% of `noisy`'s
            // 9.8 C at 10 ×.
            assert!((peak_critical - 0.59).abs() < 1e-6, "{peak_critical}");
            assert_eq!(streams[1].mix.classes().len(), 2);
            // The --rate string parses back to the same shape.
            for s in &streams {
                let arg = DemoConfig::rate_arg(&s.shape);
                assert_eq!(RateShape::parse(&arg).unwrap(), s.shape, "{arg}");
                for c in DemoConfig::class_args(&s.mix) {
                    assert!(crate::load::TrafficClass::parse(&c).is_ok(), "{c}");
                }
            }
        }
    }
}
