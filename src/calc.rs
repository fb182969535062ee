//! `spillway calc`: the knee table for your concurrency, and when to start refusing work.
//!
//! Why: the same utilisation costs 360 ms of queueing on one worker and 4 ms on forty for 40 ms
//! of work, so a bare percentage is not a capacity rule. This prints the family of M/M/c curves
//! around the user's service and answers "at what arrival rate does queueing alone break the
//! latency target, and what does shedding the sheddable share buy?" (the arithmetic is
//! `spillway_core::erlang`; this module only parses, converts and prints).
//!
//! Conventions, documented in `--help` too:
//! - Durations take a unit (`400us`, `40ms`, `0.04s`), as every `spillway` subcommand's do
//!   (`spillway_load::units::parse_duration`); a bare number other than 0 is refused.
//! - `--capacity` is converted to workers as `round(capacity × service time)` (Little's law);
//!   the table and the plan then use that whole number of workers.
//! - Without `--target-wait` the target is the knee: a mean queueing delay of 10% of the service
//!   time (`erlang::KNEE_WAIT_FRACTION`). With `--target-percentile P` the target applies to the
//!   P-th percentile of queueing delay instead of the mean.
//! - Arrivals at or above capacity are not an error: the unshed latency is "unbounded".

use std::io::Write;

use anyhow::Result;
use clap::{ArgGroup, Args};
use spillway_core::erlang::question::{self, Arrivals, Field, KneeQuestion, Workers};
use spillway_core::erlang::{self, ShedPlan, WaitTarget, KNEE_WAIT_FRACTION, MAX_SERVERS};

use spillway_load::units::{parse_duration, DURATION_ACCEPTS};

use crate::UsageError;

/// Utilisations shown as the table's rows (the curve is flat, then is not: dense near 1).
const TABLE_UTILISATIONS: [f64; 9] = [0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98, 0.99];
/// Concurrencies shown as columns, plus the user's own.
const TABLE_SERVERS: [u32; 6] = [1, 2, 4, 8, 16, 40];

/// `spillway calc` arguments.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("size").required(true).args(["workers", "capacity"])))]
#[command(group(ArgGroup::new("load").required(true).args(["utilisation", "arrival_rate"])))]
pub struct CalcArgs {
    /// Mean work per request: 40ms, 0.04s or 400us (a unit is required).
    #[arg(long, value_name = "DURATION", value_parser = parse_service_time, allow_hyphen_values = true)]
    service_time: f64,
    /// Requests served in parallel (1 to 1000000).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_SERVERS)))]
    workers: Option<u32>,
    /// Completed requests per second under load; workers = round(capacity × service time).
    #[arg(long, value_name = "RPS", value_parser = parse_rate, allow_negative_numbers = true)]
    capacity: Option<f64>,
    /// Arrivals as a fraction of capacity: 0.9 or 90%; above 1 is overload.
    #[arg(long, value_name = "U", value_parser = parse_utilisation, allow_negative_numbers = true)]
    utilisation: Option<f64>,
    /// Arrivals in requests per second; may exceed capacity.
    #[arg(long, value_name = "RPS", value_parser = parse_rate, allow_negative_numbers = true)]
    arrival_rate: Option<f64>,
    /// Share of arrivals that may be refused, 0 to 1 (0.3 or 30%).
    #[arg(long, value_name = "F", default_value = "0", value_parser = parse_share, allow_negative_numbers = true)]
    sheddable_share: f64,
    /// Queueing delay to protect [default: the knee, 10% of the service time, as a mean].
    #[arg(long, value_name = "DURATION", value_parser = parse_target_wait, allow_hyphen_values = true)]
    target_wait: Option<f64>,
    /// Apply --target-wait to this percentile of queueing delay (e.g. 99) instead of the mean.
    #[arg(long, value_name = "P", requires = "target_wait", value_parser = parse_percentile, allow_negative_numbers = true)]
    target_percentile: Option<f64>,
    /// Print machine-readable JSON instead of tables.
    #[arg(long)]
    json: bool,
}

/// Seconds from the CLI's one duration syntax (`40ms`, `0.04s`, `400us`; a bare number is
/// refused because 40 could mean 40 ms or 40 s).
fn parse_duration_secs(text: &str) -> Result<f64, String> {
    parse_duration(text).map(|d| d.as_secs_f64())
}

fn parse_service_time(text: &str) -> Result<f64, String> {
    match parse_duration_secs(text)? {
        s if s > 0.0 => Ok(s),
        _ => Err(format!(
            "a service time must be > 0: expected {DURATION_ACCEPTS}"
        )),
    }
}

fn parse_target_wait(text: &str) -> Result<f64, String> {
    parse_duration_secs(text)
}

fn parse_finite(text: &str) -> Option<f64> {
    text.trim().parse::<f64>().ok().filter(|v| v.is_finite())
}

fn parse_rate(text: &str) -> Result<f64, String> {
    match parse_finite(text) {
        Some(v) if v >= 0.0 => Ok(v),
        _ => Err("expected requests per second, a finite number >= 0".into()),
    }
}

/// A fraction written as `0.9` or `90%`.
fn parse_fraction(text: &str) -> Option<f64> {
    match text.trim().strip_suffix('%') {
        Some(pct) => parse_finite(pct).map(|v| v / 100.0),
        None => parse_finite(text),
    }
}

fn parse_utilisation(text: &str) -> Result<f64, String> {
    match parse_fraction(text) {
        Some(v) if v >= 0.0 => Ok(v),
        _ => Err(
            "expected a fraction of capacity >= 0 such as 0.9 or 90% (above 1 is overload)".into(),
        ),
    }
}

fn parse_share(text: &str) -> Result<f64, String> {
    match parse_fraction(text) {
        Some(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err("expected a fraction from 0 to 1 such as 0.3 or 30%".into()),
    }
}

fn parse_percentile(text: &str) -> Result<f64, String> {
    match parse_finite(text.trim().trim_start_matches('p')) {
        Some(v) if v > 0.0 && v < 100.0 => Ok(v / 100.0),
        _ => Err("expected a percentile above 0 and below 100, such as 99 or 99.9".into()),
    }
}

fn usage(flag: &str, e: impl std::fmt::Display) -> anyhow::Error {
    UsageError(format!("{flag}: {e}")).into()
}

/// One column of the knee table.
#[derive(Debug, serde::Serialize)]
struct KneeColumn {
    servers: u32,
    /// Utilisation at which mean queueing delay reaches KNEE_WAIT_FRACTION × service time.
    knee_utilisation: f64,
    /// The 1 − 1/√c rule of thumb, for comparison.
    square_root_rule_knee: f64,
    rows: Vec<KneeCell>,
}

#[derive(Debug, serde::Serialize)]
struct KneeCell {
    utilisation: f64,
    mean_wait_secs: f64,
    p99_wait_secs: f64,
    mean_response_secs: f64,
}

#[derive(Debug, serde::Serialize)]
struct Report {
    model: &'static str,
    service_time_secs: f64,
    servers: u32,
    /// "workers" or "capacity": which flag gave the worker count.
    servers_from: &'static str,
    capacity_rps: f64,
    knee_wait_fraction: f64,
    knee_definition: &'static str,
    target_is_default_knee: bool,
    knee_table: Vec<KneeColumn>,
    /// Latencies are null where unbounded (arrivals at or above capacity).
    plan: ShedPlan,
}

const KNEE_DEFINITION: &str =
    "the utilisation at which mean queueing delay reaches knee_wait_fraction x the service time";

/// Runs `spillway calc`.
pub fn run(args: &CalcArgs) -> Result<()> {
    let report = build_report(args)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        write_human(&mut out, &report)?;
    }
    Ok(())
}

/// The flag an input came from, for errors.
fn flag(field: Field, arrivals_flag: &'static str) -> &'static str {
    match field {
        Field::ServiceTime => "--service-time",
        Field::Workers => "--workers",
        Field::Capacity => "--capacity",
        Field::ArrivalRate | Field::Utilisation => arrivals_flag,
        Field::SheddableShare => "--sheddable-share",
        Field::TargetWait => "--target-wait",
    }
}

fn build_report(args: &CalcArgs) -> Result<Report> {
    let s = args.service_time;
    let workers = match (args.workers, args.capacity) {
        (Some(w), _) => Workers::Count(w),
        (None, Some(cap)) => Workers::Capacity(cap),
        // clap's required group rules this out; say so rather than panic.
        (None, None) => return Err(usage("--workers/--capacity", "one of them is required")),
    };
    let (arrivals, arrivals_flag) = match (args.arrival_rate, args.utilisation) {
        (Some(r), _) => (Arrivals::Rate(r), "--arrival-rate"),
        (None, Some(u)) => (Arrivals::Utilisation(u), "--utilisation"),
        (None, None) => {
            return Err(usage(
                "--utilisation/--arrival-rate",
                "one of them is required",
            ))
        }
    };
    let target = args.target_wait.map(|w| match args.target_percentile {
        None => WaitTarget::Mean { wait_secs: w },
        Some(p) => WaitTarget::Quantile {
            quantile: p,
            wait_secs: w,
        },
    });
    let a = question::answer(&KneeQuestion {
        service_time_secs: s,
        workers,
        arrivals,
        sheddable_share: args.sheddable_share,
        target,
    })
    .map_err(|e| usage(flag(e.field, arrivals_flag), e))?;

    let mut rows: Vec<f64> = TABLE_UTILISATIONS.to_vec();
    let own = a.plan.offered_utilisation;
    if own > 0.0 && own < 1.0 && rows.iter().all(|r| (r - own).abs() > 1e-9) {
        rows.push(own);
        rows.sort_by(f64::total_cmp);
    }
    let knee_table = question::knee_family(&TABLE_SERVERS, a.servers, s, &rows)
        .map_err(|e| usage("--service-time", e))?
        .into_iter()
        .map(|curve| KneeColumn {
            servers: curve.servers,
            knee_utilisation: curve.knee_utilisation,
            square_root_rule_knee: curve.square_root_rule_knee,
            rows: curve
                .points
                .iter()
                .map(|l| KneeCell {
                    utilisation: l.utilisation,
                    mean_wait_secs: l.mean_wait_secs,
                    p99_wait_secs: l.p99_wait_secs,
                    mean_response_secs: l.mean_response_secs,
                })
                .collect(),
        })
        .collect();
    Ok(Report {
        model: "M/M/c",
        service_time_secs: s,
        servers: a.servers,
        servers_from: match a.servers_from {
            Field::Capacity => "capacity",
            _ => "workers",
        },
        capacity_rps: a.capacity_rps,
        knee_wait_fraction: KNEE_WAIT_FRACTION,
        knee_definition: KNEE_DEFINITION,
        target_is_default_knee: a.target_is_default_knee,
        knee_table,
        plan: a.plan,
    })
}

/// A time for people: ms with sensible precision, seconds past 10 s.
fn fmt_secs(secs: f64) -> String {
    let ms = secs * 1e3;
    if secs == 0.0 {
        "0 ms".into()
    } else if ms < 0.001 {
        "<0.001 ms".into()
    } else if ms < 1.0 {
        format!("{ms:.3} ms")
    } else if ms < 10.0 {
        format!("{ms:.2} ms")
    } else if ms < 100.0 {
        format!("{ms:.1} ms")
    } else if secs < 10.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{secs:.1} s")
    }
}

fn fmt_rate(rps: f64) -> String {
    if rps >= 100.0 {
        format!("{rps:.0} req/s")
    } else if rps >= 1.0 {
        format!("{rps:.1} req/s")
    } else {
        format!("{rps:.3} req/s")
    }
}

fn fmt_pct(f: f64) -> String {
    let pct = f * 100.0;
    if (pct - pct.round()).abs() < 0.05 {
        format!("{pct:.0}%")
    } else {
        format!("{pct:.1}%")
    }
}

fn write_human(out: &mut impl Write, r: &Report) -> std::io::Result<()> {
    let s = r.service_time_secs;
    let p = &r.plan;
    let from = if r.servers_from == "capacity" {
        " (from --capacity: round(capacity × service time))"
    } else {
        ""
    };
    writeln!(
        out,
        "M/M/c: {} of work per request, {} workers{from}, capacity {}",
        fmt_secs(s),
        r.servers,
        fmt_rate(r.capacity_rps)
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "Mean queueing delay added to the {} of work, by utilisation and concurrency c:",
        fmt_secs(s)
    )?;
    let width = 11;
    write!(out, "{:>12}", "utilisation")?;
    for col in &r.knee_table {
        let mark = if col.servers == r.servers { "*" } else { "" };
        write!(out, "{:>width$}", format!("c={}{mark}", col.servers))?;
    }
    writeln!(out)?;
    let nrows = r.knee_table.first().map_or(0, |c| c.rows.len());
    for i in 0..nrows {
        let u = r.knee_table[0].rows[i].utilisation;
        let mark = if (u - p.offered_utilisation).abs() < 1e-9 {
            "*"
        } else {
            ""
        };
        write!(out, "{:>12}", format!("{}{mark}", fmt_pct(u)))?;
        for col in &r.knee_table {
            write!(out, "{:>width$}", fmt_secs(col.rows[i].mean_wait_secs))?;
        }
        writeln!(out)?;
    }
    write!(out, "{:>12}", "knee")?;
    for col in &r.knee_table {
        write!(out, "{:>width$}", fmt_pct(col.knee_utilisation))?;
    }
    writeln!(out)?;
    write!(out, "{:>12}", "1 − 1/√c")?;
    for col in &r.knee_table {
        write!(out, "{:>width$}", fmt_pct(col.square_root_rule_knee))?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "  * your service. knee: where mean queueing delay reaches {:.0}% of the work; 1 − 1/√c is",
        KNEE_WAIT_FRACTION * 100.0
    )?;
    writeln!(
        out,
        "    the square-root-staffing rule of thumb. M/M/c is a floor: real traffic is burstier."
    )?;
    writeln!(out)?;

    let target = match p.input.target {
        WaitTarget::Mean { wait_secs } => format!("mean queueing delay <= {}", fmt_secs(wait_secs)),
        WaitTarget::Quantile {
            quantile,
            wait_secs,
        } => {
            format!(
                "p{} queueing delay <= {}",
                fmt_pct(quantile).trim_end_matches('%'),
                fmt_secs(wait_secs)
            )
        }
    };
    let why = if r.target_is_default_knee {
        " (the knee; set --target-wait to change)"
    } else {
        ""
    };
    writeln!(
        out,
        "Your traffic: {} arriving, {} of capacity; {} of it sheddable.",
        fmt_rate(p.input.arrival_rate),
        fmt_pct(p.offered_utilisation),
        fmt_pct(p.input.sheddable_share)
    )?;
    writeln!(out, "Target: {target}{why}.")?;
    writeln!(
        out,
        "Start refusing above {} ({} of capacity): past it, queueing alone breaks the target.",
        fmt_rate(p.refuse_above_rate),
        fmt_pct(p.refuse_above_utilisation)
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "{:<18}{:>14}{:>13}{:>12}{:>12}{:>15}",
        "", "served", "utilisation", "mean wait", "p99 wait", "mean response"
    )?;
    write_case(
        out,
        "without shedding",
        p.input.arrival_rate,
        p.offered_utilisation,
        p.without_shedding.as_ref(),
    )?;
    write_case(
        out,
        "with shedding",
        p.served_rate,
        p.served_rate / p.capacity,
        p.with_shedding.as_ref(),
    )?;
    writeln!(out)?;
    if p.shed_rate == 0.0 && p.shortfall_rate == 0.0 {
        writeln!(
            out,
            "Nothing needs shedding: the arrivals already meet the target."
        )?;
    } else if p.shortfall_rate == 0.0 {
        writeln!(
            out,
            "Shedding {} ({} of arrivals, out of {} sheddable) meets the target.",
            fmt_rate(p.shed_rate),
            fmt_pct(p.shed_rate / p.input.arrival_rate),
            fmt_rate(p.sheddable_rate)
        )?;
    } else {
        if p.shed_rate > 0.0 {
            writeln!(
                out,
                "Shedding all {} sheddable still leaves {} above the refuse rate: \
                 prioritisation cannot meet the target.",
                fmt_rate(p.shed_rate),
                fmt_rate(p.shortfall_rate)
            )?;
        } else {
            writeln!(
                out,
                "Nothing is sheddable, and arrivals are {} above the refuse rate.",
                fmt_rate(p.shortfall_rate)
            )?;
        }
        writeln!(
            out,
            "This needs more capacity, or refusing more important traffic."
        )?;
    }
    Ok(())
}

fn write_case(
    out: &mut impl Write,
    label: &str,
    served: f64,
    utilisation: f64,
    latency: Option<&erlang::Latency>,
) -> std::io::Result<()> {
    write!(
        out,
        "{label:<18}{:>14}{:>13}",
        fmt_rate(served),
        fmt_pct(utilisation)
    )?;
    match latency {
        Some(l) => writeln!(
            out,
            "{:>12}{:>12}{:>15}",
            fmt_secs(l.mean_wait_secs),
            fmt_secs(l.p99_wait_secs),
            fmt_secs(l.mean_response_secs)
        ),
        None => writeln!(out, "   unbounded — the queue never drains"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_accept_the_documented_forms() {
        assert_eq!(parse_service_time("40ms"), Ok(0.04));
        assert_eq!(parse_service_time("0.04s"), Ok(0.04));
        assert!(parse_service_time("40")
            .unwrap_err()
            .contains("40ms or 40s"));
        assert_eq!(parse_service_time("400us"), Ok(400e-6));
        assert_eq!(parse_service_time("400µs"), Ok(400e-6));
        for bad in ["0", "-5ms", "nan", "inf", "40xs", "", "ms"] {
            assert!(parse_service_time(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_target_wait("0"), Ok(0.0));
    }

    #[test]
    fn fractions_accept_decimals_and_percentages() {
        assert_eq!(parse_utilisation("90%"), Ok(0.9));
        assert_eq!(parse_utilisation("1.15"), Ok(1.15));
        assert!(parse_utilisation("-0.1").is_err());
        assert!(parse_share("1.5").is_err());
        assert_eq!(parse_percentile("99"), Ok(0.99));
        assert!(parse_percentile("100").is_err());
    }

    #[test]
    fn times_format_for_people() {
        assert_eq!(fmt_secs(0.36), "360 ms");
        assert_eq!(fmt_secs(0.004_116), "4.12 ms");
        assert_eq!(fmt_secs(0.0), "0 ms");
        assert_eq!(fmt_secs(1e-12), "<0.001 ms");
        assert_eq!(fmt_secs(39.6), "39.6 s");
    }
}
