use std::sync::Arc;

use metrics::{Key, Label, Recorder as _};

use super::*;

const BOUNDS: &[f64] = &[0.001, 0.01, 0.1];

#[test]
fn an_observation_lands_in_the_first_bucket_at_or_above_it() {
    let h = BucketHistogram::new(BOUNDS);
    for v in [0.0005, 0.001, 0.002, 0.01, 0.05, 0.1, 0.5, 7.0, -1.0] {
        h.observe(v);
    }
    let s = h.snapshot();
    // ≤0.001: 0.0005, 0.001 (a bound is inclusive, as `le`), -1.0; ≤0.01: + 0.002, 0.01;
    // ≤0.1: + 0.05, 0.1; +Inf: + 0.5, 7.0.
    assert_eq!(s.cumulative, vec![(0.001, 3), (0.01, 5), (0.1, 7)]);
    assert_eq!(s.count, 9);
    let want = 0.0005 + 0.001 + 0.002 + 0.01 + 0.05 + 0.1 + 0.5 + 7.0 - 1.0;
    assert!((s.sum - want).abs() < 1e-12, "sum {} want {want}", s.sum);
}

#[test]
fn nan_is_not_counted_and_infinity_is_past_every_bound() {
    let h = BucketHistogram::new(BOUNDS);
    h.observe(f64::NAN);
    h.observe(f64::INFINITY);
    let s = h.snapshot();
    assert_eq!(s.count, 1);
    assert_eq!(s.cumulative, vec![(0.001, 0), (0.01, 0), (0.1, 0)]);
    assert_eq!(s.sum, f64::INFINITY);
}

#[test]
fn every_thread_counts_into_the_same_totals() {
    let h = Arc::new(BucketHistogram::new(BOUNDS));
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let h = Arc::clone(&h);
            std::thread::spawn(move || {
                for _ in 0..1000 {
                    h.observe(0.005);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("observer thread");
    }
    let s = h.snapshot();
    assert_eq!(s.count, 6000);
    assert_eq!(s.cumulative[1], (0.01, 6000));
    assert!((s.sum - 30.0).abs() < 1e-9, "sum {}", s.sum);
}

#[test]
fn renders_the_exporters_text_with_labels_escaped() {
    let hs = Histograms::new(BOUNDS);
    hs.describe("t_latency_seconds", "Time \"taken\".\nIn seconds.".into());
    let key = Key::from_parts(
        "t_latency_seconds",
        vec![
            Label::new("customer", "a\"b\\c\nd"),
            Label::new("operation", "get"),
        ],
    );
    let h = hs.get(&key);
    h.observe(0.002);
    h.observe(0.2);
    // The same key gives the same histogram.
    hs.get(&key).observe(0.0001);
    hs.get(&Key::from_name("t_queue_seconds")).observe(0.05);
    let mut out = String::new();
    hs.render_into(&mut out);
    let l = r#"customer="a\"b\\c\nd",operation="get""#;
    let want = format!(
        "# HELP t_latency_seconds Time \"taken\".\\nIn seconds.\n\
         # TYPE t_latency_seconds histogram\n\
         t_latency_seconds_bucket{{{l},le=\"0.001\"}} 1\n\
         t_latency_seconds_bucket{{{l},le=\"0.01\"}} 2\n\
         t_latency_seconds_bucket{{{l},le=\"0.1\"}} 2\n\
         t_latency_seconds_bucket{{{l},le=\"+Inf\"}} 3\n\
         t_latency_seconds_sum{{{l}}} {}\n\
         t_latency_seconds_count{{{l}}} 3\n\
         # TYPE t_queue_seconds histogram\n\
         t_queue_seconds_bucket{{le=\"0.001\"}} 0\n\
         t_queue_seconds_bucket{{le=\"0.01\"}} 0\n\
         t_queue_seconds_bucket{{le=\"0.1\"}} 1\n\
         t_queue_seconds_bucket{{le=\"+Inf\"}} 1\n\
         t_queue_seconds_sum 0.05\n\
         t_queue_seconds_count 1\n",
        0.0001 + 0.002 + 0.2
    );
    assert_eq!(out, want);
}

#[test]
fn the_recorder_keeps_seconds_histograms_and_passes_the_rest_on() {
    let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = prometheus.handle();
    let histograms = Arc::new(Histograms::new(BOUNDS));
    let counted = Arc::new(crate::metrics::counted::Counted::new());
    let r = Recorder {
        prometheus,
        histograms: Arc::clone(&histograms),
        counted: Arc::clone(&counted),
    };
    let meta = metrics::Metadata::new("t", metrics::Level::INFO, None);
    r.register_histogram(&Key::from_name("t_wait_seconds"), &meta)
        .record(0.05);
    r.register_histogram(&Key::from_name("t_body_bytes"), &meta)
        .record(512.0);
    r.register_counter(&Key::from_name("t_total"), &meta)
        .increment(2);
    let mut ours = String::new();
    histograms.render_into(&mut ours);
    assert!(
        ours.contains("t_wait_seconds_bucket{le=\"0.1\"} 1\n"),
        "{ours}"
    );
    assert!(!ours.contains("t_body_bytes"), "{ours}");
    let theirs = handle.render();
    assert!(theirs.contains("t_total 2"), "{theirs}");
    // Another name's histogram stays the exporter's (a summary: no buckets configured).
    assert!(theirs.contains("t_body_bytes"), "{theirs}");
    assert!(!theirs.contains("t_wait_seconds"), "{theirs}");
    // A refusal counter is counted in both, the exporter's text and `Counted`; others only
    // in the exporter.
    let shed = Key::from_parts(
        spillway_tower::wire::metric::SHED,
        vec![metrics::Label::new("reason", "limit")],
    );
    r.register_counter(&shed, &meta).increment(3);
    r.register_counter(&shed, &meta).increment(1);
    assert!(
        handle
            .render()
            .contains("spillway_requests_shed_total{reason=\"limit\"} 4"),
        "{}",
        handle.render()
    );
    assert_eq!(counted.values(), vec![(shed, 4)]);
}

/// The dashboard's view of a histogram: every label set's buckets, count and sum added up.
#[test]
fn summed_adds_every_label_set_of_one_name() {
    let histograms = Histograms::new(BOUNDS);
    assert_eq!(histograms.summed("t_wait_seconds"), None);
    let a = Key::from_parts("t_wait_seconds", vec![metrics::Label::new("op", "a")]);
    let b = Key::from_parts("t_wait_seconds", vec![metrics::Label::new("op", "b")]);
    histograms.get(&a).observe(0.05);
    histograms.get(&b).observe(0.05);
    histograms.get(&b).observe(20.0);
    histograms
        .get(&Key::from_name("t_other_seconds"))
        .observe(0.05);
    let s = histograms.summed("t_wait_seconds").expect("two label sets");
    let one = histograms.get(&a).snapshot();
    assert_eq!((s.count, s.sum), (3, 20.1));
    for ((bound, n), (same, m)) in s.cumulative.iter().zip(&one.cumulative) {
        assert_eq!(bound, same);
        assert_eq!(*n, 2 * m, "le {bound}");
    }
}
