//! CPU time used by this process's cgroup: the numerator of a container's CPU utilisation.
//!
//! Why: inside a container `/proc/stat` is the node's, so a "host CPU" signal read from it says
//! how busy the *node* is — other tenants included — not how much of the container's own CPU
//! allowance is spent. The cgroup the process runs in counts the CPU time of every process in
//! the container (the proxy and, in a shared container, the service it protects), and its
//! quota (`cpu.max`, [`CpuLimits`](super::CpuLimits)) is the allowance; their ratio over an
//! interval is the container's utilisation.
//!
//! Where (kernel Documentation/admin-guide/cgroup-v2.rst and cgroup-v1/cpuacct.rst):
//! - cgroup v2: `usage_usec` in `cpu.stat` of the process's cgroup (the `0::/path` line of
//!   `/proc/self/cgroup`); with a private cgroup namespace, the path /proc reports is `/` and
//!   the cgroup is the mount root itself;
//! - cgroup v1: `cpuacct.usage` (nanoseconds) in the `cpuacct` hierarchy, mounted as `cpuacct`,
//!   `cpu,cpuacct` or `cpuacct,cpu`.
//!
//! The process's own cgroup is the first directory on the walk from its path up to the mount
//! root that has the file (a path that does not exist in this mount namespace is skipped).

use std::fs;
use std::time::Duration;

use super::cpu::{for_each_ancestor, parse_cgroup_path, CpuSources};

/// `usage_usec` from cgroup v2 `cpu.stat` (`usage_usec 123\nuser_usec …`).
pub fn parse_cpu_stat_usage(s: &str) -> Option<Duration> {
    s.lines()
        .find_map(|l| l.strip_prefix("usage_usec "))
        .and_then(|v| v.trim().parse().ok())
        .map(Duration::from_micros)
}

/// cgroup v1 `cpuacct.usage`: nanoseconds, one number.
pub fn parse_cpuacct_usage(s: &str) -> Option<Duration> {
    s.trim().parse().ok().map(Duration::from_nanos)
}

/// The CPU time this process's cgroup has used, cgroup v2 first, then v1; `None` when neither
/// is readable (not Linux, no cgroup mount, or no CPU accounting).
pub fn cgroup_cpu_usage(src: &CpuSources) -> Option<Duration> {
    let contents = fs::read_to_string(src.proc_self.join("cgroup")).ok()?;
    let first = |base: &std::path::Path, rel: &str, file: &str, parse: fn(&str) -> _| {
        let mut found: Option<Duration> = None;
        for_each_ancestor(base, rel, |dir| {
            if found.is_none() {
                found = fs::read_to_string(dir.join(file))
                    .ok()
                    .and_then(|s| parse(&s));
            }
        });
        found
    };
    if let Some(rel) = parse_cgroup_path(&contents, None) {
        if let Some(u) = first(&src.cgroup_root, rel, "cpu.stat", parse_cpu_stat_usage) {
            return Some(u);
        }
    }
    let rel = parse_cgroup_path(&contents, Some("cpuacct"))?;
    ["cpuacct", "cpu,cpuacct", "cpuacct,cpu"]
        .iter()
        .find_map(|m| {
            first(
                &src.cgroup_root.join(m),
                rel,
                "cpuacct.usage",
                parse_cpuacct_usage,
            )
        })
}
