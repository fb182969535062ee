use super::*;
use proptest::prelude::*;

fn text(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap()
}

/// `cpu_utilization = 0.5` and `named_metrics { "q": 0.75 }`, encoded by hand from the
/// protobuf wire format (not by prost), so decoding is checked against an independent encoder.
fn hand_encoded() -> Vec<u8> {
    let mut b = vec![0x09]; // field 1, wire type 1 (64-bit)
    b.extend_from_slice(&0.5f64.to_le_bytes());
    // field 8, wire type 2 (length-delimited): a map entry { 1: "q", 2: 0.75 }
    let mut entry = vec![0x0a, 0x01, b'q', 0x11];
    entry.extend_from_slice(&0.75f64.to_le_bytes());
    b.push(0x42);
    b.push(entry.len() as u8);
    b.extend_from_slice(&entry);
    b
}

#[test]
fn decodes_a_hand_encoded_report_padded_or_not() {
    let padded = BASE64.encode(hand_encoded());
    assert!(
        padded.ends_with('='),
        "the sample should need padding: {padded}"
    );
    for v in [padded.clone(), padded.trim_end_matches('=').to_owned()] {
        let r = parse_orca_bin(&text(&v)).unwrap();
        assert_eq!(r.cpu_utilization, 0.5);
        assert_eq!(r.named_metrics.get("q"), Some(&0.75));
        assert_eq!(r.application_utilization, 0.0);
    }
}

#[test]
fn format_and_parse_round_trip() {
    let mut r = OrcaLoadReportMessage {
        cpu_utilization: 0.25,
        application_utilization: 0.9,
        rps_fractional: 120.5,
        ..Default::default()
    };
    r.utilization.insert("pool".into(), 0.6);
    r.named_metrics.insert("queue".into(), 3.0);
    assert_eq!(parse_orca_bin(&format_orca_bin(&r)).unwrap(), r);
}

#[test]
fn refuses_what_is_not_a_report_and_names_the_header() {
    let too_long = "A".repeat(MAX_ORCA_BIN_BYTES + 4);
    // Not base64; base64 of bytes that are not a message (a truncated 64-bit field); too long.
    for v in ["not base64!", "CQAA", too_long.as_str()] {
        let e = parse_orca_bin(&text(v)).unwrap_err();
        assert_eq!(e.header, "endpoint-load-metrics-bin", "{v}");
        assert_eq!(e.accepts, accepts::ORCA_BIN);
        assert!(e.value.len() <= 64);
    }
    // An empty message is a report with nothing in it, not an error.
    assert_eq!(
        parse_orca_bin(&text("")).unwrap(),
        OrcaLoadReportMessage::default()
    );
}

#[test]
fn metric_names_parse_and_print_back() {
    for s in [
        "cpu_utilization",
        "mem_utilization",
        "application_utilization",
        "utilization.pool",
        "named_metrics.queue_ratio",
        "named_metrics.a.b",
    ] {
        let m: OrcaMetric = s.parse().unwrap();
        assert_eq!(m.to_string(), s);
    }
    let long = format!("named_metrics.{}", "k".repeat(65));
    for s in [
        "",
        "eps",
        "rps_fractional",
        "named_metrics.",
        "named_metrics.a b",
        "utilization.x=y",
        "utilization.a,b",
        "request_cost.x",
        long.as_str(),
    ] {
        let e = s.parse::<OrcaMetric>().unwrap_err();
        assert!(e.to_string().contains("named_metrics.<key>"), "{e}");
    }
}

#[test]
fn the_default_rule_is_application_else_cpu_in_both_forms() {
    let rule = OrcaUtilisation::default();
    assert_eq!(OrcaUtilisation::from_names::<&str>(&[]).unwrap(), rule);
    let t = |s| rule.from_text(&text(s)).unwrap();
    assert_eq!(t("TEXT cpu_utilization=0.3"), Some(0.3));
    assert_eq!(
        t("TEXT cpu_utilization=0.3, application_utilization=0.8"),
        Some(0.8)
    );
    assert_eq!(t("TEXT named_metrics.q=0.9"), None);
    let mut m = OrcaLoadReportMessage {
        cpu_utilization: 0.3,
        ..Default::default()
    };
    assert_eq!(rule.from_message(&m), Some(0.3));
    m.application_utilization = 0.8;
    assert_eq!(rule.from_message(&m), Some(0.8));
    assert_eq!(rule.from_message(&OrcaLoadReportMessage::default()), None);
}

#[test]
fn chosen_metrics_give_their_largest_present_value() {
    let rule = OrcaUtilisation::from_names(&[
        "named_metrics.queue",
        "utilization.pool",
        "cpu_utilization",
    ])
    .unwrap();
    let t = |s| rule.from_text(&text(s)).unwrap();
    assert_eq!(
        t("TEXT cpu_utilization=0.2, named_metrics.queue=0.7, utilization.pool=0.4"),
        Some(0.7)
    );
    assert_eq!(t("TEXT application_utilization=0.99"), None);
    assert_eq!(
        t("TEXT named_metrics.queue2=5, cpu_utilization=0.1"),
        Some(0.1)
    );
    assert!(rule.from_text(&text("TEXT named_metrics.queue=x")).is_err());

    let mut m = OrcaLoadReportMessage {
        cpu_utilization: 0.2,
        ..Default::default()
    };
    m.utilization.insert("pool".into(), 0.95);
    m.named_metrics.insert("queue".into(), f64::NAN);
    assert_eq!(rule.from_message(&m), Some(0.95));
    let from_wire = rule.from_bin(&format_orca_bin(&m)).unwrap();
    assert_eq!(from_wire, Some(0.95));
    assert!(OrcaUtilisation::from_names(&["eps"]).is_err());
}

proptest! {
    /// Whatever the key and value, a named metric reads the same from either form.
    #[test]
    fn a_named_metric_reads_the_same_from_text_and_protobuf(
        key in "[a-z_][a-z0-9_.]{0,20}",
        x in 0.0f64..1000.0,
    ) {
        let rule = OrcaUtilisation::from_names(&[format!("named_metrics.{key}")]).unwrap();
        let from_text = rule
            .from_text(&text(&format!("TEXT cpu_utilization=0.1, named_metrics.{key}={x}")))
            .unwrap();
        let mut m = OrcaLoadReportMessage::default();
        m.named_metrics.insert(key.clone(), x);
        prop_assert_eq!(from_text, Some(x));
        prop_assert_eq!(rule.from_bin(&format_orca_bin(&m)).unwrap(), Some(x));
    }

    /// No input panics the binary parser.
    #[test]
    fn any_bytes_parse_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let v = BASE64.encode(&bytes);
        let _ = parse_orca_bin(&text(&v));
    }
}
