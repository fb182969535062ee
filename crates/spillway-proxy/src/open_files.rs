//! Whether the process may open as many files as its configuration needs.
//!
//! Why a check at start: past the open-file limit (`RLIMIT_NOFILE`) `accept` and `connect` fail
//! with EMFILE, which shows only as upstream-connect faults and clients left waiting in the
//! listen backlog — long after the cause. Each client connection needs its own descriptor and,
//! while its request is forwarded over HTTP/1.1, one upstream connection; so
//! `listen.max_connections` needs about twice as many descriptors, plus a few for listeners,
//! the admin API, health checks and the quota store. The `spillway` binary raises its soft
//! limit to the hard limit before it starts the proxy; what is left short is the
//! administrator's to raise, and this says so once, at start, naming the figures.

/// Descriptors needed beyond two per client connection: a listener per thread, the admin
/// API, the runtime's event descriptors, health-check probes, the quota store, log files.
const FIXED: u64 = 256;

/// Descriptors `max_connections` client connections may use at once.
pub(crate) fn needed(max_connections: usize) -> u64 {
    u64::try_from(max_connections)
        .unwrap_or(u64::MAX)
        .saturating_mul(2)
        .saturating_add(FIXED)
}

/// The soft open-file limit from `/proc/self/limits` (`None` where it cannot be read, or is
/// `unlimited`).
pub(crate) fn soft_limit() -> Option<u64> {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|s| parse_soft(&s))
}

/// The soft limit in `/proc/self/limits`' "Max open files" row.
fn parse_soft(limits: &str) -> Option<u64> {
    limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Warns once when the soft limit is below what `max_connections` needs.
pub(crate) fn check(max_connections: usize) {
    let need = needed(max_connections);
    if let Some(limit) = soft_limit().filter(|&l| l < need) {
        tracing::warn!(
            open_files = limit,
            needed = need,
            max_connections,
            "the open-file limit is below what listen.max_connections needs (a client and an \
             upstream connection each): past it, connections are refused (EMFILE) and requests \
             fail with upstream_connect faults. Raise the hard limit (ulimit -Hn; systemd \
             LimitNOFILE=; the spillway binary raises its soft limit to the hard one) or lower \
             listen.max_connections"
        );
    }
}

#[cfg(test)]
mod tests;
