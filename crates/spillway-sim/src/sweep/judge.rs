//! Issue 28's requirements 1–4, judged per cell, and the sweep's summary: per requirement,
//! pass or fail, how many cells fail, and the worst cell with its figures.
//!
//! Where a requirement applies (each says so in its `scope`):
//! - R1 do no harm: Poisson cells offered at most 0.9 × capacity — protected success within the
//!   timeout at least the unprotected's minus 0.1 percentage point — and closed-loop cells —
//!   protected goodput at least the unprotected's (the same proxy with the limit off: the
//!   simulated proxy adds nothing else) minus 0.1 %, over the span both runs offered in
//!   when one stopped early at the request cap (`RunFigures::goodput_over_common_span`).
//! - R2 CRITICAL: open-loop cells offered 1×–10× with CRITICAL traffic at most 0.8 of the
//!   lowest capacity of the run (a capacity drop lowers it) — CRITICAL success ≥ 99.9 %.
//! - R3 goodput: open-loop cells offered 1×–10× — goodput ≥ 95 % of ∫ min(offered, capacity),
//!   both over the offering window: only answers to work the backend started within it count
//!   (a queue drained after the window would otherwise count against a window that cannot hold
//!   it: up to 365 % of capacity where the window was shorter than the client timeout).
//! - R4a refuse early: open-loop cells offered ≥ 2× — median arrival → refusal ≤ 10 ms, a
//!   request whose client gave up while the proxy queued it counting as refused at its deadline.
//! - R4b deadline-bounded queueing: every protected run — no request leaves the proxy's queue
//!   after its deadline minus the mean service time.

use super::cell::RunFigures;
use super::config::{BackendKind, CellSpec, SweepConfig, Thresholds};

/// The checks, in report order.
pub const CHECKS: [Check; 5] = [
    Check::DoNoHarm,
    Check::Critical,
    Check::Goodput,
    Check::RefuseEarly,
    Check::QueueWait,
];

/// One requirement's check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Check {
    /// R1.
    DoNoHarm,
    /// R2.
    Critical,
    /// R3.
    Goodput,
    /// R4, median time to refusal.
    RefuseEarly,
    /// R4, queued waits bounded by the deadline.
    QueueWait,
}

impl Check {
    /// Short id.
    pub fn id(self) -> &'static str {
        match self {
            Check::DoNoHarm => "R1",
            Check::Critical => "R2",
            Check::Goodput => "R3",
            Check::RefuseEarly => "R4a",
            Check::QueueWait => "R4b",
        }
    }

    /// What it demands, with the thresholds.
    pub fn title(self, t: &Thresholds) -> String {
        match self {
            Check::DoNoHarm => format!(
                "do no harm: offered <= {}x (Poisson) success >= unprotected - {} pp; closed \
                 loop goodput >= limit off - {} %",
                t.do_no_harm_upto, t.do_no_harm_pp, t.do_no_harm_pp
            ),
            Check::Critical => format!(
                "CRITICAL: share <= {} of capacity, offered {}x-{}x: CRITICAL success >= {}%",
                t.critical_share_max,
                t.overload_from,
                t.overload_to,
                t.critical_success * 100.0
            ),
            Check::Goodput => format!(
                "goodput: offered {}x-{}x: >= {}% of min(offered, capacity)",
                t.overload_from,
                t.overload_to,
                t.goodput_fraction * 100.0
            ),
            Check::RefuseEarly => format!(
                "refuse early: offered >= {}x: median arrival->refusal <= {} ms",
                t.sustained_from, t.refusal_median_ms
            ),
            Check::QueueWait => "queue waits: none past deadline - mean service".to_owned(),
        }
    }
}

/// A check's result in one cell.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Verdict {
    /// Whether it passed.
    pub pass: bool,
    /// The figure judged (R1: pp or % over the unprotected; R2: CRITICAL success; R3: goodput
    /// share; R4a: median ms; R4b: late queue exits). Higher is better for R1–R3, lower for R4.
    pub figure: f64,
}

/// Judges `check` on a cell; `None` where it does not apply.
pub fn judge(
    check: Check,
    spec: &CellSpec,
    sweep: &SweepConfig,
    protected: &RunFigures,
    unprotected: &RunFigures,
) -> Option<Verdict> {
    let t = &sweep.thresholds;
    let open = spec.arrivals.is_open();
    let overload = open && spec.offered >= t.overload_from && spec.offered <= t.overload_to;
    match check {
        Check::DoNoHarm => {
            if open {
                if spec.arrivals != super::config::ArrivalKind::Poisson
                    || spec.offered > t.do_no_harm_upto
                {
                    return None;
                }
                let pp = (protected.success() - unprotected.success()) * 100.0;
                Some(Verdict {
                    pass: pp >= -t.do_no_harm_pp - 1e-9,
                    figure: pp,
                })
            } else {
                let pct = closed_loop_change_pct(protected, unprotected);
                Some(Verdict {
                    pass: pct >= -t.do_no_harm_pp - 1e-9,
                    figure: pct,
                })
            }
        }
        Check::Critical => {
            let lowest = match spec.backend {
                BackendKind::CapacityDrop => sweep.model.drop_factor,
                _ => 1.0,
            };
            if !overload
                || spec.critical_share <= 0.0
                || spec.critical_share > t.critical_share_max * lowest + 1e-12
            {
                return None;
            }
            let s = protected.critical_success()?;
            Some(Verdict {
                pass: s >= t.critical_success,
                figure: s,
            })
        }
        Check::Goodput => {
            if !overload {
                return None;
            }
            let g = protected.goodput_fraction();
            Some(Verdict {
                pass: g >= t.goodput_fraction,
                figure: g,
            })
        }
        Check::RefuseEarly => {
            if !open || spec.offered < t.sustained_from {
                return None;
            }
            // Nothing refused under sustained overload is not early refusal: everything
            // beyond capacity then timed out instead.
            let m = protected.refusal_median_ms.unwrap_or(f64::INFINITY);
            Some(Verdict {
                pass: m <= t.refusal_median_ms,
                figure: m,
            })
        }
        Check::QueueWait => Some(Verdict {
            pass: protected.late_queue_exits == 0,
            figure: protected.late_queue_exits as f64,
        }),
    }
}

/// Whether verdict `a` is worse than `b` for `check`.
pub fn worse(check: Check, a: &Verdict, b: &Verdict) -> bool {
    match check {
        Check::DoNoHarm | Check::Critical | Check::Goodput => a.figure < b.figure,
        Check::RefuseEarly | Check::QueueWait => a.figure > b.figure,
    }
}

/// The figures of a cell that matter for `check`, as one line.
pub fn describe(check: Check, spec: &CellSpec, p: &RunFigures, u: &RunFigures) -> String {
    let pct = |x: f64| format!("{:.2}%", x * 100.0);
    let cap = spec.capacity();
    match check {
        Check::DoNoHarm if spec.arrivals.is_open() => format!(
            "success protected {} vs unprotected {} ({:+.2} pp; second half of {:.3} s: {} vs \
             {}); refused {} ({})",
            pct(p.success()),
            pct(u.success()),
            (p.success() - u.success()) * 100.0,
            p.duration_s,
            pct(p.late_success()),
            pct(u.late_success()),
            p.refused,
            reasons(p)
        ),
        Check::DoNoHarm => {
            let (pg, ug) = p.goodput_over_common_span(u);
            format!(
                "goodput protected {:.0}/s vs limit off {:.0}/s ({:+.2}%) = {:.3}x capacity; \
                 refused {} ({}){}",
                pg,
                ug,
                closed_loop_change_pct(p, u),
                pg / cap,
                p.refused,
                reasons(p),
                match p.common_span_s(u) {
                    Some(span) => format!(
                        "; stopped at {:.3} s (the request cap): both over their first {span:.3} \
                         s (whole runs: {:.0}/s vs {:.0}/s)",
                        p.duration_s.min(u.duration_s),
                        p.goodput_rps,
                        u.goodput_rps
                    ),
                    None if p.truncated => {
                        format!("; stopped at {:.3} s (the request cap)", p.duration_s)
                    }
                    None => String::new(),
                }
            )
        }
        Check::Critical => format!(
            "CRITICAL success {} ({} of {} served in time; unprotected {}; CRITICAL refused {}, \
             timed out {}); all refused {} ({}), timed out {}",
            pct(p.critical_success().unwrap_or(1.0)),
            p.critical_ok,
            p.critical_offered,
            pct(u.critical_success().unwrap_or(1.0)),
            reason_list(&p.critical_refused_by_reason),
            p.critical_timed_out,
            p.refused,
            reasons(p),
            p.timed_out
        ),
        Check::Goodput => format!(
            "goodput {:.0}/s = {} of min(offered, capacity) {:.0}/s (unprotected {}); \
             refused {}, timed out {}",
            p.window_goodput_rps,
            pct(p.goodput_fraction()),
            p.reference_rps,
            pct(u.goodput_fraction()),
            p.refused,
            p.timed_out
        ),
        Check::RefuseEarly => format!(
            "median arrival->refusal {} over {} refusals ({}) and {} abandoned in the proxy's \
             queue; timed out {}",
            p.refusal_median_ms
                .map_or("none refused".to_owned(), |m| format!("{m:.2} ms")),
            p.refused,
            reasons(p),
            p.abandoned_in_queue,
            p.timed_out
        ),
        Check::QueueWait => format!(
            "{} queue exits past deadline - mean service (worst {:.2} ms late; timeout {} ms)",
            p.late_queue_exits,
            p.late_queue_worst_ms,
            spec.timeout_ms()
        ),
    }
}

/// R1's closed-loop figure: the protected goodput's change from the limit-off run's, %, over
/// the span both offered in (`RunFigures::goodput_over_common_span`).
fn closed_loop_change_pct(protected: &RunFigures, unprotected: &RunFigures) -> f64 {
    let (p, u) = protected.goodput_over_common_span(unprotected);
    if u > 0.0 {
        (p / u - 1.0) * 100.0
    } else {
        0.0
    }
}

fn reasons(p: &RunFigures) -> String {
    reason_list(&p.refused_by_reason)
}

fn reason_list(by_reason: &std::collections::BTreeMap<String, u64>) -> String {
    if by_reason.is_empty() {
        return "none".into();
    }
    by_reason
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}
