//! One self-contained HTML page for one or more runs side by side.
//!
//! Why self-contained: reports are attached to issues, mailed and opened years later; a page that
//! needs a CDN or a script breaks. Everything here is inline CSS and inline SVG (see `svg.rs`).

use std::collections::BTreeSet;
use std::fmt::Write as _;

use spillway_core::Criticality;

use super::svg::{bar_chart, escape, xy_chart, Series, XyChart, PALETTE};
use super::{Counts, Percentiles, RunReport};

const STYLE: &str = "body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}\
.wide{overflow-x:auto}table{border-collapse:collapse;margin:1em 0;font-size:12px}\
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}\
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}\
svg{display:block;margin:1em 0}pre{background:#f8f8f8;padding:8px;overflow:auto;font-size:12px}";

fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

fn pct(c: &Counts) -> String {
    c.success_ratio()
        .map_or_else(|| "–".to_owned(), |r| format!("{:.2}%", r * 100.0))
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "–".to_owned(), |v| format!("{v:.1}"))
}

fn title(r: &RunReport, i: usize) -> String {
    if r.title.is_empty() {
        format!("run {}", i + 1)
    } else {
        r.title.clone()
    }
}

/// Renders `reports` (one or more runs, compared side by side) as a complete HTML document.
pub fn render_html(reports: &[RunReport]) -> String {
    let mut h = String::new();
    let names: Vec<String> = reports
        .iter()
        .enumerate()
        .map(|(i, r)| title(r, i))
        .collect();
    let heading = if names.is_empty() {
        "Spillway report (no runs)".to_owned()
    } else {
        format!("Spillway report: {}", names.join(" vs "))
    };
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title>\
         <style>{STYLE}</style></head><body><h1>{t}</h1>\
         <p>Counts are per logical request, attributed to the second it was offered; goodput = \
         successful within the client's timeout; latency is of successful requests, measured \
         from the intended send time (no coordinated omission).</p>",
        t = escape(&heading)
    );
    summary_table(&mut h, reports, &names);
    breakdown_tables(&mut h, reports, &names);
    charts(&mut h, reports, &names);
    for (r, name) in reports.iter().zip(&names) {
        let meta = serde_json::to_string_pretty(&r.meta).unwrap_or_default();
        let _ = write!(
            h,
            "<details><summary>{} — run parameters</summary><pre>{}</pre></details>",
            escape(name),
            escape(&meta)
        );
    }
    h.push_str("</body></html>\n");
    h
}

fn summary_table(h: &mut String, reports: &[RunReport], names: &[String]) {
    h.push_str(
        "<h2>Summary</h2><div class=\"wide\"><table><tr><th>run</th><th>seconds</th><th>offered/s</th>\
         <th>goodput/s</th><th>success</th><th>rejected</th><th>timed out</th><th>throttled</th>\
         <th>errors</th><th>attempts/request</th><th>p50 ms</th><th>p99 ms</th><th>p99.9 ms</th>\
         <th>max ms</th><th>queue p50/p99 ms</th><th>service p50/p99 ms</th></tr>",
    );
    for (r, name) in reports.iter().zip(names) {
        let s = &r.summary;
        let total = r.latency.as_ref().map(|l| l.total);
        let pair = |p: Option<Percentiles>| {
            p.map_or_else(
                || "–".to_owned(),
                |p| format!("{:.1} / {:.1}", p.p50_ms, p.p99_ms),
            )
        };
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{:.0}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(name),
            s.duration_s,
            s.offered_rps,
            s.goodput_rps,
            pct(&s.counts),
            s.counts.rejected,
            s.counts.timed_out,
            s.counts.throttled,
            s.counts.errors,
            s.amplification,
            ms(total.map(|p| p.p50_ms)),
            ms(total.map(|p| p.p99_ms)),
            ms(total.map(|p| p.p999_ms)),
            ms(total.map(|p| p.max_ms)),
            pair(r.latency.as_ref().and_then(|l| l.queue)),
            pair(r.latency.as_ref().and_then(|l| l.processing)),
        );
    }
    h.push_str("</table></div>");
}

fn breakdown_tables(h: &mut String, reports: &[RunReport], names: &[String]) {
    let levels: Vec<&str> = Criticality::ALL
        .iter()
        .rev()
        .map(|c| c.as_str())
        .filter(|c| {
            reports
                .iter()
                .any(|r| r.summary.by_criticality.contains_key(*c))
        })
        .collect();
    let customers: BTreeSet<&str> = reports
        .iter()
        .flat_map(|r| r.summary.by_customer.keys().map(String::as_str))
        .collect();
    for (what, keys, pick) in [
        (
            "Success per criticality",
            levels,
            (|r: &RunReport, k: &str| r.summary.by_criticality.get(k).copied())
                as fn(&RunReport, &str) -> Option<Counts>,
        ),
        (
            "Success per customer",
            customers.into_iter().collect(),
            |r: &RunReport, k: &str| r.summary.by_customer.get(k).copied(),
        ),
    ] {
        if keys.is_empty() {
            continue;
        }
        let _ = write!(h, "<h2>{what}</h2><table><tr><th>run</th>");
        for k in &keys {
            let _ = write!(h, "<th>{}</th>", escape(k));
        }
        h.push_str("</tr>");
        for (r, name) in reports.iter().zip(names) {
            let _ = write!(h, "<tr><td>{}</td>", escape(name));
            for k in &keys {
                let cell = pick(r, k).map_or_else(
                    || "–".to_owned(),
                    |c| format!("{} ({}/{})", pct(&c), c.goodput, c.offered),
                );
                let _ = write!(h, "<td>{cell}</td>");
            }
            h.push_str("</tr>");
        }
        h.push_str("</table>");
    }
}

fn charts(h: &mut String, reports: &[RunReport], names: &[String]) {
    let capacity = reports
        .iter()
        .find_map(RunReport::capacity_rps)
        .map(|c| (c, format!("capacity {c:.0}/s")));
    let series = |name: String, i: usize, dashed: bool, points: Vec<(f64, f64)>| Series {
        name,
        points,
        color: color(i),
        dashed,
        scatter: false,
    };
    // Rows are plotted at the middle of their second.
    let over_time = |r: &RunReport, f: &dyn Fn(&super::SecondStats) -> Option<f64>| {
        r.seconds
            .iter()
            .filter_map(|s| f(s).map(|v| (s.t as f64 + 0.5, v)))
            .collect::<Vec<_>>()
    };

    // Time charts share the longest run's length as their x axis.
    let seconds = reports
        .iter()
        .map(|r| r.seconds.len())
        .max()
        .filter(|n| *n > 0)
        .map(|n| n as f64);
    h.push_str("<h2>Charts</h2>");
    let mut c = XyChart {
        title: "Offered load and goodput over time".into(),
        x_label: "seconds".into(),
        y_label: "requests/s".into(),
        reference: capacity.clone(),
        x_max: seconds,
        ..XyChart::default()
    };
    for (i, (r, name)) in reports.iter().zip(names).enumerate() {
        let offered = over_time(r, &|s| Some(s.counts.offered as f64));
        c.series
            .push(series(format!("{name} offered"), i, true, offered));
        let goodput = over_time(r, &|s| Some(s.counts.goodput as f64));
        c.series
            .push(series(format!("{name} goodput"), i, false, goodput));
    }
    h.push_str(&xy_chart(&c));

    let mut c = XyChart {
        title: "Goodput vs offered load (one point per second)".into(),
        x_label: "offered requests/s".into(),
        y_label: "goodput requests/s".into(),
        reference: capacity,
        ..XyChart::default()
    };
    for (i, (r, name)) in reports.iter().zip(names).enumerate() {
        let points = r
            .seconds
            .iter()
            .map(|s| (s.counts.offered as f64, s.counts.goodput as f64))
            .collect();
        c.series.push(Series {
            scatter: true,
            ..series(name.clone(), i, false, points)
        });
    }
    h.push_str(&xy_chart(&c));

    let mut c = XyChart {
        title: "Latency of successful requests (p50 solid, p99 dashed)".into(),
        x_label: "seconds".into(),
        y_label: "ms".into(),
        x_max: seconds,
        ..XyChart::default()
    };
    for (i, (r, name)) in reports.iter().zip(names).enumerate() {
        let p50 = over_time(r, &|s| s.latency.map(|l| l.p50_ms));
        c.series.push(series(format!("{name} p50"), i, false, p50));
        let p99 = over_time(r, &|s| s.latency.map(|l| l.p99_ms));
        c.series.push(series(format!("{name} p99"), i, true, p99));
    }
    h.push_str(&xy_chart(&c));

    let has_split = reports.iter().any(|r| {
        r.seconds
            .iter()
            .any(|s| s.queue_ms_mean.is_some() || s.processing_ms_mean.is_some())
    });
    if has_split {
        let mut c = XyChart {
            title: "Server-reported queue time (dashed) and service time (solid), means".into(),
            x_label: "seconds".into(),
            y_label: "ms".into(),
            x_max: seconds,
            ..XyChart::default()
        };
        for (i, (r, name)) in reports.iter().zip(names).enumerate() {
            let service = over_time(r, &|s| s.processing_ms_mean);
            c.series
                .push(series(format!("{name} service"), i, false, service));
            let queue = over_time(r, &|s| s.queue_ms_mean);
            c.series
                .push(series(format!("{name} queue"), i, true, queue));
        }
        h.push_str(&xy_chart(&c));
    }

    let runs: Vec<(String, &'static str)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.clone(), color(i)))
        .collect();
    let groups: Vec<(String, Vec<Option<f64>>)> = Criticality::ALL
        .iter()
        .rev()
        .map(|c| c.as_str())
        .filter(|c| {
            reports
                .iter()
                .any(|r| r.summary.by_criticality.contains_key(*c))
        })
        .map(|c| {
            let values = reports
                .iter()
                .map(|r| {
                    r.summary
                        .by_criticality
                        .get(c)
                        .and_then(Counts::success_ratio)
                })
                .collect();
            (c.to_owned(), values)
        })
        .collect();
    if !groups.is_empty() {
        h.push_str(&bar_chart(
            "Success ratio per criticality (whole run)",
            "goodput / offered",
            &runs,
            &groups,
            Some(1.0),
        ));
    }
}
