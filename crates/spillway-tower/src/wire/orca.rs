//! ORCA load reports in their native HTTP form (`endpoint-load-metrics: TEXT key=value, …`; xDS
//! "Open Request Cost Aggregation", envoyproxy/envoy#6614, gRFC A51), read by the proxy from
//! every upstream response and written by the server layer: a small format of its own, kept
//! apart from the header names and their scalar values.

use std::fmt::Write as _;

use http::HeaderValue;

use super::{accepts, name, HeaderError};

/// One ORCA load report in its native HTTP (`TEXT`) form; `None` fields are omitted.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct OrcaReport {
    /// CPU utilisation as a fraction of the available CPU (may exceed 1 past soft limits).
    pub cpu_utilization: Option<f64>,
    /// Memory utilisation as a fraction.
    pub mem_utilization: Option<f64>,
    /// Application-defined utilisation (Spillway reports its load signal here).
    pub application_utilization: Option<f64>,
    /// Requests per second being served.
    pub rps_fractional: Option<f64>,
}

const ORCA_FIELDS: [&str; 4] = [
    "cpu_utilization",
    "mem_utilization",
    "application_utilization",
    "rps_fractional",
];

impl OrcaReport {
    fn fields(&self) -> [Option<f64>; 4] {
        [
            self.cpu_utilization,
            self.mem_utilization,
            self.application_utilization,
            self.rps_fractional,
        ]
    }
}

/// Formats `endpoint-load-metrics: TEXT cpu_utilization=0.4200, …` (non-finite values skipped).
pub fn format_orca(r: &OrcaReport) -> HeaderValue {
    let mut s = String::with_capacity(96);
    s.push_str("TEXT");
    let mut first = true;
    for (name, v) in ORCA_FIELDS.iter().zip(r.fields()) {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            let _ = write!(s, "{}{name}={v:.4}", if first { " " } else { ", " });
            first = false;
        }
    }
    HeaderValue::from_str(&s).unwrap_or_else(|_| HeaderValue::from_static("TEXT"))
}

/// Parses the `TEXT` form; other names (e.g. `named_metrics.*`, `eps`) are skipped here
/// ([`OrcaUtilisation`](super::OrcaUtilisation) reads them).
///
/// What is accepted: a value `to_str` accepts (visible ASCII, spaces, tabs), `TEXT` and then
/// comma-separated `name=value` pairs, spaces and tabs around names, values and commas, empty
/// pairs skipped, every value a finite number. Why it is written so: a proxy parses this for
/// every upstream response, and a byte-at-a-time reading (checking each byte, splitting at
/// commas, finding each `=`) branches on every byte; so the bytes are checked in one pass the
/// compiler vectorises (no early exit) and the separators found with `memchr`.
pub fn parse_orca(v: &HeaderValue) -> Result<OrcaReport, HeaderError> {
    let mut r = OrcaReport::default();
    visit_orca_text(v, |name, x| match name {
        b"cpu_utilization" => r.cpu_utilization = Some(x),
        b"mem_utilization" => r.mem_utilization = Some(x),
        b"application_utilization" => r.application_utilization = Some(x),
        b"rps_fractional" => r.rps_fractional = Some(x),
        _ => {}
    })?;
    Ok(r)
}

/// Calls `pair` with each `name=value` of a `TEXT` report (names trimmed, values finite
/// numbers), in order; the rules are [`parse_orca`]'s. Generic, so each caller's matching of
/// names is compiled into the loop.
pub(super) fn visit_orca_text(
    v: &HeaderValue,
    mut pair: impl FnMut(&[u8], f64),
) -> Result<(), HeaderError> {
    let bad = || HeaderError::new(name::ENDPOINT_LOAD_METRICS, v.as_bytes(), accepts::ORCA);
    let mut pairs = v.as_bytes().strip_prefix(b"TEXT").ok_or_else(bad)?;
    let visible = pairs.iter().fold(true, |ok, &c| {
        ok & ((b' '..=b'~').contains(&c) | (c == b'\t'))
    });
    if !visible {
        return Err(bad());
    }
    loop {
        let end = memchr::memchr(b',', pairs).unwrap_or(pairs.len());
        let one = &pairs[..end];
        match memchr::memchr(b'=', one) {
            Some(at) => {
                let x = parse_f64(one[at + 1..].trim_ascii())
                    .filter(|x| x.is_finite())
                    .ok_or_else(bad)?;
                pair(one[..at].trim_ascii(), x);
            }
            None if one.trim_ascii().is_empty() => {}
            None => return Err(bad()),
        }
        match pairs.get(end + 1..) {
            Some(next) => pairs = next,
            None => return Ok(()),
        }
    }
}

/// `str::parse::<f64>` of `s`, with a fast path for plain decimals (`0.0003`, `12.5`, `7`).
///
/// Why: a proxy parses every upstream response's ORCA values, and core's general float parser
/// is built for every notation, not for the short plain decimals these are. For at most 19
/// digits whose integer value `m` is at most 2^53, with at most 22 of
/// them after the point, `m / 10^k` is one correctly rounded IEEE division of two exactly
/// representable numbers, so it is the correctly rounded value of the decimal — the same
/// answer as `str::parse` (Clinger's fast path, "How to read floating point numbers
/// accurately", PLDI 1990, which core's `dec2flt` also takes first). Anything else (signs,
/// exponents, `inf`, more digits) goes to `str::parse`.
pub(super) fn parse_f64(s: &[u8]) -> Option<f64> {
    const POW10: [f64; 23] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
        1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
    ];
    let mut m: u64 = 0;
    let (mut digits, mut frac, mut point) = (0usize, 0usize, false);
    for &c in s {
        match c {
            b'0'..=b'9' if digits < 19 => {
                m = m * 10 + u64::from(c - b'0');
                digits += 1;
                frac += usize::from(point);
            }
            b'.' if !point => point = true,
            _ => return std::str::from_utf8(s).ok()?.parse().ok(),
        }
    }
    match POW10.get(frac) {
        Some(p) if digits > 0 && m <= 1 << 53 => Some(m as f64 / p),
        _ => std::str::from_utf8(s).ok()?.parse().ok(),
    }
}
