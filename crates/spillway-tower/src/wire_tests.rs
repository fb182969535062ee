use super::*;

fn hv(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap()
}

#[test]
fn grpc_timeout_parses_every_unit() {
    for (s, d) in [
        ("1H", Duration::from_secs(3600)),
        ("2M", Duration::from_secs(120)),
        ("3S", Duration::from_secs(3)),
        ("250m", Duration::from_millis(250)),
        ("7u", Duration::from_micros(7)),
        ("99999999n", Duration::from_nanos(99_999_999)),
        ("0m", Duration::ZERO),
        ("99999999H", Duration::from_secs(99_999_999 * 3600)),
    ] {
        assert_eq!(parse_grpc_timeout(&hv(s)), Ok(d), "{s}");
    }
}

#[test]
fn grpc_timeout_rejects_malformed_and_names_the_header() {
    for s in [
        "",
        "m",
        "100",
        "123456789m",
        "10x",
        "-5m",
        "1.5S",
        " 5m",
        "5 m",
    ] {
        let e = parse_grpc_timeout(&hv(s)).unwrap_err();
        assert_eq!(e.header, "grpc-timeout", "{s}");
        assert!(e.to_string().contains("H, M, S, m, u, n"), "{e}");
    }
}

#[test]
fn grpc_timeout_formats_in_finest_fitting_unit_rounding_up() {
    assert_eq!(format_grpc_timeout(Duration::from_nanos(5)), "5n");
    assert_eq!(format_grpc_timeout(Duration::from_millis(250)), "250000u");
    assert_eq!(format_grpc_timeout(Duration::from_secs(1)), "1000000u");
    assert_eq!(format_grpc_timeout(Duration::from_secs(1000)), "1000000m");
    // 100_000_000 ns does not fit 8 digits: next unit, rounded up.
    assert_eq!(
        format_grpc_timeout(Duration::from_nanos(100_000_001)),
        "100001u"
    );
    assert_eq!(format_grpc_timeout(Duration::ZERO), "0n");
    assert_eq!(format_grpc_timeout(Duration::MAX), "99999999H");
}

#[test]
fn grpc_timeout_round_trips_within_one_unit() {
    for ns in [
        1u64,
        999,
        1_000_001,
        123_456_789,
        86_400_000_000_000,
        7_777_777_777_777,
    ] {
        let d = Duration::from_nanos(ns);
        let back = parse_grpc_timeout(&format_grpc_timeout(d)).unwrap();
        assert!(back >= d, "{ns}: {back:?}");
        assert!(
            (back - d).as_secs_f64() <= d.as_secs_f64() * 1e-5 + 1e-9,
            "{ns}"
        );
    }
}

#[test]
fn deadline_ms_parses_and_formats_rounding_up() {
    assert_eq!(
        parse_deadline_ms(&hv("250")),
        Ok(Duration::from_millis(250))
    );
    assert_eq!(parse_deadline_ms(&hv("0")), Ok(Duration::ZERO));
    for s in ["", "-1", "1.5", "abc", "12345678901234567890"] {
        let e = parse_deadline_ms(&hv(s)).unwrap_err();
        assert_eq!(e.header, "x-spillway-deadline-ms");
    }
    assert_eq!(format_deadline_ms(Duration::from_micros(1)), "1");
    assert_eq!(format_deadline_ms(Duration::from_millis(250)), "250");
    assert_eq!(format_deadline_ms(Duration::ZERO), "0");
    assert_eq!(
        format_deadline_ms(Duration::MAX),
        u64::MAX.to_string().as_str()
    );
}

#[test]
fn decimal_values_match_the_standard_formatting() {
    for n in [
        0u64,
        1,
        9,
        10,
        99,
        100,
        12_345,
        4_294_967_295,
        u64::MAX - 1,
        u64::MAX,
    ] {
        assert_eq!(decimal_value(n, None), n.to_string().as_str());
        assert_eq!(decimal_value(n, Some(b'm')), format!("{n}m").as_str());
    }
    let mut h = HeaderMap::new();
    set_attempt(&mut h, 12, Protocol::Http);
    assert_eq!(h[ATTEMPT], "12");
    set_attempt(&mut h, 12, Protocol::Grpc);
    assert_eq!(h[GRPC_PREVIOUS_RPC_ATTEMPTS], "11");
}

#[test]
fn attempt_conversion_between_dialects() {
    assert_eq!(parse_attempt(&hv("1")), Ok(1));
    assert_eq!(parse_attempt(&hv("3")), Ok(3));
    assert_eq!(
        parse_attempt(&hv("0")).unwrap_err().header,
        "x-spillway-attempt"
    );
    assert!(parse_attempt(&hv("x")).is_err());
    assert_eq!(parse_previous_attempts(&hv("0")), Ok(1));
    assert_eq!(parse_previous_attempts(&hv("2")), Ok(3));
    assert_eq!(parse_previous_attempts(&hv("4294967295")), Ok(u32::MAX));
    assert!(parse_previous_attempts(&hv("-1")).is_err());

    let mut h = HeaderMap::new();
    assert_eq!(read_attempt(&h), Ok(1));
    set_attempt(&mut h, 1, Protocol::Grpc);
    assert!(
        h.get(GRPC_PREVIOUS_RPC_ATTEMPTS).is_none(),
        "absent on the first attempt"
    );
    set_attempt(&mut h, 3, Protocol::Grpc);
    assert_eq!(h.get(GRPC_PREVIOUS_RPC_ATTEMPTS).unwrap(), "2");
    assert_eq!(read_attempt(&h), Ok(3));
    set_attempt(&mut h, 2, Protocol::Http);
    assert_eq!(
        read_attempt(&h),
        Ok(3),
        "the larger of the two: a gRPC client's own retries count"
    );
    set_attempt(&mut h, 4, Protocol::Http);
    assert_eq!(read_attempt(&h), Ok(4));
    h.insert(GRPC_PREVIOUS_RPC_ATTEMPTS, hv("junk"));
    assert_eq!(
        read_attempt(&h),
        Ok(4),
        "a malformed gRPC count beside ours"
    );
}

#[test]
fn criticality_header() {
    assert_eq!(
        parse_criticality(&hv("sheddable-plus")),
        Ok(Criticality::SheddablePlus)
    );
    assert_eq!(
        parse_criticality(&format_criticality(Criticality::CriticalPlus)),
        Ok(Criticality::CriticalPlus)
    );
    let e = parse_criticality(&hv("urgent")).unwrap_err();
    assert_eq!(e.header, "x-spillway-criticality");
    assert!(e.to_string().contains("SHEDDABLE_PLUS"), "{e}");
    assert!(parse_criticality(&HeaderValue::from_bytes(b"\xffcrit").unwrap()).is_err());
}

#[test]
fn customer_header() {
    assert_eq!(parse_customer(&hv("acme-corp_1")), Ok("acme-corp_1"));
    for s in ["", "a b", "a,b", &"x".repeat(129)] {
        assert_eq!(
            parse_customer(&hv(s)).unwrap_err().header,
            "x-spillway-customer"
        );
    }
    let long = parse_customer(&hv(&"y".repeat(500))).unwrap_err();
    assert!(long.value.len() <= 64, "hostile values are truncated");
}

#[test]
fn retry_after_rounds_up_to_at_least_one_second() {
    assert_eq!(format_retry_after(Duration::ZERO), "1");
    assert_eq!(format_retry_after(Duration::from_millis(1)), "1");
    assert_eq!(format_retry_after(Duration::from_millis(1001)), "2");
    assert_eq!(format_retry_after(Duration::from_secs(30)), "30");
    assert_eq!(parse_retry_after(&hv("7")), Ok(Duration::from_secs(7)));
    let e = parse_retry_after(&hv("Wed, 21 Oct 2015 07:28:00 GMT")).unwrap_err();
    assert_eq!(e.header, "retry-after");
}

/// Small delays come from a static table, longer ones from the formatter: both must write the
/// standard decimal form.
#[test]
fn retry_after_static_and_formatted_values_agree_with_standard_formatting() {
    for secs in (1..=12u64).chain([59, 60, 3_600, u64::MAX]) {
        let got = format_retry_after(Duration::from_secs(secs));
        assert_eq!(got, secs.to_string().as_str(), "{secs} s");
    }
    assert_eq!(
        format_retry_after(Duration::MAX),
        u64::MAX.to_string().as_str()
    );
}

#[test]
fn pushback_follows_grfc_a6() {
    assert_eq!(
        parse_pushback(&hv("1500")),
        Pushback::RetryAfter(Duration::from_millis(1500))
    );
    assert_eq!(
        parse_pushback(&hv("0")),
        Pushback::RetryAfter(Duration::ZERO)
    );
    assert_eq!(parse_pushback(&hv("-1")), Pushback::DontRetry);
    assert_eq!(
        parse_pushback(&hv("soon")),
        Pushback::DontRetry,
        "unparseable = don't retry"
    );
    assert_eq!(
        parse_pushback(&hv("99999999999")),
        Pushback::DontRetry,
        "not an i32"
    );
    assert_eq!(format_pushback(Pushback::DontRetry), "-1");
    assert_eq!(
        format_pushback(Pushback::RetryAfter(Duration::from_micros(1500))),
        "2"
    );
    assert_eq!(
        format_pushback(Pushback::RetryAfter(Duration::MAX)),
        "2147483647"
    );

    let mut h = HeaderMap::new();
    assert!(
        !is_dont_retry(&h),
        "absent pushback leaves the client's backoff in charge"
    );
    h.insert(GRPC_RETRY_PUSHBACK_MS, hv("100"));
    assert!(!is_dont_retry(&h));
    h.insert(GRPC_RETRY_PUSHBACK_MS, hv("-1"));
    assert!(is_dont_retry(&h));
    let mut h = HeaderMap::new();
    h.insert(DONT_RETRY, hv("1"));
    assert!(is_dont_retry(&h));
}

#[test]
fn protocol_and_grpc_status() {
    let mut h = HeaderMap::new();
    assert_eq!(Protocol::of(&h), Protocol::Http);
    h.insert(http::header::CONTENT_TYPE, hv("application/grpc+proto"));
    assert_eq!(Protocol::of(&h), Protocol::Grpc);
    h.insert(http::header::CONTENT_TYPE, hv("application/json"));
    assert_eq!(Protocol::of(&h), Protocol::Http);
    assert_eq!(grpc_status(&h), None);
    h.insert(GRPC_STATUS, hv("14"));
    assert_eq!(grpc_status(&h), Some(GRPC_UNAVAILABLE));
    h.insert(GRPC_STATUS, hv("x"));
    assert_eq!(grpc_status(&h), None);
}

#[test]
fn orca_text_round_trip() {
    let r = OrcaReport {
        cpu_utilization: Some(0.42),
        application_utilization: Some(0.9),
        ..Default::default()
    };
    let v = format_orca(&r);
    assert_eq!(
        v,
        "TEXT cpu_utilization=0.4200, application_utilization=0.9000"
    );
    assert_eq!(parse_orca(&v), Ok(r));
    let p = parse_orca(&hv(
        "TEXT cpu_utilization=0.3, mem_utilization=0.8, rps_fractional=10.0, eps=1, named_metrics.x=0.4",
    ))
    .unwrap();
    assert_eq!(p.mem_utilization, Some(0.8));
    assert_eq!(p.rps_fractional, Some(10.0));
    assert_eq!(
        parse_orca(&hv("JSON {}")).unwrap_err().header,
        "endpoint-load-metrics"
    );
    assert!(parse_orca(&hv("TEXT cpu_utilization")).is_err());
    assert!(parse_orca(&hv("TEXT cpu_utilization=NaN")).is_err());
    // Spaces and tabs around names, values and commas; empty pairs; `=` in a skipped value.
    let p = parse_orca(&hv(
        "TEXT\t application_utilization =\t0.25 ,, cpu_utilization= 1e-1,\tnamed_metrics.a==1",
    ));
    assert!(p.is_err(), "`=1` is not a number: {p:?}");
    let p = parse_orca(&hv(
        "TEXT\t application_utilization =\t0.25 ,, cpu_utilization= 1e-1,",
    ))
    .unwrap();
    assert_eq!(p.application_utilization, Some(0.25));
    assert_eq!(p.cpu_utilization, Some(0.1));
    assert_eq!(parse_orca(&hv("TEXT")), Ok(OrcaReport::default()));
    assert!(parse_orca(&hv("TEXT cpu_utilization=inf")).is_err());
    assert!(parse_orca(&hv("TEXT cpu_utilization=0.5x")).is_err());
    assert!(
        parse_orca(&hv("TEXT =0.5")).is_ok(),
        "an empty name is an unknown one, skipped"
    );
}

#[test]
fn give_up_response_carries_the_marker() {
    let g = OverloadGiveUp {
        attempts: 3,
        reason: "budget",
    };
    let res: http::Response<String> = g.to_response();
    assert_eq!(res.status(), 503);
    assert!(is_dont_retry(res.headers()));
    assert_eq!(res.extensions().get::<OverloadGiveUp>(), Some(&g));
    assert!(g.to_string().contains("3 attempt(s): budget"));
}

proptest::proptest! {
    /// `find`, `find_each` and `find_only` answer as `HeaderMap::get` and `get_all` (and its
    /// single value) for maps on both sides of the scan limit, with
    /// repeated names (first value wins), standard and custom names, and removals (which
    /// reorder the map's entries).
    #[test]
    fn find_is_get(
        ops in proptest::collection::vec((0usize..8, 0u8..4, proptest::bool::ANY), 0..40),
        ask in 0usize..8,
    ) {
        let names = [
            http::header::HOST, http::header::CONTENT_TYPE, http::header::TE,
            ATTEMPT, DEADLINE_MS, GRPC_TIMEOUT, CUSTOMER,
            HeaderName::from_static("x-other"),
        ];
        let mut h = HeaderMap::new();
        for (n, v, remove) in ops {
            if remove {
                h.remove(&names[n]);
            } else {
                h.append(names[n].clone(), HeaderValue::from(u16::from(v)));
            }
        }
        proptest::prop_assert_eq!(find(&h, &names[ask]), h.get(&names[ask]));
        let each: Vec<_> = find_each(&h, &names[ask]).collect();
        let all: Vec<_> = h.get_all(&names[ask]).iter().collect();
        let only = (all.len() == 1).then(|| all[0]);
        proptest::prop_assert_eq!(each, all);
        proptest::prop_assert_eq!(find_only(&h, &names[ask]), only);
    }
}

proptest::proptest! {
    /// The ORCA value parser's fast path gives `str::parse`'s answer, bit for bit, for plain
    /// decimals and for anything else (which it hands over).
    #[test]
    fn orca_values_parse_as_str_parse(
        int in "[0-9]{0,12}",
        frac in proptest::option::of("[0-9]{0,24}"),
        other in "[-+0-9.eEinfa]{0,8}",
    ) {
        let plain = match &frac {
            Some(f) => format!("{int}.{f}"),
            None => int.clone(),
        };
        for s in [plain.as_str(), other.as_str()] {
            let want = s.parse::<f64>().ok().map(f64::to_bits);
            let got = orca::parse_f64(s.as_bytes()).map(f64::to_bits);
            proptest::prop_assert_eq!(got, want, "{}", s);
        }
    }
}

#[test]
fn orca_values_at_the_fast_path_edges_parse_as_str_parse() {
    for s in [
        "9007199254740992",
        "9007199254740993",
        "0.9007199254740993",
        "1234567890123456789",
        "12345678901234567890",
        "0.0000000000000000000001",
        "0.00000000000000000000001",
        "5.",
        ".5",
        ".",
        "",
        "00.1000",
        "0.1",
        "0.2",
        "0.3",
        "1e-3",
        "-0.5",
        "+0.5",
    ] {
        let want = s.parse::<f64>().ok().map(f64::to_bits);
        assert_eq!(orca::parse_f64(s.as_bytes()).map(f64::to_bits), want, "{s}");
    }
}

/// The ORCA `TEXT` form read the plain way — check the bytes, split at commas, trim, split at
/// the first `=` — for [`parse_orca`]'s one-pass reading to be compared with.
fn parse_orca_plainly(v: &HeaderValue) -> Option<OrcaReport> {
    let s = v.to_str().ok()?.strip_prefix("TEXT")?;
    let mut r = OrcaReport::default();
    for pair in s.split(',').map(|p| p.trim_matches([' ', '\t'])) {
        if pair.is_empty() {
            continue;
        }
        let (k, val) = pair.split_once('=')?;
        let x = val
            .trim_matches([' ', '\t'])
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite())?;
        match k.trim_matches([' ', '\t']) {
            "cpu_utilization" => r.cpu_utilization = Some(x),
            "mem_utilization" => r.mem_utilization = Some(x),
            "application_utilization" => r.application_utilization = Some(x),
            "rps_fractional" => r.rps_fractional = Some(x),
            _ => {}
        }
    }
    Some(r)
}

proptest::proptest! {
    /// The one-pass ORCA reader accepts exactly what the plain reading accepts, with the same
    /// figures: reports of pairs built from names, stray bytes (`obs-text` and controls
    /// included, which a `HeaderValue` may hold and `to_str` refuses), `=` signs, numbers and
    /// separators.
    #[test]
    fn orca_reports_parse_as_the_plain_reading(
        prefix in proptest::sample::select(vec!["TEXT", "TEXT ", "JSON ", "TEX", ""]),
        pairs in proptest::collection::vec((
            proptest::sample::select(vec![
                "cpu_utilization", "mem_utilization", "application_utilization",
                "rps_fractional", "named_metrics.x", "eps", "", " cpu_utilization\t",
            ]),
            proptest::sample::select(vec!["", "", "", "\u{80}", "\u{1}", "\t", " ", "x"]),
            proptest::sample::select(vec!["=", "=", " = ", "==", ""]),
            proptest::sample::select(vec![
                "0.25", "1e-1", "7", "12.5000", "NaN", "inf", "-0.5", "", " 3 ", "0.5x", "\u{80}",
            ]),
            proptest::sample::select(vec![",", ", ", ",,", " ,\t", ""]),
        ), 0..6),
    ) {
        let mut text = prefix.to_string();
        for (name, stray, eq, value, sep) in pairs {
            text.push_str(&format!("{name}{stray}{eq}{value}{sep}"));
        }
        let Ok(v) = HeaderValue::from_bytes(text.as_bytes()) else {
            return Ok(());
        };
        proptest::prop_assert_eq!(parse_orca(&v).ok(), parse_orca_plainly(&v), "{:?}", text);
    }
}

proptest::proptest! {
    /// A cost reads as `str::parse` reads the trimmed text, finite and non-negative only.
    #[test]
    fn costs_parse_as_str_parse(text in "[ \t]{0,2}[-+0-9.eEinfa]{0,10}[ \t]{0,2}") {
        let v = HeaderValue::from_str(&text).unwrap();
        let want = text
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|c| c.is_finite() && *c >= 0.0)
            .map(f64::to_bits);
        proptest::prop_assert_eq!(parse_cost(&v).map(f64::to_bits), want, "{:?}", text);
    }
}

#[test]
fn a_formatted_cost_reads_back() {
    for c in [0.0, 0.002145, 1.5, 12345.678901] {
        let back = parse_cost(&format_cost(c)).unwrap();
        assert!((back - c).abs() < 1e-6, "{c} -> {back}");
    }
    assert_eq!(parse_cost(&HeaderValue::from_static("-1")), None);
    assert_eq!(parse_cost(&HeaderValue::from_static("inf")), None);
    assert_eq!(parse_cost(&HeaderValue::from_static("cheap")), None);
}

proptest::proptest! {
    /// One pass finds what six lookups find: the first value of each field, whatever else the
    /// map holds, in any order, repeated or not, on both sides of the scan limit.
    #[test]
    fn request_fields_are_what_get_finds(
        fields in proptest::collection::vec((0usize..9, 0u8..3), 0..30),
    ) {
        let names = [
            CRITICALITY, CUSTOMER, DEADLINE_MS, GRPC_TIMEOUT, ATTEMPT, GRPC_PREVIOUS_RPC_ATTEMPTS,
            http::header::HOST, HeaderName::from_static("x-spillway-other"),
            HeaderName::from_static("x-spillway-attemp"),
        ];
        let mut h = HeaderMap::new();
        for (n, v) in fields {
            h.append(names[n].clone(), HeaderValue::from(u16::from(v)));
        }
        let f = RequestFields::read(&h);
        proptest::prop_assert_eq!(f.criticality, h.get(CRITICALITY));
        proptest::prop_assert_eq!(f.customer, h.get(CUSTOMER));
        proptest::prop_assert_eq!(f.deadline_ms, h.get(DEADLINE_MS));
        proptest::prop_assert_eq!(f.grpc_timeout, h.get(GRPC_TIMEOUT));
        proptest::prop_assert_eq!(f.attempt, h.get(ATTEMPT));
        proptest::prop_assert_eq!(f.grpc_previous_attempts, h.get(GRPC_PREVIOUS_RPC_ATTEMPTS));
    }
}
