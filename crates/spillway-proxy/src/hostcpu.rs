//! The CPU utilisation of the host, or of the container the proxy runs in, sampled in the
//! background, as a load signal.
//!
//! Why host and not only this process: a sidecar shares its host (or pod) with the service it
//! protects, and the service's CPU is what saturates; the proxy's own CPU (`process_cpu`) is a
//! small part of it. Why the cgroup in a container: there `/proc/stat` is the node's — other
//! tenants included, and against every core of the machine — while what runs out is the
//! container's own allowance; its cgroup counts the CPU time of everything in it, against its
//! quota (`spillway_core::signal::cgroup_cpu_usage`, `CpuLimits`). Why sampled: the
//! controller reads its signals on every admission, and a file read per request would cost
//! more than the decision; a reading every 250 ms is plenty for a signal that drives shedding
//! thresholds.

use std::sync::{Arc, Weak};
use std::time::Duration;

use std::time::Instant;

use spillway_core::signal::{cgroup_cpu_usage, CpuLimits, CpuSources, ManualSignal};

use crate::config::HostCpuSource;

/// How often `/proc/stat` is read.
pub const PERIOD: Duration = Duration::from_millis(250);

/// `(busy, total)` jiffies from the aggregate `cpu` line of `/proc/stat`: busy is everything
/// but `idle` and `iowait` (proc(5): user nice system idle iowait irq softirq steal …; guest
/// time is already included in user/nice).
pub fn parse_proc_stat(s: &str) -> Option<(u64, u64)> {
    let line = s.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    if v.len() < 4 {
        return None;
    }
    let total: u64 = v.iter().try_fold(0u64, |a, &x| a.checked_add(x))?;
    let idle = v[3].saturating_add(v.get(4).copied().unwrap_or(0));
    Some((total.saturating_sub(idle), total))
}

/// Utilisation between two readings (0 when no time passed).
pub fn utilisation(before: (u64, u64), after: (u64, u64)) -> f64 {
    let busy = after.0.saturating_sub(before.0) as f64;
    let total = after.1.saturating_sub(before.1) as f64;
    if total > 0.0 {
        (busy / total).clamp(0.0, 1.0)
    } else {
        0.0
    }
}

/// One way of reading CPU use: the node's `/proc/stat`, or a cgroup's usage over its CPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reader {
    /// `/proc/stat`'s aggregate line.
    ProcStat,
    /// The cgroup of the process these sources describe.
    Cgroup(CpuSources),
}

impl Reader {
    /// The reader `source` asks for on this machine, or why there is none: `auto` takes the
    /// cgroup when a CPU quota applies to the process and its usage is readable.
    pub fn choose(source: HostCpuSource, sources: CpuSources) -> Result<Reader, String> {
        let proc_stat = || {
            std::fs::read_to_string("/proc/stat")
                .ok()
                .and_then(|t| parse_proc_stat(&t))
                .map(|_| Reader::ProcStat)
        };
        let cgroup = || cgroup_cpu_usage(&sources).map(|_| Reader::Cgroup(sources.clone()));
        match source {
            HostCpuSource::ProcStat => proc_stat().ok_or_else(|| {
                "proc_stat needs a readable /proc/stat with a `cpu` line (Linux)".into()
            }),
            HostCpuSource::Cgroup => cgroup().ok_or_else(|| {
                "cgroup needs this process's cgroup CPU usage readable (cgroup v2 `cpu.stat`, or \
                 v1 `cpuacct.usage`, under /sys/fs/cgroup; Linux)"
                    .into()
            }),
            HostCpuSource::Auto => {
                let limited = CpuLimits::detect(&sources).cgroup_quota.is_some();
                limited
                    .then(cgroup)
                    .flatten()
                    .or_else(proc_stat)
                    .ok_or_else(|| {
                        "auto needs a readable /proc/stat with a `cpu` line, or a cgroup with CPU \
                     accounting (Linux)"
                            .into()
                    })
            }
        }
    }

    /// What it reads, for the start-up error when the first reading fails.
    pub fn describe(&self) -> &'static str {
        match self {
            Reader::ProcStat => "/proc/stat (the host)",
            Reader::Cgroup(_) => "the process's cgroup (the container)",
        }
    }
}

/// The reader's state between samples: utilisation over each interval.
#[derive(Debug)]
pub struct Sampler {
    reader: Reader,
    /// `/proc/stat`: (busy, total) jiffies; cgroup: (usage ns, 0).
    last: (u64, u64),
    at: Instant,
}

impl Sampler {
    /// Takes a first reading; `None` when the source cannot be read.
    pub fn new(reader: Reader) -> Option<Sampler> {
        let last = Self::read(&reader)?;
        Some(Sampler {
            reader,
            last,
            at: Instant::now(),
        })
    }

    fn read(reader: &Reader) -> Option<(u64, u64)> {
        match reader {
            Reader::ProcStat => std::fs::read_to_string("/proc/stat")
                .ok()
                .and_then(|t| parse_proc_stat(&t)),
            Reader::Cgroup(src) => {
                cgroup_cpu_usage(src).map(|d| (u64::try_from(d.as_nanos()).unwrap_or(u64::MAX), 0))
            }
        }
    }

    /// The utilisation since the last sample (`None` if the source could not be read now).
    pub fn sample(&mut self) -> Option<f64> {
        let now = Self::read(&self.reader)?;
        let at = Instant::now();
        let u = match &self.reader {
            Reader::ProcStat => utilisation(self.last, now),
            Reader::Cgroup(src) => {
                let wall = at.saturating_duration_since(self.at).as_nanos() as f64;
                // The CPUs the cgroup may use now (containers are resized while running).
                let cpus = CpuLimits::detect(src).effective;
                cgroup_utilisation(self.last.0, now.0, wall, cpus)
            }
        };
        self.last = now;
        self.at = at;
        Some(u)
    }
}

/// A cgroup's utilisation over `wall_ns`: the CPU time it used over the time its `cpus` gave.
/// Not clamped at 1: a cgroup bursting past its quota within a period reads above 1, as a
/// saturated one should.
pub fn cgroup_utilisation(before_ns: u64, after_ns: u64, wall_ns: f64, cpus: f64) -> f64 {
    let allowed = wall_ns * cpus;
    if allowed > 0.0 {
        after_ns.saturating_sub(before_ns) as f64 / allowed
    } else {
        0.0
    }
}

/// A `host_cpu` signal kept up to date by a background task from `reader`; `None` when it
/// cannot be read. Outside a tokio runtime (e.g. `--check`) the signal is returned but not
/// sampled. The task stops when the signal is dropped.
pub fn start(reader: Reader) -> Option<Arc<ManualSignal>> {
    let mut sampler = Sampler::new(reader)?;
    let signal = Arc::new(ManualSignal::new("host_cpu"));
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return Some(signal);
    };
    let weak: Weak<ManualSignal> = Arc::downgrade(&signal);
    handle.spawn(async move {
        loop {
            tokio::time::sleep(PERIOD).await;
            let Some(s) = weak.upgrade() else { return };
            if let Some(u) = sampler.sample() {
                s.set(u);
            }
        }
    });
    Some(signal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_aggregate_line() {
        let s = "cpu  100 5 50 800 40 3 2 0 0 0\ncpu0 50 2 25 400 20 1 1 0 0 0\nintr 1\n";
        assert_eq!(parse_proc_stat(s), Some((160, 1000)));
        assert_eq!(parse_proc_stat("cpu0 1 2 3 4\n"), None);
        assert_eq!(parse_proc_stat("cpu  x y z\n"), None);
        assert_eq!(utilisation((160, 1000), (460, 1400)), 0.75);
        assert_eq!(utilisation((160, 1000), (160, 1000)), 0.0);
    }

    #[test]
    fn cgroup_utilisation_is_cpu_time_over_the_cpus_allowed() {
        // 150 ms of CPU in 100 ms of a 2-CPU allowance: 0.75; 300 ms: 1.5 (over, not clamped).
        assert_eq!(cgroup_utilisation(0, 150_000_000, 100e6, 2.0), 0.75);
        assert_eq!(cgroup_utilisation(0, 300_000_000, 100e6, 2.0), 1.5);
        assert_eq!(cgroup_utilisation(5, 5, 100e6, 2.0), 0.0);
        assert_eq!(cgroup_utilisation(9, 5, 100e6, 2.0), 0.0);
        assert_eq!(cgroup_utilisation(0, 5, 0.0, 2.0), 0.0);
    }

    /// A cgroup tree and /proc/self stand-in: `quota` is cgroup v2 `cpu.max`.
    fn fake(tag: &str, quota: &str, usage_usec: u64) -> (std::path::PathBuf, CpuSources) {
        let root =
            std::env::temp_dir().join(format!("spillway-hostcpu-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let w = |rel: &str, text: &str| {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        w("proc/cgroup", "0::/ctr\n");
        w("proc/status", "Cpus_allowed_list:\t0-7\n");
        w("cgroup/ctr/cpu.max", quota);
        w("cgroup/ctr/cpu.stat", &format!("usage_usec {usage_usec}\n"));
        let src = CpuSources {
            proc_self: root.join("proc"),
            cgroup_root: root.join("cgroup"),
        };
        (root, src)
    }

    #[test]
    fn auto_reads_the_cgroup_when_a_quota_applies() {
        let (root, src) = fake("auto-quota", "200000 100000\n", 10);
        let r = Reader::choose(HostCpuSource::Auto, src.clone()).unwrap();
        assert_eq!(r, Reader::Cgroup(src.clone()));
        // Usage grows by 1 s of CPU: the sample is positive and says so against 2 CPUs.
        let mut s = Sampler::new(r).unwrap();
        std::fs::write(root.join("cgroup/ctr/cpu.stat"), "usage_usec 1000010\n").unwrap();
        let u = s.sample().unwrap();
        assert!(u > 0.0 && u.is_finite(), "{u}");
        // Unreadable now: no sample, no made-up value.
        std::fs::remove_file(root.join("cgroup/ctr/cpu.stat")).unwrap();
        assert_eq!(s.sample(), None);
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn auto_without_a_quota_reads_proc_stat_and_cgroup_is_explicit() {
        let (root, src) = fake("auto-noquota", "max 100000\n", 10);
        if std::fs::read_to_string("/proc/stat").is_ok() {
            let r = Reader::choose(HostCpuSource::Auto, src.clone()).unwrap();
            assert_eq!(r, Reader::ProcStat);
        }
        let r = Reader::choose(HostCpuSource::Cgroup, src.clone()).unwrap();
        assert_eq!(r, Reader::Cgroup(src));
        let missing = CpuSources {
            proc_self: root.join("nowhere"),
            cgroup_root: root.join("nowhere"),
        };
        let e = Reader::choose(HostCpuSource::Cgroup, missing).unwrap_err();
        assert!(e.contains("cpu.stat") && e.contains("cpuacct.usage"), "{e}");
        let _ = std::fs::remove_dir_all(root);
    }
}
