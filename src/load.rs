//! `spillway load`: offer an open-loop load to a loopback target (or, with `--allow-remote` and
//! a `--max-rate` cap, any target), over HTTP or HTTPS, and report goodput, rejections,
//! timeouts and latency per second, per criticality and per customer.
//!
//! Why a thin layer: the generator, the client behaviours and the report live in
//! `spillway_load` so that `spillway demo` and tests run exactly the same code in-process; this
//! module only turns flags into a [`LoadConfig`] and prints the result.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use spillway_load::load::{self, Arrivals, Behaviour, LoadConfig, Mix, RateShape, TrafficClass};
use spillway_load::report::{self, RunReport};
use spillway_load::units::{is_loopback_addr, parse_duration, parse_target, Target};

use crate::UsageError;

/// Arrival process.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum ArrivalsArg {
    /// Exponential gaps (independent users).
    Poisson,
    /// Evenly spaced.
    Uniform,
}

/// Client behaviour.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum BehaviourArg {
    /// Per-attempt timeout and immediate retries on any failure, up to --attempts.
    Naive,
    /// Retries only through the retry gates (attempt limit, don't-retry, 10% budget).
    Budgeted,
    /// Adaptive client-side throttling (one throttle per criticality) plus budgeted retries.
    Throttled,
}

/// `spillway load` arguments.
#[derive(Debug, Args)]
pub struct LoadArgs {
    /// Target HOST:PORT, http://HOST or https://HOST, each URL with an optional :PORT (HTTPS
    /// needs a build with the `tls` feature). The name is resolved once; every connection goes to that address,
    /// and the name is the Host header and the certificate's expected name. Loopback only,
    /// unless --allow-remote.
    #[arg(long, value_name = "ADDR", value_parser = parse_target)]
    target: Target,
    /// A PEM bundle of the CAs an https:// target's certificate may chain to [default: the
    /// platform's trust store]. Certificates are always verified.
    #[arg(long, value_name = "FILE")]
    ca_file: Option<PathBuf>,
    /// Allow a non-loopback --target (another machine: a staging service, a real backend).
    /// Requires --max-rate; the run prints its cap before it starts.
    #[arg(long, requires = "max_rate")]
    allow_remote: bool,
    /// The most attempts/s the run may send (mean): peak --rate × --attempts must not exceed
    /// it. Required with --allow-remote; not allowed with --connections (a closed loop cannot
    /// be capped).
    #[arg(long, value_name = "RPS", conflicts_with = "connections")]
    max_rate: Option<f64>,
    /// Offered load: RATE, ramp:FROM..TO, step:BEFORE..AFTER@TIME, spike:BASE..PEAK@TIME+LEN,
    /// or stages:R/DUR,FROM..TO/DUR,... (requests/s).
    #[arg(long, value_name = "SHAPE", default_value = "100", value_parser = RateShape::parse)]
    rate: RateShape,
    /// Arrival process.
    #[arg(long, value_enum, default_value = "poisson")]
    arrivals: ArrivalsArg,
    /// Closed loop instead: N clients, each sending its next request as soon as its last one
    /// ended (as a connection pool or `wrk -c N` does); --rate and --arrivals are not used.
    #[arg(long, value_name = "N", conflicts_with_all = ["rate", "arrivals"], value_parser = clap::value_parser!(u32).range(1..=10_000))]
    connections: Option<u32>,
    /// Length of the run [default: 10s, or the total of --rate stages]; at most 1h.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true)]
    duration: Option<Duration>,
    /// A traffic class, repeatable: criticality=..,customer=..,route=/..,cost=..,weight=..
    /// [default: one CRITICAL class, customer "default", route /].
    #[arg(long = "class", value_name = "SPEC", value_parser = TrafficClass::parse)]
    classes: Vec<TrafficClass>,
    /// How clients react to failures.
    #[arg(long, value_enum, default_value = "naive")]
    behaviour: BehaviourArg,
    /// A request's deadline from its intended send time; later answers are not goodput.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration, allow_hyphen_values = true)]
    timeout: Duration,
    /// Per-attempt timeout [default: --timeout / --attempts].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true)]
    attempt_timeout: Option<Duration>,
    /// Attempts per request, the first included (1 = no retries).
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    attempts: u32,
    /// Retry budget: retries per request over a 10 s window (budgeted/throttled).
    #[arg(
        long,
        value_name = "RATIO",
        default_value_t = 0.1,
        allow_negative_numbers = true
    )]
    retry_budget: f64,
    /// Adaptive throttle K: send up to K × what the backend accepts (throttled).
    #[arg(
        long,
        value_name = "K",
        default_value_t = 2.0,
        allow_negative_numbers = true
    )]
    throttle_k: f64,
    /// Use HTTP/2 with prior knowledge instead of HTTP/1.1.
    #[arg(long)]
    http2: bool,
    /// Seed of the arrivals and the mix.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Label of the run in reports [default: the behaviour].
    #[arg(long)]
    title: Option<String>,
    /// Write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write a self-contained HTML report (SVG charts) to this file.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// No progress bar (it is also hidden when stdout is not a terminal).
    #[arg(long)]
    quiet: bool,
}

/// Runs `spillway load`.
pub fn run(args: &LoadArgs) -> Result<()> {
    let behaviour = match args.behaviour {
        BehaviourArg::Naive => Behaviour::Naive,
        BehaviourArg::Budgeted => Behaviour::Budgeted,
        BehaviourArg::Throttled => Behaviour::Throttled,
    };
    let mut cfg = LoadConfig::new(args.target.addr);
    cfg.authority = Some(args.target.authority.clone());
    cfg.https = args.target.https;
    cfg.ca_file = args.ca_file.clone();
    cfg.title = args
        .title
        .clone()
        .unwrap_or_else(|| behaviour.as_str().to_owned());
    cfg.duration = args
        .duration
        .or_else(|| args.rate.natural_duration())
        .unwrap_or(Duration::from_secs(10));
    cfg.shape = args.rate.clone();
    cfg.arrivals = match args.arrivals {
        ArrivalsArg::Poisson => Arrivals::Poisson,
        ArrivalsArg::Uniform => Arrivals::Uniform,
    };
    cfg.mix = Mix::new(args.classes.clone());
    cfg.behaviour = behaviour;
    cfg.timeout = args.timeout;
    cfg.attempt_timeout = args.attempt_timeout;
    cfg.retry.max_attempts = args.attempts;
    cfg.retry.budget_ratio = args.retry_budget;
    cfg.throttle.k = args.throttle_k;
    cfg.http2 = args.http2;
    cfg.seed = args.seed;
    cfg.connections = args.connections;
    cfg.allow_remote = args.allow_remote;
    cfg.max_rate = args.max_rate;
    // Every setting error names its flag: exit 2 like clap's own.
    cfg.validate().map_err(|e| UsageError(e.to_string()))?;
    if let Some(line) = cap_line(&cfg) {
        eprintln!("{line}");
    }
    let report = match load::run_blocking(cfg, !args.quiet) {
        Err(e @ load::LoadError::Tls(_)) => return Err(UsageError(e.to_string()).into()),
        other => other?,
    };
    emit(&summary(&report))?;
    if let Some(path) = &args.json {
        report::write_json(std::slice::from_ref(&report), path)
            .with_context(|| "writing --json")?;
        emit(&format!("JSON report: {}\n", path.display()))?;
    }
    if let Some(path) = &args.html {
        report::write_html(std::slice::from_ref(&report), path)
            .with_context(|| "writing --html")?;
        emit(&format!("HTML report: {}\n", path.display()))?;
    }
    Ok(())
}

/// What a capped run (--max-rate) will send at most, said before it starts, so that whoever
/// runs it against another machine sees the bound they agreed to.
fn cap_line(cfg: &LoadConfig) -> Option<String> {
    let cap = cfg.max_rate?;
    let bound = cfg.wire_rate_bound()?;
    let remote = if is_loopback_addr(cfg.target) {
        ""
    } else {
        " (remote)"
    };
    Some(format!(
        "sending at most {bound} req/s to {}{remote} for {:?} (peak --rate {} × up to {} \
         attempts; --max-rate {cap})",
        target_text(cfg),
        cfg.duration,
        cfg.shape.peak(),
        cfg.retry.max_attempts
    ))
}

/// The target as the cap line names it: `127.0.0.1:8080` for a cleartext address, the URL and
/// the address it connects to otherwise.
fn target_text(cfg: &LoadConfig) -> String {
    let plain = cfg.authority.as_deref() == Some(cfg.target.to_string().as_str());
    match (&cfg.authority, cfg.https) {
        (None, false) => cfg.target.to_string(),
        (Some(_), false) if plain => cfg.target.to_string(),
        _ => format!("{} ({})", cfg.target_url(), cfg.target),
    }
}

fn ratio(c: &report::Counts) -> String {
    c.success_ratio()
        .map_or_else(|| "-".into(), |r| format!("{:.2}%", r * 100.0))
}

/// The run's totals, breakdowns and latency, as printed.
pub(crate) fn summary(r: &RunReport) -> String {
    let mut out = String::new();
    let s = &r.summary;
    let c = &s.counts;
    let _ = writeln!(
        out,
        "{}: {:.0} s, offered {} ({:.1}/s), sent {} ({:.2} attempts/request)",
        r.title, s.duration_s, c.offered, s.offered_rps, c.sent, s.amplification
    );
    let _ = writeln!(
        out,
        "  goodput {} ({:.1}/s, {}), rejected {}, timed out {}, throttled {}, errors {}",
        c.goodput,
        s.goodput_rps,
        ratio(c),
        c.rejected,
        c.timed_out,
        c.throttled,
        c.errors
    );
    for (name, c) in &s.by_criticality {
        let _ = writeln!(out, "  {name:<16} success {:>8} of {}", ratio(c), c.offered);
    }
    if s.by_customer.len() > 1 {
        for (name, c) in &s.by_customer {
            let _ = writeln!(
                out,
                "  customer {name:<10} success {:>8} of {}",
                ratio(c),
                c.offered
            );
        }
    }
    if let (true, Some(e)) = (c.errors > 0, r.meta.get("first_error")) {
        let _ = writeln!(out, "  first error: {}", e.as_str().unwrap_or("?"));
    }
    match &r.latency {
        Some(l) => {
            let t = &l.total;
            let _ = writeln!(
        out,
                "  latency of successes (from intended send time): p50 {:.1} ms, p90 {:.1}, p99 {:.1}, p99.9 {:.1}, max {:.1}",
                t.p50_ms, t.p90_ms, t.p99_ms, t.p999_ms, t.max_ms
            );
            if let (Some(q), Some(p)) = (l.queue, l.processing) {
                let _ = writeln!(
        out,
                    "  server-reported: queue p50 {:.1} ms / p99 {:.1}; service p50 {:.1} ms / p99 {:.1}",
                    q.p50_ms, q.p99_ms, p.p50_ms, p.p99_ms
                );
            }
        }
        None => {
            let _ = writeln!(out, "  no successful requests");
        }
    }
    if let Some(lag) = r.meta.get("send_lag") {
        let p99 = lag["p99_ms"].as_f64().unwrap_or(0.0);
        let _ = writeln!(
            out,
            "  generator send lag: p50 {:.1} ms, p99 {p99:.1} ms, max {:.1} ms",
            lag["p50_ms"].as_f64().unwrap_or(0.0),
            lag["max_ms"].as_f64().unwrap_or(0.0)
        );
        // A tenth of the timeout: beyond it the machine, not the target, shapes the results.
        let timeout_ms = r
            .meta
            .get("timeout_ms")
            .and_then(|t| t.as_f64())
            .unwrap_or(1000.0);
        if p99 > timeout_ms / 10.0 {
            let _ = writeln!(
                out,
                "  warning: the generator fell behind its schedule (send lag p99 {p99:.0} ms vs a \
                 {timeout_ms:.0} ms timeout): this machine is too busy for this rate. Latency \
                 still counts from the intended send times, but some requests were offered late."
            );
        }
    }
    out
}

/// Writes `text` to stdout, returning the I/O error (a closed pipe is reported by `main` as
/// success) instead of panicking as `println!` does.
pub(crate) fn emit(text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}
