//! Semantic checks serde cannot express, one function per section of the file, each returning
//! the first offending key's path and what is accepted (`load` adds the file and line).
//!
//! Why upper bounds on every size, count and duration: a value past what any deployment needs is
//! a typo or an attack on the operator (a config posted to `/reload`), and the proxy would act on
//! it — a retry buffer of 2^63 bytes buffered a 1.5 GB upload whole; a timeout near `u64::MAX`
//! milliseconds overflows the clock arithmetic it is added to. The bounds are stated in
//! CONFIG.md next to each key.

mod classify;
mod path;
mod routes;
#[cfg(test)]
mod tests;
mod upstream;

use std::fmt;

use super::types::{ListenConfig, ProxyConfig};

pub(crate) use path::origin_form;

/// A key path and what is wrong with its value.
pub(crate) type Invalid = (String, String);

/// Longest duration any `*_ms` key of the proxy's own sections accepts: 24 h.
pub(crate) const MAX_MS: u64 = 86_400_000;

fn bad(key: impl Into<String>, value: impl fmt::Display, expected: &str) -> Invalid {
    (key.into(), format!("{value}: expected {expected}"))
}

/// A duration in milliseconds: 0 is refused as before (`milliseconds >= 1`), and so is anything
/// past [`MAX_MS`].
fn duration(key: &str, v: u64) -> Result<(), Invalid> {
    if v == 0 {
        return Err(bad(key, v, "milliseconds >= 1"));
    }
    if v > MAX_MS {
        return Err(bad(key, v, "milliseconds in 1 ..= 86400000 (24 h)"));
    }
    Ok(())
}

/// A count or size of at most `max` (the lower bound is the caller's, with its own message).
fn at_most(key: &str, v: usize, max: usize, unit: &str) -> Result<(), Invalid> {
    if v > max {
        return Err(bad(key, v, &format!("{unit} at most {max}")));
    }
    Ok(())
}

/// Semantic checks serde cannot express. Returns the key path and the message.
pub(crate) fn validate(cfg: &ProxyConfig) -> Result<(), Invalid> {
    super::request::validate(cfg)?;
    listen(&cfg.listen)?;
    upstream::validate(&cfg.upstream)?;
    cfg.admission
        .validate()
        .map_err(|e| core_err("admission", &e))?;
    cfg.admin.validate().map_err(|e| core_err("admin", &e))?;
    cfg.shutdown
        .validate()
        .map_err(|e| core_err("shutdown", &e))?;
    if let Some(url) = &cfg.admission.quota.store {
        spillway_tower::lease::check_store_url(url)
            .map_err(|why| bad("admission.quota.store", format!("{url:?}"), &why))?;
    }
    cfg.log.validate().map_err(|e| core_err("log", &e))?;
    classify::validate(&cfg.classify)?;
    if cfg.signals.orca_max_age_ms == 0 {
        return Err(bad("signals.orca_max_age_ms", 0, "milliseconds >= 1"));
    }
    duration("signals.orca_max_age_ms", cfg.signals.orca_max_age_ms)?;
    let metrics = &cfg.signals.orca_metrics;
    if metrics.len() > MAX_ORCA_METRICS {
        return Err(bad(
            "signals.orca_metrics",
            format!("{} names", metrics.len()),
            &format!("at most {MAX_ORCA_METRICS}"),
        ));
    }
    for (i, m) in metrics.iter().enumerate() {
        m.parse::<spillway_tower::wire::OrcaMetric>()
            .map_err(|e| (format!("signals.orca_metrics[{i}]"), e.to_string()))?;
    }
    routes::validate(&cfg.routes)
}

/// Most names `signals.orca_metrics` takes: each is compared with every pair of a report.
const MAX_ORCA_METRICS: usize = 16;

/// Most client connections `listen.max_connections` accepts.
const MAX_CONNECTIONS: usize = 1_000_000;

fn listen(l: &ListenConfig) -> Result<(), Invalid> {
    if l.max_connections == 0 {
        return Err(bad("listen.max_connections", 0, "an integer >= 1"));
    }
    at_most(
        "listen.max_connections",
        l.max_connections,
        MAX_CONNECTIONS,
        "connections",
    )?;
    if l.header_read_timeout_ms == 0 {
        return Err(bad("listen.header_read_timeout_ms", 0, "milliseconds >= 1"));
    }
    if l.body_read_timeout_ms == 0 {
        return Err(bad("listen.body_read_timeout_ms", 0, "milliseconds >= 1"));
    }
    if l.send_timeout_ms == 0 {
        return Err(bad("listen.send_timeout_ms", 0, "milliseconds >= 1"));
    }
    if l.idle_timeout_ms == 0 {
        return Err(bad("listen.idle_timeout_ms", 0, "milliseconds >= 1"));
    }
    for (key, v) in [
        ("listen.header_read_timeout_ms", l.header_read_timeout_ms),
        ("listen.body_read_timeout_ms", l.body_read_timeout_ms),
        ("listen.send_timeout_ms", l.send_timeout_ms),
        ("listen.idle_timeout_ms", l.idle_timeout_ms),
    ] {
        duration(key, v)?;
    }
    // Above `idle_timeout_ms` it is that (pressure never lengthens the idle timeout), so a
    // short idle timeout needs no minimum of its own.
    duration("listen.idle_timeout_min_ms", l.idle_timeout_min_ms)?;
    if !(1..=100).contains(&l.idle_pressure_from_pct) {
        return Err(bad(
            "listen.idle_pressure_from_pct",
            l.idle_pressure_from_pct,
            "a percentage of listen.max_connections in 1 ..= 100",
        ));
    }
    if !(8192..=16 * 1024 * 1024).contains(&l.max_header_bytes) {
        return Err(bad(
            "listen.max_header_bytes",
            l.max_header_bytes,
            "8192 ..= 16777216 bytes (hyper's smallest read buffer is 8 KiB)",
        ));
    }
    if l.max_requests_in_progress == 0 {
        return Err(bad("listen.max_requests_in_progress", 0, "an integer >= 1"));
    }
    at_most(
        "listen.max_requests_in_progress",
        l.max_requests_in_progress,
        MAX_CONNECTIONS,
        "requests",
    )?;
    if !(1..=1024).contains(&l.threads) {
        return Err(bad("listen.threads", l.threads, "an integer in 1 ..= 1024"));
    }

    if l.tls.is_some() {
        // Reads the files, so a missing or bad certificate is refused at load, not at accept.
        crate::tls::acceptor(l.tls.as_ref()).map_err(|m| ("listen.tls".to_string(), m))?;
    }
    Ok(())
}

fn check_customer(key: &str, v: &str) -> Result<(), Invalid> {
    let ok =
        !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic() && b != b',');
    if ok {
        Ok(())
    } else {
        Err(bad(
            key,
            format!("{v:?}"),
            spillway_tower::wire::accepts::CUSTOMER,
        ))
    }
}

fn core_err(section: &str, e: &spillway_core::ConfigError) -> Invalid {
    bad(format!("{section}.{}", e.field), &e.value, e.expected)
}
