//! `GET /api/calc`: the M/M/c calculator's answers for the calculator page.
//!
//! Why the server computes and the page only draws: the figures must be the ones `spillway
//! calc` prints, so they come from the same code, `spillway_core::erlang` — never from a second
//! copy of the Erlang C formula in JavaScript that could drift from it.
//!
//! Query parameters (all numbers; errors name the parameter and what it accepts):
//!
//! | name | default | meaning |
//! | --- | --- | --- |
//! | `service_time_ms` | required | mean work per request, ms, > 0 |
//! | `workers` / `capacity` | one required | requests in parallel, or completions/s (workers = round(capacity × service time)) |
//! | `utilisation` / `arrival_rate` | one required | arrivals as a fraction of capacity, or req/s (may exceed capacity) |
//! | `sheddable_share` | 0 | share of arrivals that may be refused, 0 to 1 |
//! | `target_wait_ms` | the knee | mean queueing delay to protect |

use serde::Serialize;
use serde_json::json;
use spillway_core::erlang::question::{self, Arrivals, Field, KneeQuestion, Workers};
use spillway_core::erlang::{self, WaitTarget, KNEE_WAIT_FRACTION};

/// Concurrencies drawn as curves, plus the user's own (the same family as `spillway calc`).
pub const CURVE_SERVERS: [u32; 6] = [1, 2, 4, 8, 16, 40];

/// The utilisations each curve is evaluated at: even steps, then denser near saturation where
/// the curves turn up.
fn curve_utilisations() -> Vec<f64> {
    let mut u: Vec<f64> = (0..36).map(|i| f64::from(i) * 0.025).collect();
    u.extend((0..=18).map(|i| 0.9 + f64::from(i) * 0.005));
    u
}

/// A refused calculator question: the parameter at fault and what it accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalcError {
    /// The query parameter.
    pub field: String,
    /// What was wrong and what is accepted.
    pub message: String,
}

impl CalcError {
    fn new(field: &str, message: impl Into<String>) -> Self {
        CalcError {
            field: field.to_string(),
            message: message.into(),
        }
    }
}

#[derive(Debug, Serialize)]
struct Curve {
    servers: u32,
    knee_utilisation: f64,
    square_root_rule_knee: f64,
    /// `[utilisation, mean wait seconds]` pairs.
    points: Vec<[f64; 2]>,
}

fn number(query: &[(String, String)], name: &str, accepts: &str) -> Result<Option<f64>, CalcError> {
    match query.iter().rev().find(|(k, _)| k == name) {
        None => Ok(None),
        Some((_, v)) if v.trim().is_empty() => Ok(None),
        Some((_, v)) => match v.trim().parse::<f64>() {
            Ok(x) if x.is_finite() => Ok(Some(x)),
            _ => Err(CalcError::new(
                name,
                format!("invalid {name} {:?}: expected {accepts}", truncate(v)),
            )),
        },
    }
}

fn truncate(v: &str) -> &str {
    let mut end = v.len().min(32);
    while !v.is_char_boundary(end) {
        end -= 1;
    }
    &v[..end]
}

/// The query parameter an input came from, for errors.
fn parameter(field: Field) -> &'static str {
    match field {
        Field::ServiceTime => "service_time_ms",
        Field::Workers => "workers",
        Field::Capacity => "capacity",
        Field::ArrivalRate => "arrival_rate",
        Field::Utilisation => "utilisation",
        Field::SheddableShare => "sheddable_share",
        Field::TargetWait => "target_wait_ms",
    }
}

/// Answers one calculator question given as `query` (decoded `key=value` pairs).
pub fn answer(query: &[(String, String)]) -> Result<serde_json::Value, CalcError> {
    const MS: &str = "a number of milliseconds > 0, such as 40";
    let s_ms = number(query, "service_time_ms", MS)?.ok_or_else(|| {
        CalcError::new(
            "service_time_ms",
            format!("missing service_time_ms: expected {MS}"),
        )
    })?;
    if s_ms <= 0.0 {
        return Err(CalcError::new(
            "service_time_ms",
            format!("invalid service_time_ms {s_ms}: expected {MS}"),
        ));
    }
    let s = s_ms / 1e3;
    let a = question::answer(&KneeQuestion {
        service_time_secs: s,
        workers: workers(query)?,
        arrivals: arrivals(query)?,
        sheddable_share: number(
            query,
            "sheddable_share",
            "a fraction from 0 to 1 such as 0.3",
        )?
        .unwrap_or(0.0),
        target: number(query, "target_wait_ms", "a number of milliseconds >= 0")?
            .map(|w| WaitTarget::Mean { wait_secs: w / 1e3 }),
    })
    .map_err(|e| CalcError::new(parameter(e.field), e.to_string()))?;

    let curves = question::knee_family(&CURVE_SERVERS, a.servers, s, &curve_utilisations())
        .map_err(|e| CalcError::new("service_time_ms", e.to_string()))?
        .into_iter()
        .map(|c| Curve {
            servers: c.servers,
            knee_utilisation: c.knee_utilisation,
            square_root_rule_knee: c.square_root_rule_knee,
            points: c
                .points
                .iter()
                .map(|l| [l.utilisation, l.mean_wait_secs])
                .collect(),
        })
        .collect::<Vec<_>>();
    Ok(json!({
        "model": "M/M/c",
        "service_time_secs": s,
        "servers": a.servers,
        "servers_from": parameter(a.servers_from),
        "capacity_rps": a.capacity_rps,
        "knee_wait_fraction": KNEE_WAIT_FRACTION,
        "knee_utilisation": a.knee_utilisation,
        "target_wait_secs": a.target.wait_secs(),
        "target_is_default_knee": a.target_is_default_knee,
        "plan": a.plan,
        "curves": curves,
    }))
}

/// `workers`, or else `capacity`.
fn workers(query: &[(String, String)]) -> Result<Workers, CalcError> {
    const WORKERS: &str = "a whole number of workers from 1 to 1000000";
    let count = number(query, "workers", WORKERS)?;
    let capacity = number(query, "capacity", "requests per second >= 0")?;
    match (count, capacity) {
        (Some(w), _)
            if w.fract() != 0.0 || !(1.0..=f64::from(erlang::MAX_SERVERS)).contains(&w) =>
        {
            Err(CalcError::new(
                "workers",
                format!("invalid workers {w}: expected {WORKERS}"),
            ))
        }
        (Some(w), _) => Ok(Workers::Count(w as u32)),
        (None, Some(c)) => Ok(Workers::Capacity(c)),
        (None, None) => Err(CalcError::new(
            "workers",
            "missing workers or capacity: give workers (requests in parallel) or capacity \
             (completions per second)",
        )),
    }
}

/// `arrival_rate`, or else `utilisation`.
fn arrivals(query: &[(String, String)]) -> Result<Arrivals, CalcError> {
    let rate = number(query, "arrival_rate", "requests per second >= 0")?;
    let utilisation = number(
        query,
        "utilisation",
        "a fraction of capacity >= 0 such as 0.9",
    )?;
    match (rate, utilisation) {
        (Some(r), _) => Ok(Arrivals::Rate(r)),
        (None, Some(u)) => Ok(Arrivals::Utilisation(u)),
        (None, None) => Err(CalcError::new(
            "utilisation",
            "missing utilisation or arrival_rate: give the arrivals as a fraction of \
             capacity (0.9) or in requests per second",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_core::erlang::MmcQueue;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn reference_figures_come_from_the_core() {
        // SRE reference: 40 ms of work at 90%: 360 ms queueing with 1 worker, ~4 ms with 40.
        for (workers, expected) in [("1", 0.36), ("40", 0.004_116)] {
            let v = answer(&q(&[
                ("service_time_ms", "40"),
                ("workers", workers),
                ("utilisation", "0.9"),
            ]))
            .unwrap();
            let wait = v["plan"]["without_shedding"]["mean_wait_secs"]
                .as_f64()
                .unwrap();
            assert!((wait - expected).abs() < 5e-6, "{workers}: {wait}");
            let core = MmcQueue::at_utilisation(workers.parse().unwrap(), 0.04, 0.9)
                .unwrap()
                .mean_wait_secs();
            assert_eq!(wait, core);
        }
    }

    #[test]
    fn overload_is_an_answer_and_bad_input_names_the_field() {
        let v = answer(&q(&[
            ("service_time_ms", "1"),
            ("capacity", "1000"),
            ("arrival_rate", "1150"),
            ("sheddable_share", "0.3"),
        ]))
        .unwrap();
        assert!(v["plan"]["without_shedding"].is_null());
        assert!(v["plan"]["with_shedding"].is_object());
        assert_eq!(v["servers"], 1);
        let e = answer(&q(&[
            ("service_time_ms", "abc"),
            ("workers", "1"),
            ("utilisation", "0.5"),
        ]))
        .unwrap_err();
        assert_eq!(e.field, "service_time_ms");
        let e = answer(&q(&[
            ("service_time_ms", "40"),
            ("workers", "1.5"),
            ("utilisation", "0.5"),
        ]))
        .unwrap_err();
        assert_eq!(e.field, "workers");
        let e = answer(&q(&[("service_time_ms", "40"), ("workers", "4")])).unwrap_err();
        assert_eq!(e.field, "utilisation");
        let e = answer(&q(&[
            ("service_time_ms", "40"),
            ("workers", "4"),
            ("utilisation", "0.5"),
            ("sheddable_share", "2"),
        ]))
        .unwrap_err();
        assert_eq!(e.field, "sheddable_share");
    }
}
