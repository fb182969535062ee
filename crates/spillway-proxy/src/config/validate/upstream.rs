//! `[upstream]` and its sub-tables.

use super::{at_most, bad, core_err, duration, origin_form, Invalid};
use crate::config::UpstreamConfig;

/// Most tasks in `upstream.addresses`.
const MAX_ADDRESSES: usize = 1024;
/// Most requests in flight to one task, and idle connections kept per task and thread.
const MAX_PER_TASK: usize = 100_000;
/// Largest request body buffered for retries (`upstream.retry_buffer_bytes`): 64 MiB.
pub(crate) const MAX_RETRY_BUFFER: usize = 64 << 20;
/// Largest budget for all buffered request bodies together
/// (`upstream.retry_buffer_total_bytes`): 16 GiB.
pub(crate) const MAX_RETRY_BUFFER_TOTAL: u64 = 16 << 30;
/// Most consecutive failures `upstream.ejection.consecutive_failures` counts to.
const MAX_CONSECUTIVE_FAILURES: u32 = 1_000_000;
/// Largest `upstream.health_check.per_requests`.
const MAX_PER_REQUESTS: f64 = 1e9;

pub(super) fn validate(u: &UpstreamConfig) -> Result<(), Invalid> {
    if u.response_body_timeout_ms == 0 {
        return Err(bad(
            "upstream.response_body_timeout_ms",
            0,
            "milliseconds >= 1",
        ));
    }
    duration(
        "upstream.response_body_timeout_ms",
        u.response_body_timeout_ms,
    )?;
    addresses(u)?;
    for (key, v) in [
        ("upstream.connect_timeout_ms", u.connect_timeout_ms),
        ("upstream.request_timeout_ms", u.request_timeout_ms),
        ("upstream.pool_wait_timeout_ms", u.pool_wait_timeout_ms),
        ("upstream.idle_timeout_ms", u.idle_timeout_ms),
        (
            "upstream.health_check.min_interval_ms",
            u.health_check.min_interval_ms,
        ),
        (
            "upstream.health_check.timeout_ms",
            u.health_check.timeout_ms,
        ),
    ] {
        duration(key, v)?;
    }
    if u.max_requests_per_task == 0 {
        return Err(bad("upstream.max_requests_per_task", 0, "an integer >= 1"));
    }
    at_most(
        "upstream.max_requests_per_task",
        u.max_requests_per_task,
        MAX_PER_TASK,
        "requests",
    )?;
    at_most(
        "upstream.max_idle_per_task",
        u.max_idle_per_task,
        MAX_PER_TASK,
        "connections",
    )?;
    buffers(u)?;
    u.throttle
        .validate()
        .map_err(|e| core_err("upstream.throttle", &e))?;
    u.retry
        .validate()
        .map_err(|e| core_err("upstream.retry", &e))?;
    ejection(u)?;
    health_check(u)?;
    // Reads the files, so a missing or bad certificate is refused at load, not at connect.
    crate::tls::check_upstream(u.tls.as_ref(), &u.addresses)
}

fn addresses(u: &UpstreamConfig) -> Result<(), Invalid> {
    if u.addresses.is_empty() {
        return Err(bad("upstream.addresses", "[]", "at least one host:port"));
    }
    if u.addresses.len() > MAX_ADDRESSES {
        return Err(bad(
            "upstream.addresses",
            format!("{} addresses", u.addresses.len()),
            &format!("at most {MAX_ADDRESSES} tasks"),
        ));
    }
    for (i, a) in u.addresses.iter().enumerate() {
        let Some(this) = crate::config::parse_authority(a) else {
            return Err(bad(
                format!("upstream.addresses[{i}]"),
                format!("{a:?}"),
                "host:port, e.g. 127.0.0.1:9000",
            ));
        };
        // The same task twice would be two tasks to the balancer — twice the share of the
        // traffic, two throttles and two ejection records for one process.
        if let Some(j) = u.addresses[..i]
            .iter()
            .position(|b| crate::config::parse_authority(b).is_some_and(|b| b == this))
        {
            return Err(bad(
                format!("upstream.addresses[{i}]"),
                format!("{a:?}"),
                &format!("an address not listed already (it is upstream.addresses[{j}])"),
            ));
        }
    }
    Ok(())
}

/// The retry buffer, per request and for all requests together.
fn buffers(u: &UpstreamConfig) -> Result<(), Invalid> {
    at_most(
        "upstream.retry_buffer_bytes",
        u.retry_buffer_bytes,
        MAX_RETRY_BUFFER,
        "bytes",
    )?;
    let total = u.retry_buffer_total_bytes as u64;
    if total > MAX_RETRY_BUFFER_TOTAL {
        return Err(bad(
            "upstream.retry_buffer_total_bytes",
            total,
            &format!("bytes at most {MAX_RETRY_BUFFER_TOTAL} (16 GiB)"),
        ));
    }
    if u.retry_buffer_total_bytes < u.retry_buffer_bytes {
        // No body could ever be buffered whole: the per-request size would be a lie.
        return Err(bad(
            "upstream.retry_buffer_total_bytes",
            total,
            &format!(
                "bytes at least upstream.retry_buffer_bytes ({})",
                u.retry_buffer_bytes
            ),
        ));
    }
    Ok(())
}

fn ejection(u: &UpstreamConfig) -> Result<(), Invalid> {
    let ej = &u.ejection;
    if !(ej.max_fraction.is_finite() && (0.0..=1.0).contains(&ej.max_fraction)) {
        return Err(bad(
            "upstream.ejection.max_fraction",
            ej.max_fraction,
            "a number in 0 ..= 1",
        ));
    }
    if ej.base_ms == 0 || ej.max_ms < ej.base_ms {
        return Err(bad(
            "upstream.ejection.max_ms",
            ej.max_ms,
            "milliseconds >= base_ms >= 1",
        ));
    }
    duration("upstream.ejection.base_ms", ej.base_ms)?;
    duration("upstream.ejection.max_ms", ej.max_ms)?;
    if ej.consecutive_failures > MAX_CONSECUTIVE_FAILURES {
        return Err(bad(
            "upstream.ejection.consecutive_failures",
            ej.consecutive_failures,
            &format!("failures at most {MAX_CONSECUTIVE_FAILURES} (0 disables ejection)"),
        ));
    }
    Ok(())
}

fn health_check(u: &UpstreamConfig) -> Result<(), Invalid> {
    let hc = &u.health_check;
    if !(hc.per_requests.is_finite() && hc.per_requests > 0.0) {
        return Err(bad(
            "upstream.health_check.per_requests",
            hc.per_requests,
            "a number > 0",
        ));
    }
    if hc.per_requests > MAX_PER_REQUESTS {
        return Err(bad(
            "upstream.health_check.per_requests",
            hc.per_requests,
            "a number > 0 and at most 1e9",
        ));
    }
    if hc.max_interval_ms < hc.min_interval_ms {
        return Err(bad(
            "upstream.health_check.max_interval_ms",
            hc.max_interval_ms,
            "milliseconds >= min_interval_ms",
        ));
    }
    duration("upstream.health_check.max_interval_ms", hc.max_interval_ms)?;
    if !hc.path.starts_with('/') {
        return Err(bad(
            "upstream.health_check.path",
            format!("{:?}", hc.path),
            "a path starting with /",
        ));
    }
    // Sent as the request target of every check: with a space or a line break in it, no check
    // was ever sent and nothing said so.
    origin_form("upstream.health_check.path", &hc.path, true)
}
