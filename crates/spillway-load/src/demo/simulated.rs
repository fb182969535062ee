//! `spillway demo`'s scenario in the simulator, built from the demo's own configuration, and the
//! goodput plateau both are judged by.
//!
//! Why: the simulator is only worth trusting at fleet scale if it agrees with the real thing
//! where both can run. The demo is that place: one backend, the proxy in its zero-config form,
//! retrying clients, 2× to 10× overload. So the scenario here is derived from
//! [`DemoConfig`] — its capacity, streams, mixes, timeouts and attempts — rather than copied
//! into a file, and the proxy's admission and upstream timeout are its zero-config preset's
//! (`spillway_core::preset::proxy_default()`), taken whole; when either changes, the simulated
//! side follows.
//!
//! How the pieces map:
//! - the proxy is a protected layer with the proxy's admission controller, negligible local
//!   work, no retries of its own (the backend never refuses) and the proxy's upstream timeout;
//! - the demo backend is an unprotected layer behind it: its workers and service-time
//!   distribution, an unbounded FIFO, and work for callers who left still done — the proxy
//!   releases its permit when the client gives up, the backend is not told;
//! - each traffic class of each stream is a client group sending its weighted share of the
//!   stream's rate, with the load generator's naive retries: `attempts` tries, no backoff, each
//!   try limited to `timeout / attempts`, and the whole request to `timeout` from its intended
//!   send time.
//!
//! Not modelled: network and proxy CPU time, the backend's ORCA utilisation reports (the
//! proxy's shed threshold is 1.0 on them, which busy time does not exceed), HTTP connection
//! limits. The throttling-clients mode is not offered: the simulator's client throttle keeps
//! the core's 120 s window, the demo compresses it to 10 s.

use std::fmt::Write as _;

use super::{DemoConfig, Mode};
use crate::backend::ServiceTime;
use crate::load::RateShape;
use crate::report::RunReport;

use spillway_sim::config::{ConfigError, Scenario};

/// The demo's protected (`Mode::Spillway`) or unprotected run as a simulator scenario.
pub fn scenario(cfg: &DemoConfig, mode: Mode) -> Result<Scenario, String> {
    let protected = match mode {
        Mode::Unprotected => false,
        Mode::Spillway => true,
        Mode::SpillwayThrottled => {
            return Err(format!(
                "demo mode {}: not simulated (the simulator's client throttle keeps a 120 s \
                 window; the demo's is 10 s); accepted: unprotected, spillway",
                mode.title()
            ))
        }
    };
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let mut toml = String::new();
    let _ = writeln!(
        toml,
        "name = \"demo-{}\"\ndescription = \"spillway demo's scenario ({}), from DemoConfig\"\n\
         seed = {}\nduration_s = {}\nprotected = {protected}\n",
        mode.title(),
        mode.title(),
        cfg.seed,
        cfg.total().as_secs_f64(),
    );
    let attempts = cfg.attempts.max(1);
    for stream in cfg.streams() {
        let classes = stream.mix.classes();
        let total: f64 = classes.iter().map(|c| c.weight).sum();
        for (i, class) in classes.iter().enumerate() {
            let share = if total > 0.0 {
                class.weight / total
            } else {
                0.0
            };
            let _ = writeln!(
                toml,
                "[[client]]\nname = \"{}-{}-{i}\"\ncustomer = \"{}\"\ncriticality = \"{}\"\n\
                 timeout_ms = {}\ndeadline_ms = {}\nretry = \"naive\"\nmax_attempts = {attempts}\n\
                 backoff_ms = 0\nload = {}\n",
                stream.customer,
                class.criticality.as_str(),
                class.customer,
                class.criticality.as_str(),
                ms(cfg.timeout) / f64::from(attempts),
                ms(cfg.timeout),
                stages(&stream.shape, share)?,
            );
        }
    }
    if protected {
        let preset = spillway_core::preset::proxy_default();
        let _ = writeln!(
            toml,
            "[[layer]]\nname = \"proxy\"\nworkers = 100000\n\
             service = {{ dist = \"const\", mean_ms = 0.001 }}\nretry = \"none\"\n\
             timeout_ms = {}\nproxy_admission = true\n",
            preset.request_timeout.as_millis(),
        );
    }
    let mean = ms(cfg.service);
    let service = match cfg.distribution {
        ServiceTime::Constant => format!("{{ dist = \"const\", mean_ms = {mean} }}"),
        ServiceTime::Exponential => format!("{{ dist = \"exp\", mean_ms = {mean} }}"),
        ServiceTime::Uniform { spread } => format!(
            "{{ dist = \"uniform\", mean_ms = {mean}, spread_ms = {} }}",
            mean * spread.clamp(0.0, 1.0)
        ),
        ServiceTime::LogNormal { sigma } => {
            format!("{{ dist = \"lognormal\", mean_ms = {mean}, sigma = {sigma} }}")
        }
        // The scenario language's service times have no bimodal shape (the sweep's cells
        // model it on their own): say so rather than simulate another demo.
        ServiceTime::Bimodal { .. } => {
            return Err(
                "the simulated demo has no bimodal service time; use constant, \
                        exponential, uniform or lognormal"
                    .into(),
            )
        }
    };
    let _ = writeln!(
        toml,
        "[[layer]]\nname = \"backend\"\nworkers = {}\nservice = {service}\nprotected = false",
        cfg.workers,
    );
    Scenario::from_toml(&toml, "demo scenario").map_err(|e: ConfigError| e.to_string())
}

/// A [`RateShape`] of the demo, times `share`, as the simulator's `stages` load.
fn stages(shape: &RateShape, share: f64) -> Result<String, String> {
    let RateShape::Stages(list) = shape else {
        return match shape {
            RateShape::Constant(r) => {
                Ok(format!("{{ shape = \"constant\", rps = {} }}", r * share))
            }
            other => Err(format!(
                "demo rate shape {other:?}: not simulated; accepted: stages, constant"
            )),
        };
    };
    let mut out = Vec::new();
    let mut previous = 0.0;
    for s in list {
        let (from, to, secs) = (s.from * share, s.to * share, s.duration.as_secs_f64());
        if secs <= 0.0 {
            continue;
        }
        // A rise that does not start where the previous stage ended first jumps to its start.
        if from != to && (from - previous).abs() > 1e-9 {
            out.push(format!("{{ rps = {from}, for_s = 0.000001 }}"));
        }
        out.push(format!(
            "{{ rps = {to}, for_s = {secs}, ramp = {} }}",
            from != to
        ));
        previous = to;
    }
    Ok(format!(
        "{{ shape = \"stages\", stages = [{}] }}",
        out.join(", ")
    ))
}

/// The whole seconds of a run the plateau is measured over: every held level of at least 2×
/// capacity (without its settling second, as the demo's table measures) and the sudden jump.
pub fn plateau_seconds(cfg: &DemoConfig) -> Vec<u64> {
    let mut secs: Vec<u64> = cfg
        .levels
        .iter()
        .filter(|l| **l >= 2.0)
        .filter_map(|l| cfg.level_window(*l))
        .flatten()
        .chain(cfg.jump_window())
        .collect();
    secs.sort_unstable();
    secs.dedup();
    secs
}

/// Mean goodput per second over [`plateau_seconds`], as a fraction of the demo's capacity
/// (`None` if the report has none of those seconds).
pub fn plateau(cfg: &DemoConfig, report: &RunReport) -> Option<f64> {
    let wanted = plateau_seconds(cfg);
    let goodput: Vec<f64> = report
        .seconds
        .iter()
        .filter(|s| wanted.contains(&s.t))
        .map(|s| s.counts.goodput as f64)
        .collect();
    if goodput.is_empty() || cfg.capacity() <= 0.0 {
        return None;
    }
    Some(goodput.iter().sum::<f64>() / goodput.len() as f64 / cfg.capacity())
}
