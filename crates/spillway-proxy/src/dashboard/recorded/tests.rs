use metrics::Label;

use super::*;

fn key(name: &'static str, labels: &[(&'static str, &str)]) -> Key {
    let labels: Vec<Label> = labels
        .iter()
        .map(|&(k, v)| Label::new(k, v.to_string()))
        .collect();
    Key::from_parts(name, labels)
}

#[test]
fn aggregates_the_charted_counters_over_labels() {
    let mut r = Recorded::default();
    let shed = |customer, operation, criticality, reason| {
        key(
            m::SHED,
            &[
                ("customer", customer),
                ("operation", operation),
                ("criticality", criticality),
                ("reason", reason),
            ],
        )
    };
    r.add_counter(&shed("acme", "/api", "SHEDDABLE", "shed"), 30);
    r.add_counter(&shed("acme", "/api", "CRITICAL", "queue_full"), 2);
    r.add_counter(&shed("b\"x\\y", "/img", "SHEDDABLE", "shed"), 5);
    r.add_counter(&key(m::SHED, &[("reason", "incident_shed")]), 7);
    r.add_counter(
        &key(
            m::THROTTLED,
            &[
                ("customer", "acme"),
                ("operation", "/api"),
                ("criticality", "CRITICAL"),
                ("destination", "127.0.0.1:1"),
            ],
        ),
        4,
    );
    r.add_counter(&key(m::ADMITTED, &[("customer", "acme")]), 1_000);
    assert_eq!(r.shed_by_reason["shed"], 35.0);
    assert_eq!(r.shed_by_reason["queue_full"], 2.0);
    assert_eq!(r.shed_by_reason["incident_shed"], 7.0);
    assert_eq!(r.shed_by_customer["acme"], 32.0);
    assert_eq!(r.shed_by_customer["b\"x\\y"], 5.0);
    assert_eq!(r.shed_by_operation["/img"], 5.0);
    assert_eq!(r.shed_by_criticality, [35.0, 0.0, 2.0, 0.0]);
    assert_eq!(r.throttled_by_customer["acme"], 4.0);
    assert_eq!(
        r.throttled_by_criticality[Criticality::Critical.index()],
        4.0
    );
    assert!(!r.shed_by_customer.contains_key("unknown"));
}

#[test]
fn a_histogram_snapshot_ends_with_its_count_at_infinity() {
    let h = Histogram::of(Some(Snapshot {
        cumulative: vec![(0.001, 8), (0.01, 9)],
        count: 20,
        sum: 20.5,
    }));
    assert_eq!(
        h.buckets,
        vec![(0.001, 8.0), (0.01, 9.0), (f64::INFINITY, 20.0)]
    );
    assert_eq!((h.sum, h.count), (20.5, 20.0));
    assert_eq!(Histogram::of(None), Histogram::default());
}

#[test]
fn delta_summary_is_the_window_between_two_readings() {
    let before = Histogram::of(Some(Snapshot {
        cumulative: vec![(0.001, 8), (0.01, 9)],
        count: 20,
        sum: 20.5,
    }));
    let mut after = before.clone();
    // 100 more observations: 99 at <= 1 ms, 1 above 10 ms.
    after.count += 100.0;
    after.sum += 0.2;
    for (le, c) in &mut after.buckets {
        *c += if le.is_finite() { 99.0 } else { 100.0 };
    }
    let (mean, p99, n) = after.delta_summary(&before).unwrap();
    assert_eq!(n, 100.0);
    assert!((mean - 0.002).abs() < 1e-12);
    assert_eq!(p99, 0.001);
    assert_eq!(before.delta_summary(&before), None);
}

/// Through the process's recorder: what the dashboard reads is what `/metrics` renders (labels
/// unique to this test, as other tests record into the same recorder).
#[test]
fn the_dashboard_reads_what_metrics_renders() {
    let h = crate::metrics::recorder::install_recorder().expect("install");
    let labels = [
        ("customer", "recorded-test"),
        ("operation", "/recorded-test"),
        ("criticality", "SHEDDABLE"),
        ("reason", "recorded-test"),
    ];
    metrics::counter!(m::SHED, &labels).increment(5);
    metrics::counter!(m::SHED, &labels).increment(2);
    metrics::histogram!(m::QUEUE_TIME, "operation" => "recorded-test").record(0.003);
    let r = read(&h);
    assert_eq!(r.shed_by_customer["recorded-test"], 7.0);
    assert_eq!(r.shed_by_operation["/recorded-test"], 7.0);
    assert_eq!(r.shed_by_reason["recorded-test"], 7.0);
    assert!(r.queue_time.count >= 1.0, "{:?}", r.queue_time);
    assert_eq!(
        r.queue_time.buckets.last().map(|b| b.0),
        Some(f64::INFINITY)
    );
    let text = h.render();
    let line = text
        .lines()
        .find(|l| l.starts_with(m::SHED) && l.contains("customer=\"recorded-test\""))
        .unwrap_or_else(|| panic!("no line for the test's customer\n{text}"));
    assert!(line.ends_with(" 7"), "{line}");
}
