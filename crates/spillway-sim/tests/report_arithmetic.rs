//! The report's arithmetic on synthetic data: per-second bucketing by offered time, outcome
//! balance, goodput, success per criticality and customer, HDR percentiles, JSON round trip and
//! a self-contained HTML page.

use std::time::Duration;

use spillway_core::Criticality;
use spillway_sim::report::{self, Outcome, Recorder, RequestRecord, RunReport};

fn rec(
    at_ms: u64,
    c: Criticality,
    customer: &str,
    outcome: Outcome,
    lat_ms: u64,
) -> RequestRecord<'_> {
    RequestRecord {
        offered_at: Duration::from_millis(at_ms),
        criticality: c,
        customer,
        attempts: if outcome == Outcome::Throttled { 0 } else { 1 },
        outcome,
        latency: (outcome == Outcome::Success).then(|| Duration::from_millis(lat_ms)),
        queue_ms: (outcome == Outcome::Success).then_some(lat_ms as f64 / 2.0),
        service_ms: (outcome == Outcome::Success).then_some(lat_ms as f64 / 2.0),
    }
}

/// Second 0: 100 successes with latencies 1..=100 ms (CRITICAL, customer a).
/// Second 1: 10 successes at 200 ms, 5 rejected, 3 timed out (SHEDDABLE, customer b),
///           2 throttled, 1 error (CRITICAL, customer a), one success retried twice.
/// Second 2: nothing.
fn synthetic() -> RunReport {
    let mut r = Recorder::new("synthetic", Duration::from_secs(3));
    r.set_meta("capacity_rps", 50.0);
    for i in 1..=100u64 {
        r.record(&rec(i * 9, Criticality::Critical, "a", Outcome::Success, i));
    }
    for i in 0..10 {
        r.record(&rec(
            1000 + i,
            Criticality::Critical,
            "a",
            Outcome::Success,
            200,
        ));
    }
    for i in 0..5 {
        r.record(&rec(
            1100 + i,
            Criticality::Sheddable,
            "b",
            Outcome::Rejected,
            0,
        ));
    }
    for i in 0..3 {
        r.record(&rec(
            1200 + i,
            Criticality::Sheddable,
            "b",
            Outcome::TimedOut,
            0,
        ));
    }
    for i in 0..2 {
        r.record(&rec(
            1300 + i,
            Criticality::Critical,
            "a",
            Outcome::Throttled,
            0,
        ));
    }
    r.record(&rec(1400, Criticality::Critical, "a", Outcome::Error, 0));
    let mut retried = rec(1999, Criticality::Critical, "a", Outcome::Success, 200);
    retried.attempts = 3;
    r.record(&retried);
    r.finish()
}

#[test]
fn counts_are_bucketed_by_offered_second_and_balance() {
    let r = synthetic();
    assert_eq!(r.seconds.len(), 3);
    assert_eq!(
        r.seconds.iter().map(|s| s.t).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    let s0 = &r.seconds[0].counts;
    assert_eq!((s0.offered, s0.sent, s0.goodput), (100, 100, 100));
    let s1 = &r.seconds[1].counts;
    assert_eq!(s1.offered, 22);
    assert_eq!(s1.goodput, 11);
    assert_eq!(
        (s1.rejected, s1.timed_out, s1.throttled, s1.errors),
        (5, 3, 2, 1)
    );
    // 11 + 5 + 3 + 1 sent once each... minus throttled (0 attempts), plus 2 extra for the retry.
    assert_eq!(s1.sent, 10 + 5 + 3 + 1 + 3);
    assert_eq!(r.seconds[2].counts.offered, 0);
    for s in &r.seconds {
        assert!(
            s.counts.is_balanced(),
            "second {} unbalanced: {:?}",
            s.t,
            s.counts
        );
    }
    assert!(r.summary.counts.is_balanced());
    assert_eq!(r.summary.counts.offered, 122);
    assert_eq!(r.summary.counts.goodput, 111);
}

#[test]
fn breakdowns_and_rates() {
    let r = synthetic();
    let s1 = &r.seconds[1];
    assert_eq!(s1.by_criticality["SHEDDABLE"].offered, 8);
    assert_eq!(s1.by_criticality["SHEDDABLE"].goodput, 0);
    assert_eq!(s1.by_criticality["CRITICAL"].goodput, 11);
    assert!(
        !s1.by_criticality.contains_key("CRITICAL_PLUS"),
        "absent levels are omitted"
    );
    assert_eq!(s1.by_customer["b"].rejected, 5);
    assert_eq!(r.summary.by_customer["a"].offered, 114);
    assert_eq!(
        r.summary.by_criticality["CRITICAL"].success_ratio(),
        Some(111.0 / 114.0)
    );
    assert_eq!(r.summary.duration_s, 3.0);
    assert!((r.summary.offered_rps - 122.0 / 3.0).abs() < 1e-9);
    assert!((r.summary.goodput_rps - 37.0).abs() < 1e-9);
    // 100 + 22 offered; 2 throttled sent nothing, one request sent 3 times: 122 attempts.
    assert_eq!(r.summary.counts.sent, 122);
    assert!((r.summary.amplification - 1.0).abs() < 1e-9);
    assert_eq!(r.capacity_rps(), Some(50.0));
}

#[test]
fn percentiles_come_from_successes_only() {
    let r = synthetic();
    let p0 = r.seconds[0].latency.expect("second 0 had successes");
    assert_eq!(p0.count, 100);
    // HDR with 2 significant figures in the per-second histogram: within 1%.
    assert!((p0.p50_ms - 50.0).abs() <= 0.5, "{p0:?}");
    assert!((p0.p99_ms - 99.0).abs() <= 1.0, "{p0:?}");
    assert!((p0.max_ms - 100.0).abs() <= 1.0, "{p0:?}");
    assert!((p0.mean_ms - 50.5).abs() <= 0.5, "{p0:?}");
    assert!(r.seconds[2].latency.is_none());
    let total = r.latency.as_ref().expect("run had successes");
    assert_eq!(total.total.count, 111);
    // 100 values 1..=100 then 11 at 200: the 90th percentile (rank 100) is 100 ms, p99 is 200.
    assert!((total.total.p90_ms - 100.0).abs() <= 0.1, "{total:?}");
    assert!((total.total.p99_ms - 200.0).abs() <= 0.2, "{total:?}");
    let q = total.queue.expect("queue reported");
    assert!((q.max_ms - 100.0).abs() <= 0.1);
    assert!((r.seconds[1].queue_ms_mean.unwrap() - 100.0).abs() < 1e-9);
    assert!((r.seconds[0].processing_ms_mean.unwrap() - 25.25).abs() < 1e-9);
}

#[test]
fn json_round_trips_and_html_is_self_contained() {
    let r = synthetic();
    let mut other = synthetic();
    other.title = "other <run>".into();
    let dir = std::env::temp_dir().join(format!("spillway-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("run.json");
    report::write_json(&[r.clone(), other.clone()], &path).unwrap();
    let back = report::read_json(&path).unwrap();
    assert_eq!(back, vec![r.clone(), other.clone()]);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(
        json[0]["seconds"][1]["goodput"], 11,
        "counts are flattened into the row"
    );

    let html = report::render_html(&[r, other]);
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("other &lt;run&gt;"), "titles are escaped");
    assert!(!html.contains("<script"), "no scripts");
    assert!(
        !html.contains("src=\"http") && !html.contains("href=\"http"),
        "no external resources"
    );
    assert!(
        html.matches("<svg").count() >= 5,
        "offered/goodput, curve, latency, split, criticality"
    );
    assert!(html.contains("capacity 50/s"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn empty_runs_render() {
    let r = Recorder::new("", Duration::ZERO).finish();
    assert!(r.seconds.is_empty() && r.latency.is_none());
    assert!(r.summary.counts.is_balanced());
    let html = report::render_html(&[r]);
    assert!(html.contains("run 1"));
    assert!(report::render_html(&[]).contains("no runs"));
}

/// Sealing finished seconds (their histograms replaced by percentiles) changes nothing in the
/// report; a success recorded into a sealed second anyway is counted and reported in meta.
#[test]
fn sealing_finished_seconds_gives_the_same_report() {
    let records: Vec<RequestRecord<'_>> = (0..3000u64)
        .map(|i| {
            let outcome = if i % 7 == 0 {
                Outcome::Rejected
            } else {
                Outcome::Success
            };
            rec(i, Criticality::Critical, "a", outcome, 1 + i % 97)
        })
        .collect();
    let mut plain = Recorder::new("run", Duration::from_secs(3));
    let mut sealed = Recorder::new("run", Duration::from_secs(3));
    for (i, r) in records.iter().enumerate() {
        plain.record(r);
        sealed.record(r);
        if i == 2000 {
            sealed.seal(0);
            sealed.seal(1);
        }
    }
    sealed.seal(2);
    sealed.seal(99); // beyond the rows: ignored
    let (plain, sealed) = (plain.finish(), sealed.finish());
    assert!(plain.seconds[1].latency.is_some());
    assert_eq!(
        serde_json::to_string(&plain).unwrap(),
        serde_json::to_string(&sealed).unwrap()
    );

    let mut late = Recorder::new("run", Duration::from_secs(2));
    late.record(&rec(10, Criticality::Critical, "a", Outcome::Success, 5));
    late.seal(0);
    late.record(&rec(20, Criticality::Critical, "a", Outcome::Success, 50));
    let late = late.finish();
    assert_eq!(late.seconds[0].counts.goodput, 2);
    assert_eq!(late.seconds[0].latency.unwrap().count, 1);
    assert_eq!(late.latency.unwrap().total.count, 2);
    assert_eq!(late.meta["late_after_seal"], 1);
}
