//! Reads back the handful of metric families the dashboard charts from the Prometheus text the
//! admin listener already renders.
//!
//! Why parse text: the `metrics` facade has exactly one process-wide recorder, and the admin
//! listener installs the process's recorder (`metrics-exporter-prometheus` behind it), whose
//! handle offers nothing but [`render`](crate::admin::metrics::MetricsHandle::render). The
//! per-customer and per-operation refusal counts and the queue-time / processing-time histograms of admitted
//! requests exist only there, so once a second the sampler renders and keeps the families it
//! needs. The format is the stable text exposition format 0.0.4
//! (<https://prometheus.io/docs/instrumenting/exposition_formats/>): one sample per line,
//! `name{label="value",...} number`, with `\\`, `\"` and `\n` escaped inside label values.

use std::collections::BTreeMap;

use spillway_core::Criticality;
use spillway_tower::wire::metric as m;

/// Cumulative counts read from one rendering, aggregated over the labels the dashboard ignores.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PromReading {
    /// `spillway_requests_shed_total` by `reason`.
    pub shed_by_reason: BTreeMap<String, f64>,
    /// ... by `customer`.
    pub shed_by_customer: BTreeMap<String, f64>,
    /// ... by `operation`.
    pub shed_by_operation: BTreeMap<String, f64>,
    /// ... by criticality, lowest first ([`Criticality::index`]).
    pub shed_by_criticality: [f64; Criticality::COUNT],
    /// `spillway_requests_throttled_total` (client side, refused locally), by `customer`.
    pub throttled_by_customer: BTreeMap<String, f64>,
    /// ... by `operation`.
    pub throttled_by_operation: BTreeMap<String, f64>,
    /// ... by criticality.
    pub throttled_by_criticality: [f64; Criticality::COUNT],
    /// Time queued before admission, admitted requests only.
    pub queue_time: Histogram,
    /// Admission to the end of the response body, admitted requests only.
    pub latency: Histogram,
}

/// A cumulative histogram summed over every label set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// `(upper bound in seconds, cumulative count)`, ascending; `+Inf` is the last bound.
    pub buckets: Vec<(f64, f64)>,
    /// Sum of observations, seconds.
    pub sum: f64,
    /// Number of observations.
    pub count: f64,
}

impl Histogram {
    fn add_bucket(&mut self, le: f64, v: f64) {
        match self.buckets.iter_mut().find(|(b, _)| *b == le) {
            Some((_, c)) => *c += v,
            None => {
                self.buckets.push((le, v));
                self.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            }
        }
    }

    /// The observations between `earlier` and `self`: `(mean seconds, p99 seconds, count)`, or
    /// `None` when nothing was observed in between. The p99 is the upper bound of the bucket
    /// holding the 99th percentile (histograms keep no more; the last finite bound stands in
    /// for `+Inf`), capped by nothing else: it is an upper estimate, as Prometheus'
    /// `histogram_quantile` is when the buckets are coarse.
    pub fn delta_summary(&self, earlier: &Histogram) -> Option<(f64, f64, f64)> {
        let count = self.count - earlier.count;
        if count < 1.0 || !count.is_finite() {
            return None;
        }
        let sum = (self.sum - earlier.sum).max(0.0);
        let target = count * 0.99;
        let mut p99 = 0.0;
        let mut last_finite = 0.0;
        for &(le, c) in &self.buckets {
            let before = earlier
                .buckets
                .iter()
                .find(|(b, _)| *b == le)
                .map_or(0.0, |(_, c)| *c);
            if le.is_finite() {
                last_finite = le;
            }
            if c - before >= target {
                p99 = if le.is_finite() { le } else { last_finite };
                break;
            }
        }
        Some((sum / count, p99, count))
    }
}

/// Reads the families named in [`spillway_tower::wire::metric`] out of `text`; unknown lines,
/// comments and malformed lines are skipped (the text is our own exporter's, but a dashboard
/// must never fail because of one odd line).
pub fn read(text: &str) -> PromReading {
    let mut r = PromReading::default();
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let Some((name, labels, value)) = split_line(line) else {
            continue;
        };
        let label = |k: &str| labels.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        let crit_index = || {
            label(m::L_CRITICALITY)
                .and_then(|c| c.parse::<Criticality>().ok())
                .map(Criticality::index)
        };
        if name == m::SHED {
            let reason = label(m::L_REASON).unwrap_or("unknown");
            *r.shed_by_reason.entry(reason.to_string()).or_default() += value;
            if let Some(c) = label(m::L_CUSTOMER) {
                *r.shed_by_customer.entry(c.to_string()).or_default() += value;
            }
            if let Some(o) = label(m::L_OPERATION) {
                *r.shed_by_operation.entry(o.to_string()).or_default() += value;
            }
            if let Some(i) = crit_index() {
                r.shed_by_criticality[i] += value;
            }
        } else if name == m::THROTTLED {
            if let Some(c) = label(m::L_CUSTOMER) {
                *r.throttled_by_customer.entry(c.to_string()).or_default() += value;
            }
            if let Some(o) = label(m::L_OPERATION) {
                *r.throttled_by_operation.entry(o.to_string()).or_default() += value;
            }
            if let Some(i) = crit_index() {
                r.throttled_by_criticality[i] += value;
            }
        } else if let Some(h) = histogram_part(&mut r, name) {
            let (hist, part) = h;
            match part {
                Part::Bucket => {
                    let le = match label("le") {
                        Some("+Inf") => f64::INFINITY,
                        Some(v) => match v.parse::<f64>() {
                            Ok(v) => v,
                            Err(_) => continue,
                        },
                        None => continue,
                    };
                    hist.add_bucket(le, value);
                }
                Part::Sum => hist.sum += value,
                Part::Count => hist.count += value,
            }
        }
    }
    r
}

enum Part {
    Bucket,
    Sum,
    Count,
}

fn histogram_part<'a>(r: &'a mut PromReading, name: &str) -> Option<(&'a mut Histogram, Part)> {
    for (family, hist) in [(m::QUEUE_TIME, 0), (m::LATENCY, 1)] {
        let Some(rest) = name.strip_prefix(family) else {
            continue;
        };
        let part = match rest {
            "_bucket" => Part::Bucket,
            "_sum" => Part::Sum,
            "_count" => Part::Count,
            _ => continue,
        };
        let h = if hist == 0 {
            &mut r.queue_time
        } else {
            &mut r.latency
        };
        return Some((h, part));
    }
    None
}

type Labels = Vec<(String, String)>;

/// `name{a="x",b="y"} 12.5 [timestamp]` → `(name, labels, value)`.
fn split_line(line: &str) -> Option<(&str, Labels, f64)> {
    let (name, rest) = match line.find(['{', ' ']) {
        Some(i) => line.split_at(i),
        None => return None,
    };
    let (labels, rest) = if let Some(body) = rest.strip_prefix('{') {
        parse_labels(body)?
    } else {
        (Vec::new(), rest)
    };
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse::<f64>().ok()?,
    };
    value.is_finite().then_some((name, labels, value))
}

/// Parses `a="x",b="y"}` and returns the labels and what follows the closing brace.
fn parse_labels(mut s: &str) -> Option<(Labels, &str)> {
    let mut out = Vec::new();
    loop {
        s = s.trim_start_matches([',', ' ']);
        if let Some(rest) = s.strip_prefix('}') {
            return Some((out, rest));
        }
        let eq = s.find('=')?;
        let key = s[..eq].trim().to_string();
        s = s[eq + 1..].strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '"' => break i,
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                c => value.push(c),
            }
        };
        out.push((key, value));
        s = &s[end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP spillway_requests_shed_total Requests refused, by reason.
# TYPE spillway_requests_shed_total counter
spillway_requests_shed_total{customer="acme",operation="/api",criticality="SHEDDABLE",reason="shed"} 30
spillway_requests_shed_total{customer="acme",operation="/api",criticality="CRITICAL",reason="queue_full"} 2
spillway_requests_shed_total{customer="b\"x\\y",operation="/img",criticality="SHEDDABLE",reason="shed"} 5
spillway_requests_throttled_total{customer="acme",operation="/api",criticality="CRITICAL",destination="127.0.0.1:1"} 4
spillway_queue_time_seconds_bucket{customer="acme",le="0.001"} 8
spillway_queue_time_seconds_bucket{customer="acme",le="0.01"} 9
spillway_queue_time_seconds_bucket{customer="acme",le="+Inf"} 10
spillway_queue_time_seconds_bucket{customer="b",le="0.001"} 0
spillway_queue_time_seconds_bucket{customer="b",le="0.01"} 0
spillway_queue_time_seconds_bucket{customer="b",le="+Inf"} 10
spillway_queue_time_seconds_sum{customer="acme"} 0.5
spillway_queue_time_seconds_sum{customer="b"} 20
spillway_queue_time_seconds_count{customer="acme"} 10
spillway_queue_time_seconds_count{customer="b"} 10
spillway_request_duration_seconds_count 3
not a metric line
spillway_requests_shed_total{customer="broken} 7
"#;

    #[test]
    fn aggregates_the_charted_families_over_labels() {
        let r = read(TEXT);
        assert_eq!(r.shed_by_reason["shed"], 35.0);
        assert_eq!(r.shed_by_reason["queue_full"], 2.0);
        assert_eq!(r.shed_by_customer["acme"], 32.0);
        assert_eq!(r.shed_by_customer["b\"x\\y"], 5.0);
        assert_eq!(r.shed_by_operation["/img"], 5.0);
        assert_eq!(r.shed_by_criticality, [35.0, 0.0, 2.0, 0.0]);
        assert_eq!(
            r.throttled_by_criticality[Criticality::Critical.index()],
            4.0
        );
        assert_eq!(r.queue_time.count, 20.0);
        assert_eq!(r.queue_time.sum, 20.5);
        assert_eq!(
            r.queue_time.buckets,
            vec![(0.001, 8.0), (0.01, 9.0), (f64::INFINITY, 20.0)]
        );
        assert_eq!(r.latency.count, 3.0);
    }

    #[test]
    fn delta_summary_is_the_window_between_two_readings() {
        let before = read(TEXT);
        let mut after = before.clone();
        // 100 more observations: 99 at <= 1 ms, 1 above 10 ms.
        after.queue_time.count += 100.0;
        after.queue_time.sum += 0.2;
        for (le, c) in &mut after.queue_time.buckets {
            *c += if le.is_finite() { 99.0 } else { 100.0 };
        }
        let (mean, p99, n) = after.queue_time.delta_summary(&before.queue_time).unwrap();
        assert_eq!(n, 100.0);
        assert!((mean - 0.002).abs() < 1e-12);
        assert_eq!(p99, 0.001);
        assert_eq!(before.queue_time.delta_summary(&before.queue_time), None);
    }
}
