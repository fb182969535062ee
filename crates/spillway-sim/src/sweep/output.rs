//! The sweep's summary as text, JSON and a small HTML page.
//!
//! Why a page of its own rather than the run report's charts: a sweep is thousands of short
//! runs, judged; what a reader needs is per requirement the verdict, the failing count and the
//! worst cells with their figures, plus every cell in the JSON for whatever comes next.

use std::fmt::Write as _;
use std::path::Path;

use super::judge::{describe, worse, CHECKS};
use super::SweepReport;
use crate::report::ReportError;

/// Per requirement: pass/fail, failing cells of those it applies to, the worst cell and its
/// figures.
pub fn summary_text(r: &SweepReport) -> String {
    let mut out = String::new();
    for c in &r.checks {
        let _ = writeln!(
            out,
            "{:<4} {}  {}",
            c.id,
            if c.applicable == 0 {
                "n/a "
            } else if c.pass() {
                "PASS"
            } else {
                "FAIL"
            },
            c.title
        );
        let _ = writeln!(out, "     {} of {} cells fail", c.failing, c.applicable);
        if let Some((_, label, figures)) = &c.worst {
            let _ = writeln!(out, "     worst: {label}");
            let _ = writeln!(out, "            {figures}");
        }
        if c.failing > 0 {
            let _ = writeln!(
                out,
                "     failing: infeasible {}, behind_tuned {}, fails_like_tuned {}",
                c.infeasible, c.behind_tuned, c.fails_like_tuned
            );
        }
        if let Some((_, label, figures)) = c.behind_tuned_worst.first() {
            let _ = writeln!(out, "     worst behind_tuned: {label}");
            let _ = writeln!(out, "            {figures}");
        }
    }
    out
}

fn json_error(path: &Path, source: serde_json::Error) -> ReportError {
    ReportError::Json {
        path: path.display().to_string(),
        source,
    }
}

fn write(path: &Path, text: &str) -> Result<(), ReportError> {
    std::fs::write(path, text).map_err(|source| ReportError::Io {
        path: path.display().to_string(),
        source,
    })
}

/// Writes the whole report — summary and every cell with both runs' figures — as JSON.
pub fn write_json(r: &SweepReport, path: &Path) -> Result<(), ReportError> {
    let text = serde_json::to_string_pretty(r).map_err(|e| json_error(path, e))?;
    write(path, &text)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// How many failing cells the page lists per requirement (the JSON has them all).
const LISTED: usize = 20;

/// Writes a self-contained HTML summary: the verdicts, then per requirement its worst failing
/// cells.
pub fn write_html(r: &SweepReport, path: &Path) -> Result<(), ReportError> {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>sweep {}</title><style>\
         body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}\
         td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}}\
         .pass{{color:#070}}.fail{{color:#b00;font-weight:bold}}</style></head><body>\
         <h1>sweep {}</h1><p>{}</p><p>{} cells, seed {}</p>\
         <table><tr><th>requirement</th><th>verdict</th><th>failing</th><th>infeasible</th>\
         <th>behind tuned</th><th>fails like tuned</th><th>worst cell</th></tr>",
        escape(&r.name),
        escape(&r.name),
        escape(&r.description),
        r.cells.len(),
        r.seed
    );
    for c in &r.checks {
        let (class, verdict) = match (c.applicable, c.pass()) {
            (0, _) => ("", "n/a"),
            (_, true) => ("pass", "PASS"),
            (_, false) => ("fail", "FAIL"),
        };
        let worst = c.worst.as_ref().map_or(String::new(), |(_, l, f)| {
            format!("{}<br>{}", escape(l), escape(f))
        });
        let _ = write!(
            h,
            "<tr><td>{} {}</td><td class=\"{class}\">{verdict}</td><td>{} / {}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{worst}</td></tr>",
            c.id,
            escape(&c.title),
            c.failing,
            c.applicable,
            c.infeasible,
            c.behind_tuned,
            c.fails_like_tuned
        );
    }
    h.push_str(
        "</table><p>infeasible: the oracle (told every service time; for CRITICAL, with CRITICAL \
         alone) misses the threshold too. behind tuned: HAProxy with priority classes and a cap \
         of the workers meets it, or beats Spillway by more than the requirement's slack (R1: \
         the unprotected service). fails like tuned: it fails too, within that slack.</p>",
    );
    for c in r.checks.iter().filter(|c| !c.behind_tuned_worst.is_empty()) {
        let _ = write!(
            h,
            "<h2>{}: the {} furthest behind tuned of {} behind_tuned cells</h2>\
             <table><tr><th>cell</th><th>figures</th></tr>",
            c.id,
            c.behind_tuned_worst.len(),
            c.behind_tuned
        );
        for (_, label, figures) in &c.behind_tuned_worst {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td></tr>",
                escape(label),
                escape(figures)
            );
        }
        h.push_str("</table>");
    }
    for (k, check) in CHECKS.iter().enumerate() {
        let mut failing: Vec<_> = r
            .cells
            .iter()
            .filter_map(|c| c.verdicts[k].filter(|v| !v.pass).map(|v| (c, v)))
            .collect();
        if failing.is_empty() {
            continue;
        }
        failing.sort_by(|a, b| {
            if worse(*check, &a.1, &b.1) {
                std::cmp::Ordering::Less
            } else if worse(*check, &b.1, &a.1) {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        });
        let _ = write!(
            h,
            "<h2>{}: the {} worst of {} failing cells</h2><table><tr><th>cell</th><th>class</th>\
             <th>figures</th></tr>",
            check.id(),
            failing.len().min(LISTED),
            failing.len()
        );
        for (c, _) in failing.iter().take(LISTED) {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&c.label),
                c.classes[k].map_or("", |x| x.as_str()),
                escape(&describe(*check, &c.spec, &c.protected, &c.unprotected))
            );
        }
        h.push_str("</table>");
    }
    h.push_str("</body></html>\n");
    write(path, &h)
}
