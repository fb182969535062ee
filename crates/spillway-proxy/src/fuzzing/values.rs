//! The header value parsers of `spillway_tower::wire`, each against a plain reading of what it
//! documents as accepted (the oracle), and against its own formatter where it has one.

use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use spillway_core::Criticality;
use spillway_tower::wire::{self, OrcaReport, Pushback};

use super::Input;

/// `s` as decimal digits only, at most `max` of them, as a number (`None` otherwise).
fn digits(s: &[u8], max: usize) -> Option<u64> {
    if s.is_empty() || s.len() > max || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// The scalar header value parsers: criticality, `grpc-timeout`, `x-spillway-deadline-ms`,
/// `x-spillway-attempt`, `grpc-previous-rpc-attempts`, customer, `retry-after`,
/// `grpc-retry-pushback-ms`, `x-spillway-cost`; then a request's fields read together
/// (`RequestFields`).
///
/// Input: a control byte (which parser), then the value. Checks, for each: accepted exactly
/// when the oracle accepts, with the oracle's value (the cost to the bit: its fast path claims
/// `str::parse`'s answer); what its formatter writes parses back to the same value; an error
/// names the header and keeps at most 64 bytes of the value. The last choice splits the rest
/// into several fields (at `\n`, name and value at `:`) and checks that `RequestFields` reads
/// the first value of each name and gives the same answers as the parsers.
pub fn header_values(data: &[u8]) {
    let mut input = Input::new(data);
    let which = input.byte() % 10;
    let raw = input.rest;
    if which == 9 {
        return request_fields(raw);
    }
    let Ok(v) = HeaderValue::from_bytes(raw) else {
        return;
    };
    let text = v.to_str().ok();
    let errors: Option<wire::HeaderError> = match which {
        0 => {
            let oracle = text.and_then(|t| {
                let t = t.trim().to_ascii_uppercase().replace('-', "_");
                Criticality::ALL.into_iter().find(|c| c.as_str() == t)
            });
            let got = wire::parse_criticality(&v);
            assert_eq!(got.as_ref().ok(), oracle.as_ref(), "criticality {v:?}");
            if let Ok(c) = got {
                assert_eq!(wire::parse_criticality(&wire::format_criticality(c)), Ok(c));
            }
            got.err()
        }
        1 => {
            let oracle = raw.split_last().and_then(|(&unit, n)| {
                let n = digits(n, 8)?;
                Some(match unit {
                    b'H' => Duration::from_secs(n * 3600),
                    b'M' => Duration::from_secs(n * 60),
                    b'S' => Duration::from_secs(n),
                    b'm' => Duration::from_millis(n),
                    b'u' => Duration::from_micros(n),
                    b'n' => Duration::from_nanos(n),
                    _ => return None,
                })
            });
            let got = wire::parse_grpc_timeout(&v);
            assert_eq!(got.as_ref().ok(), oracle.as_ref(), "grpc-timeout {v:?}");
            if let Ok(d) = got {
                // Written in the finest unit that fits, rounded up: never shorter.
                let back = wire::parse_grpc_timeout(&wire::format_grpc_timeout(d));
                assert!(back.as_ref().is_ok_and(|b| *b >= d), "{d:?} -> {back:?}");
            }
            got.err()
        }
        2 => {
            let oracle = digits(raw, 19).map(Duration::from_millis);
            let got = wire::parse_deadline_ms(&v);
            assert_eq!(got.as_ref().ok(), oracle.as_ref(), "deadline {v:?}");
            if let Ok(d) = got {
                assert_eq!(wire::parse_deadline_ms(&wire::format_deadline_ms(d)), Ok(d));
            }
            got.err()
        }
        3 => {
            let oracle = digits(raw, 10)
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n >= 1);
            let got = wire::parse_attempt(&v);
            assert_eq!(got.as_ref().ok(), oracle.as_ref(), "attempt {v:?}");
            if let Ok(n) = got {
                for protocol in [wire::Protocol::Http, wire::Protocol::Grpc] {
                    let mut h = HeaderMap::new();
                    wire::set_attempt(&mut h, n, protocol);
                    assert_eq!(wire::read_attempt(&h), Ok(n), "{n} over {protocol:?}");
                }
            }
            got.err()
        }
        4 => {
            let oracle = digits(raw, 10)
                .and_then(|n| u32::try_from(n).ok())
                .map(|n| n.saturating_add(1));
            let got = wire::parse_previous_attempts(&v);
            assert_eq!(
                got.as_ref().ok(),
                oracle.as_ref(),
                "previous attempts {v:?}"
            );
            got.err()
        }
        5 => {
            let ok = !raw.is_empty()
                && raw.len() <= 128
                && raw.iter().all(|c| c.is_ascii_graphic() && *c != b',');
            let got = wire::parse_customer(&v);
            assert_eq!(got.is_ok(), ok, "customer {v:?}");
            if let Ok(s) = got {
                assert_eq!(s.as_bytes(), raw);
            }
            got.err()
        }
        6 => {
            let oracle = digits(raw, 19).map(Duration::from_secs);
            let got = wire::parse_retry_after(&v);
            assert_eq!(got.as_ref().ok(), oracle.as_ref(), "retry-after {v:?}");
            if let Ok(d) = got {
                let back = wire::parse_retry_after(&wire::format_retry_after(d));
                assert_eq!(back, Ok(d.max(Duration::from_secs(1))), "retry-after {d:?}");
            }
            got.err()
        }
        7 => {
            let oracle = match text.and_then(|t| t.parse::<i32>().ok()) {
                Some(ms) if ms >= 0 => Pushback::RetryAfter(Duration::from_millis(ms as u64)),
                _ => Pushback::DontRetry,
            };
            let got = wire::parse_pushback(&v);
            assert_eq!(got, oracle, "pushback {v:?}");
            assert_eq!(wire::parse_pushback(&wire::format_pushback(got)), got);
            None
        }
        _ => {
            let oracle = text
                .and_then(|t| t.trim_matches([' ', '\t']).parse::<f64>().ok())
                .filter(|c| c.is_finite() && *c >= 0.0);
            let got = wire::parse_cost(&v);
            assert_eq!(
                got.map(f64::to_bits),
                oracle.map(f64::to_bits),
                "cost {v:?}: {got:?} vs {oracle:?}"
            );
            if let Some(c) = got {
                let back = wire::parse_cost(&wire::format_cost(c));
                // Six decimals: within half a millionth (relative for large costs).
                assert!(
                    back.is_some_and(|b| (b - c).abs() <= 5e-7 + c * 1e-15),
                    "cost {c} -> {back:?}"
                );
            }
            None
        }
    };
    if let Some(e) = errors {
        assert!(
            e.value.len() <= 64 * 3,
            "a long value kept: {}",
            e.value.len()
        );
        assert!(!e.header.is_empty() && !e.accepts.is_empty());
        assert!(e.to_string().contains(e.header));
    }
}

/// Several fields read together: `RequestFields::read` against a plain lookup.
fn request_fields(raw: &[u8]) {
    const NAMES: [&str; 6] = [
        wire::name::CRITICALITY,
        wire::name::CUSTOMER,
        wire::name::DEADLINE_MS,
        wire::name::GRPC_TIMEOUT,
        wire::name::ATTEMPT,
        wire::name::GRPC_PREVIOUS_RPC_ATTEMPTS,
    ];
    let mut h = HeaderMap::new();
    for line in raw.split(|b| *b == b'\n').take(32) {
        let Some((&first, value)) = line.split_first() else {
            continue;
        };
        // A byte picks one of the names read (or another one).
        let name = match NAMES.get(usize::from(first % 8)) {
            Some(n) => HeaderName::from_static(n),
            None => HeaderName::from_static("x-other"),
        };
        if let Ok(v) = HeaderValue::from_bytes(value) {
            h.append(name, v);
        }
    }
    let f = wire::RequestFields::read(&h);
    let first = |n: &str| h.get(n);
    assert_eq!(f.criticality, first(NAMES[0]));
    assert_eq!(f.customer, first(NAMES[1]));
    assert_eq!(f.deadline_ms, first(NAMES[2]));
    assert_eq!(f.grpc_timeout, first(NAMES[3]));
    assert_eq!(f.attempt, first(NAMES[4]));
    assert_eq!(f.grpc_previous_attempts, first(NAMES[5]));
    let attempt = match (first(NAMES[4]), first(NAMES[5])) {
        (Some(v), _) => wire::parse_attempt(v),
        (None, Some(v)) => wire::parse_previous_attempts(v),
        (None, None) => Ok(1),
    };
    assert_eq!(f.attempt(), attempt);
    let timeout = match (first(NAMES[3]), first(NAMES[2])) {
        (Some(v), _) => wire::parse_grpc_timeout(v).map(Some),
        (None, Some(v)) => wire::parse_deadline_ms(v).map(Some),
        (None, None) => Ok(None),
    };
    assert_eq!(f.timeout(), timeout);
    // `find` (a scan for small maps) is `get`.
    for n in NAMES {
        assert_eq!(wire::find(&h, &HeaderName::from_static(n)), h.get(n));
    }
}

/// The ORCA load report parser (`wire::parse_orca`, read from every upstream response) against
/// a plain reading of its documented format: `TEXT`, then comma-separated `name=value` pairs,
/// spaces and tabs around names, values and commas, empty pairs skipped, every value a finite
/// number as `str::parse::<f64>` reads it (to the bit), unknown names skipped; and against its
/// formatter (`format_orca` writes what `parse_orca` reads back, to its 4 decimals).
///
/// The binary form's parser (`wire::parse_orca_bin`) and the chosen-metrics reader
/// (`OrcaUtilisation`) run on the same value, for panics and unbounded work only.
///
/// Input: the value.
pub fn orca(data: &[u8]) {
    let Ok(v) = HeaderValue::from_bytes(data) else {
        return;
    };
    let _ = wire::parse_orca_bin(&v);
    let chosen = wire::OrcaUtilisation::MaxOf(vec![
        wire::OrcaMetric::Named("q".into()),
        wire::OrcaMetric::CpuUtilization,
    ]);
    let _ = chosen.from_text(&v);
    let got = wire::parse_orca(&v);
    let oracle = orca_oracle(data);
    let bits = |r: &OrcaReport| {
        [
            r.cpu_utilization,
            r.mem_utilization,
            r.application_utilization,
            r.rps_fractional,
        ]
        .map(|x| x.map(f64::to_bits))
    };
    assert_eq!(
        got.as_ref().ok().map(bits),
        oracle.as_ref().map(bits),
        "{v:?}: {got:?} vs {oracle:?}"
    );
    if let Ok(r) = got {
        let back = wire::parse_orca(&wire::format_orca(&r)).expect("its own format");
        let close = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => (a - b).abs() <= 5e-5 + a.abs() * 1e-15,
            (a, b) => a.is_none() && b.is_none(),
        };
        assert!(
            close(r.cpu_utilization, back.cpu_utilization)
                && close(r.mem_utilization, back.mem_utilization)
                && close(r.application_utilization, back.application_utilization)
                && close(r.rps_fractional, back.rps_fractional),
            "{r:?} -> {back:?}"
        );
    } else if let Err(e) = got {
        assert_eq!(e.header, wire::name::ENDPOINT_LOAD_METRICS);
    }
}

fn orca_oracle(data: &[u8]) -> Option<OrcaReport> {
    let text = std::str::from_utf8(data).ok()?;
    let pairs = text.strip_prefix("TEXT")?;
    if !pairs
        .bytes()
        .all(|c| (b' '..=b'~').contains(&c) || c == b'\t')
    {
        return None;
    }
    let ws = [' ', '\t'];
    let mut r = OrcaReport::default();
    for pair in pairs.split(',') {
        if pair.trim_matches(ws).is_empty() {
            continue;
        }
        let (name, value) = pair.split_once('=')?;
        let x: f64 = value.trim_matches(ws).parse().ok()?;
        if !x.is_finite() {
            return None;
        }
        match name.trim_matches(ws) {
            "cpu_utilization" => r.cpu_utilization = Some(x),
            "mem_utilization" => r.mem_utilization = Some(x),
            "application_utilization" => r.application_utilization = Some(x),
            "rps_fractional" => r.rps_fractional = Some(x),
            _ => {}
        }
    }
    Some(r)
}
