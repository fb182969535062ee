//! Merging the reports of the demo's two open-loop streams (customer `good` and customer
//! `noisy`) into one run.
//!
//! Why two streams: the well-behaved customer sends a steady, modest rate whatever the other one
//! does; only the misbehaving one ramps and jumps. A single weighted mix cannot say that (its
//! shares are fixed, so `good` would surge with `noisy`), so each customer has a generator of
//! its own, both running at once against the same target, and their reports are added up here.
//!
//! Counts (per second, per criticality, per customer, totals) add exactly. Latency percentiles
//! cannot be added: the merged run keeps those of the stream with the most successes (per
//! second and for the whole run — `noisy` at every level above the warm-up), and every stream's
//! own whole-run percentiles are kept in `meta["streams"]`.

use std::collections::BTreeMap;

use crate::report::{Counts, RunReport, SecondStats, Summary};

fn add_maps(into: &mut BTreeMap<String, Counts>, from: &BTreeMap<String, Counts>) {
    for (k, c) in from {
        into.entry(k.clone()).or_default().add(c);
    }
}

/// Weighted mean of two optional means (weights: each side's successes).
fn mean_of(a: Option<f64>, wa: u64, b: Option<f64>, wb: u64) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) if wa + wb > 0 => {
            Some((x * wa as f64 + y * wb as f64) / (wa + wb) as f64)
        }
        (Some(x), _) => Some(x),
        (_, y) => y,
    }
}

fn add_second(into: &mut SecondStats, from: &SecondStats) {
    let (wa, wb) = (into.counts.goodput, from.counts.goodput);
    into.queue_ms_mean = mean_of(into.queue_ms_mean, wa, from.queue_ms_mean, wb);
    into.processing_ms_mean = mean_of(into.processing_ms_mean, wa, from.processing_ms_mean, wb);
    if wb > wa || into.latency.is_none() {
        into.latency = from.latency.or(into.latency);
    }
    into.counts.add(&from.counts);
    add_maps(&mut into.by_criticality, &from.by_criticality);
    add_maps(&mut into.by_customer, &from.by_customer);
}

/// One run made of `parts` offered at the same time, titled `title` (see the module docs).
/// `meta` is the first part's, plus `streams`: each part's title, offered and goodput counts
/// and whole-run latency.
pub fn merge(title: &str, parts: &[RunReport]) -> RunReport {
    let mut out = RunReport {
        title: title.to_owned(),
        meta: parts.first().map(|p| p.meta.clone()).unwrap_or_default(),
        ..RunReport::default()
    };
    let len = parts.iter().map(|p| p.seconds.len()).max().unwrap_or(0);
    out.seconds = (0..len)
        .map(|t| SecondStats {
            t: t as u64,
            ..SecondStats::default()
        })
        .collect();
    let mut summary = Summary::default();
    let mut best = None::<&RunReport>;
    for p in parts {
        for (row, s) in out.seconds.iter_mut().zip(&p.seconds) {
            add_second(row, s);
        }
        summary.counts.add(&p.summary.counts);
        add_maps(&mut summary.by_criticality, &p.summary.by_criticality);
        add_maps(&mut summary.by_customer, &p.summary.by_customer);
        summary.duration_s = summary.duration_s.max(p.summary.duration_s);
        if best.is_none_or(|b| p.summary.counts.goodput > b.summary.counts.goodput) {
            best = Some(p);
        }
    }
    if summary.duration_s > 0.0 {
        summary.offered_rps = summary.counts.offered as f64 / summary.duration_s;
        summary.goodput_rps = summary.counts.goodput as f64 / summary.duration_s;
    }
    if summary.counts.offered > 0 {
        summary.amplification = summary.counts.sent as f64 / summary.counts.offered as f64;
    }
    out.summary = summary;
    out.latency = best.and_then(|b| b.latency.clone());
    let streams: Vec<serde_json::Value> = parts
        .iter()
        .map(|p| {
            serde_json::json!({
                "title": p.title,
                "offered": p.summary.counts.offered,
                "goodput": p.summary.counts.goodput,
                "latency": p.latency,
                "rate": p.meta.get("rate"),
                "send_lag": p.meta.get("send_lag"),
            })
        })
        .collect();
    out.meta.insert("streams".into(), streams.into());
    if let Some(b) = best {
        out.meta
            .insert("latency_of_stream".into(), b.title.clone().into());
    }
    out
}

/// Merges every group of reports sharing a title (e.g. the two streams `spillway load` wrote for
/// one run of bench/peers.sh), keeping the order in which titles first appear.
pub fn merge_by_title(reports: Vec<RunReport>) -> Vec<RunReport> {
    let mut titles: Vec<String> = Vec::new();
    for r in &reports {
        if !titles.contains(&r.title) {
            titles.push(r.title.clone());
        }
    }
    titles
        .iter()
        .map(|t| {
            let parts: Vec<RunReport> = reports.iter().filter(|r| &r.title == t).cloned().collect();
            if parts.len() == 1 {
                parts.into_iter().next().unwrap_or_default()
            } else {
                merge(t, &parts)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use spillway_core::Criticality;

    use super::*;
    use crate::report::{Outcome, Recorder, RequestRecord};

    fn stream(title: &str, customer: &str, per_second: &[u64], ok: u64) -> RunReport {
        let mut r = Recorder::new(title, Duration::from_secs(per_second.len() as u64));
        for (t, &n) in per_second.iter().enumerate() {
            for i in 0..n {
                r.record(&RequestRecord {
                    offered_at: Duration::from_millis(t as u64 * 1000 + i),
                    criticality: Criticality::Critical,
                    customer,
                    attempts: 2,
                    outcome: if i < ok {
                        Outcome::Success
                    } else {
                        Outcome::Rejected
                    },
                    latency: Some(Duration::from_millis(if customer == "good" {
                        5
                    } else {
                        50
                    })),
                    queue_ms: Some(1.0),
                    service_ms: None,
                });
            }
        }
        r.finish()
    }

    #[test]
    fn counts_add_and_latency_comes_from_the_bigger_stream() {
        let good = stream("x", "good", &[10, 10, 10], 10);
        let noisy = stream("x", "noisy", &[50, 100], 40);
        let m = merge("run", &[good, noisy]);
        assert_eq!(m.title, "run");
        assert_eq!(m.seconds.len(), 3);
        assert_eq!(m.seconds[1].counts.offered, 110);
        assert_eq!(m.seconds[1].counts.goodput, 50);
        assert_eq!(m.seconds[2].counts.offered, 10);
        assert!(m.seconds.iter().all(|s| s.counts.is_balanced()));
        assert_eq!(m.summary.counts.offered, 180);
        assert_eq!(m.summary.counts.goodput, 110);
        assert_eq!(m.summary.by_customer["good"].goodput, 30);
        assert_eq!(m.summary.by_customer["noisy"].offered, 150);
        assert_eq!(m.summary.by_criticality["CRITICAL"].offered, 180);
        assert_eq!(m.summary.amplification, 2.0);
        assert!((m.summary.offered_rps - 60.0).abs() < 1e-9);
        // noisy had 80 successes, good 30: whole-run latency is noisy's (50 ms).
        let p50 = m.latency.as_ref().unwrap().total.p50_ms;
        assert!((p50 - 50.0).abs() < 1.0, "{p50}");
        // Second 2 has only good's successes.
        assert!((m.seconds[2].latency.unwrap().p50_ms - 5.0).abs() < 0.5);
        assert_eq!(m.seconds[0].queue_ms_mean, Some(1.0));
        assert_eq!(m.meta["streams"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn merge_by_title_groups_and_keeps_order() {
        let runs = vec![
            stream("b", "good", &[1], 1),
            stream("a", "good", &[2], 2),
            stream("b", "noisy", &[3], 3),
        ];
        let merged = merge_by_title(runs);
        let titles: Vec<_> = merged.iter().map(|r| r.title.as_str()).collect();
        assert_eq!(titles, ["b", "a"]);
        assert_eq!(merged[0].summary.counts.offered, 4);
        assert_eq!(merged[1].summary.counts.offered, 2);
    }
}
