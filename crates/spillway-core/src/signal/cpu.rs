//! Process CPU utilisation against the CPUs the process may really use.
//!
//! Dividing CPU time by the host's core count is the classic container mistake: a pod limited
//! to 2 CPUs on a 64-core host would read 3 % when it is saturated (and, with 10 ms CFS periods,
//! throttled). So the denominator is `min(affinity, cgroup quota)`:
//! - affinity: `Cpus_allowed_list` in `/proc/self/status` (proc(5)), e.g. `0-3,8` = 5 CPUs;
//! - cgroup v2: `cpu.max` = `"$QUOTA $PERIOD"` or `"max $PERIOD"` (kernel
//!   Documentation/admin-guide/cgroup-v2.rst), for the process's cgroup from the `0::/path` line of
//!   `/proc/self/cgroup` and every ancestor up to the mount root (a parent's quota limits its
//!   children too); cgroup v1: `cpu.cfs_quota_us` (`-1` = unlimited) / `cpu.cfs_period_us`.
//!
//! The numerator is `utime + stime` from `/proc/self/stat` (fields 14 and 15, proc(5)), in clock
//! ticks of `USER_HZ` = 100 per second: the value `sysconf(_SC_CLK_TCK)` returns, fixed for
//! userspace by the kernel ABI (include/asm-generic/param.h) whatever the kernel's internal HZ.
//! (`/proc/self/schedstat` is finer but per thread, so it would need a walk of every task.)
//!
//! Reading is sampled: at most once per `min_interval` (default 100 ms) one thread, the winner of
//! a compare-and-swap, re-reads the file and folds the CPU rate since the previous sample into an
//! exponential average with time constant τ (default 1 s); every other reading is two atomic
//! loads. Ticks are 10 ms, so one 100 ms sample on one CPU is quantised to ±10 %, but the
//! tick count itself is exact, so the errors of successive samples cancel and the smoothed value
//! is off by at most about one tick per τ (1 % of a CPU at 1 s).

use std::fs;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{AtomicF64, LoadSignal, SignalError};
use crate::clock::{nanos_since, saturating_nanos};
use crate::error::ConfigError;

/// Clock ticks per second of the times in `/proc/*/stat` (Linux `USER_HZ`, fixed at 100 for
/// userspace on every architecture: include/asm-generic/param.h; proc(5) "clock ticks").
pub const USER_HZ: u64 = 100;

/// Contents of a /proc or /sys file that were not understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected {expected}, got {input:?}")]
pub struct ParseError {
    /// What the format should have been.
    pub expected: &'static str,
    /// The input, truncated to 64 bytes.
    pub input: String,
}

impl ParseError {
    fn new(expected: &'static str, input: &str) -> Self {
        let mut end = input.len().min(64);
        while !input.is_char_boundary(end) {
            end -= 1;
        }
        ParseError {
            expected,
            input: input[..end].to_owned(),
        }
    }
}

/// Parses cgroup v2 `cpu.max`: `Ok(None)` for `max …` (unlimited), `Ok(Some(quota / period))`
/// CPUs otherwise, e.g. `"200000 100000"` → 2.0. A missing period means the kernel default
/// (100 000 µs).
pub fn parse_cpu_max(s: &str) -> Result<Option<f64>, ParseError> {
    const EXPECTED: &str = "\"max [PERIOD]\" or \"QUOTA [PERIOD]\" with positive integers";
    let mut it = s.split_whitespace();
    let quota = it.next().ok_or_else(|| ParseError::new(EXPECTED, s))?;
    let period = match it.next() {
        Some(p) => p
            .parse::<u64>()
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(|| ParseError::new(EXPECTED, s))?,
        None => 100_000,
    };
    if it.next().is_some() {
        return Err(ParseError::new(EXPECTED, s));
    }
    if quota == "max" {
        return Ok(None);
    }
    let quota = quota
        .parse::<u64>()
        .ok()
        .filter(|&q| q > 0)
        .ok_or_else(|| ParseError::new(EXPECTED, s))?;
    Ok(Some(quota as f64 / period as f64))
}

/// Parses cgroup v1 `cpu.cfs_quota_us` and `cpu.cfs_period_us`: `Ok(None)` for a negative quota
/// (`-1` = unlimited), otherwise `Some(quota / period)` CPUs.
pub fn parse_cfs_quota(quota: &str, period: &str) -> Result<Option<f64>, ParseError> {
    let q = quota
        .trim()
        .parse::<i64>()
        .ok()
        .filter(|&q| q != 0)
        .ok_or_else(|| ParseError::new("a non-zero integer quota (-1 = unlimited)", quota))?;
    if q < 0 {
        return Ok(None);
    }
    let p = period
        .trim()
        .parse::<u64>()
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| ParseError::new("a positive integer period", period))?;
    Ok(Some(q as f64 / p as f64))
}

/// Counts the CPUs in a kernel CPU list such as `Cpus_allowed_list`: `"0-3,8,10-11"` → 7.
/// Overlapping ranges are counted twice (the kernel never prints them).
pub fn parse_cpu_list(s: &str) -> Result<usize, ParseError> {
    const EXPECTED: &str = "a CPU list like \"0-3,8,10-11\"";
    let t = s.trim();
    if t.is_empty() {
        return Err(ParseError::new(EXPECTED, s));
    }
    let mut count: usize = 0;
    for part in t.split(',') {
        let num = |x: &str| x.trim().parse::<usize>().ok();
        let n = match part.split_once('-') {
            Some((a, b)) => match (num(a), num(b)) {
                (Some(a), Some(b)) if a <= b => (b - a).checked_add(1),
                _ => None,
            },
            None => num(part).map(|_| 1),
        };
        count = n
            .and_then(|n| count.checked_add(n))
            .ok_or_else(|| ParseError::new(EXPECTED, s))?;
    }
    Ok(count)
}

/// Total CPU time (`utime + stime`, fields 14 and 15) in clock ticks from a `/proc/*/stat` line.
///
/// The command name (field 2) is in parentheses and may itself contain spaces and parentheses,
/// so fields are counted from the *last* `)`.
pub fn parse_proc_stat_cpu(s: &str) -> Result<u64, ParseError> {
    const EXPECTED: &str = "a /proc/PID/stat line: \"PID (COMM) STATE … UTIME STIME …\"";
    let close = s.rfind(')').ok_or_else(|| ParseError::new(EXPECTED, s))?;
    // After ")": field 3 (state) is index 0, so utime (14) is index 11 and stime (15) index 12.
    let mut fields = s[close + 1..].split_whitespace().skip(11);
    let mut next = || fields.next().and_then(|f| f.parse::<u64>().ok());
    match (next(), next()) {
        (Some(u), Some(st)) => u
            .checked_add(st)
            .ok_or_else(|| ParseError::new(EXPECTED, s)),
        _ => Err(ParseError::new(EXPECTED, s)),
    }
}

/// The cgroup path of a process from `/proc/PID/cgroup` contents: with `controller = None` the
/// cgroup v2 line `0::/path`, otherwise the v1 line whose controller list contains `controller`
/// (e.g. `4:cpu,cpuacct:/path`).
pub fn parse_cgroup_path<'a>(contents: &'a str, controller: Option<&str>) -> Option<&'a str> {
    contents.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let matches = match controller {
            None => id == "0" && controllers.is_empty(),
            Some(c) => controllers.split(',').any(|x| x == c),
        };
        matches.then_some(path.trim_end())
    })
}

/// Where [`ProcessCpu`] reads from; the defaults are the real files, tests point elsewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuSources {
    /// The process's proc directory; default `/proc/self`.
    pub proc_self: PathBuf,
    /// The cgroup mount root; default `/sys/fs/cgroup`.
    pub cgroup_root: PathBuf,
}

impl Default for CpuSources {
    fn default() -> Self {
        CpuSources {
            proc_self: PathBuf::from("/proc/self"),
            cgroup_root: PathBuf::from("/sys/fs/cgroup"),
        }
    }
}

/// The CPUs a process may use, and where the number came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuLimits {
    /// CPUs in the affinity mask, if `/proc/self/status` was readable.
    pub affinity: Option<usize>,
    /// The tightest cgroup CPU quota (in CPUs) on the process's cgroup or its ancestors, if any.
    pub cgroup_quota: Option<f64>,
    /// `min(affinity, cgroup_quota)`, with `std::thread::available_parallelism` (1 if unknown)
    /// standing in for an unreadable affinity.
    pub effective: f64,
}

impl CpuLimits {
    /// Reads the limits; never fails: what cannot be read is treated as "no limit there".
    pub fn detect(src: &CpuSources) -> CpuLimits {
        let affinity = fs::read_to_string(src.proc_self.join("status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                    .and_then(|v| parse_cpu_list(v).ok())
            })
            .filter(|&n| n > 0);
        let cgroup_quota = cgroup_quota(src);
        let fallback = || std::thread::available_parallelism().map_or(1, |n| n.get());
        let cpus = affinity.unwrap_or_else(fallback) as f64;
        let effective = cgroup_quota.map_or(cpus, |q| q.min(cpus));
        CpuLimits {
            affinity,
            cgroup_quota,
            effective,
        }
    }
}

/// The CPUs this process may really use (cgroup quota and affinity aware); falls back to
/// `std::thread::available_parallelism` off Linux.
pub fn available_cpus() -> f64 {
    if cfg!(target_os = "linux") {
        CpuLimits::detect(&CpuSources::default()).effective
    } else {
        std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
    }
}

/// Calls `f` on `base/rel` and each of its ancestors down to `base` itself. `rel` comes from
/// /proc; only its normal components are used so it cannot escape `base`. Containers with a
/// private cgroup namespace mount their own cgroup at `base`, where the path /proc reports does
/// not exist: the walk then still reaches `base`.
pub(super) fn for_each_ancestor(base: &Path, rel: &str, mut f: impl FnMut(&Path)) {
    let mut dir = base.to_path_buf();
    let mut depth = 0;
    for c in Path::new(rel).components() {
        if let Component::Normal(n) = c {
            dir.push(n);
            depth += 1;
        }
    }
    loop {
        f(&dir);
        if depth == 0 || !dir.pop() {
            break;
        }
        depth -= 1;
    }
}

fn cgroup_quota(src: &CpuSources) -> Option<f64> {
    let contents = fs::read_to_string(src.proc_self.join("cgroup")).ok()?;
    let mut best: Option<f64> = None;
    let mut take = |q: Option<f64>| {
        if let Some(q) = q {
            best = Some(best.map_or(q, |b| b.min(q)));
        }
    };
    if let Some(rel) = parse_cgroup_path(&contents, None) {
        for_each_ancestor(&src.cgroup_root, rel, |dir| {
            if let Ok(s) = fs::read_to_string(dir.join("cpu.max")) {
                take(parse_cpu_max(&s).ok().flatten());
            }
        });
    }
    if let Some(rel) = parse_cgroup_path(&contents, Some("cpu")) {
        for mount in ["cpu", "cpu,cpuacct", "cpuacct,cpu"] {
            for_each_ancestor(&src.cgroup_root.join(mount), rel, |dir| {
                let q = fs::read_to_string(dir.join("cpu.cfs_quota_us"));
                let p = fs::read_to_string(dir.join("cpu.cfs_period_us"));
                if let (Ok(q), Ok(p)) = (q, p) {
                    take(parse_cfs_quota(&q, &p).ok().flatten());
                }
            });
        }
    }
    best
}

/// Settings of a [`ProcessCpu`].
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
pub struct ProcessCpuConfig {
    /// Re-read `/proc/self/stat` at most this often; default 100 ms (10 ticks of one CPU per
    /// sample; see the module docs). Accepted: 10 ms to 1 min.
    pub min_interval: Duration,
    /// Smoothing time constant τ; default 1 s. Accepted: 1 ms to 1 h.
    pub time_constant: Duration,
    /// Re-detect the cgroup quota and affinity this often, as containers can be resized while
    /// running; default 10 s. Accepted: 1 s to 1 day.
    pub limits_refresh: Duration,
}

impl Default for ProcessCpuConfig {
    fn default() -> Self {
        ProcessCpuConfig {
            min_interval: Duration::from_millis(100),
            time_constant: Duration::from_secs(1),
            limits_refresh: Duration::from_secs(10),
        }
    }
}

impl ProcessCpuConfig {
    /// Checks every setting; the error names the field and what it accepts.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let check = |field, d: Duration, min: Duration, max: Duration, expected| {
            if d < min || d > max {
                Err(ConfigError::new(field, format_args!("{d:?}"), expected))
            } else {
                Ok(())
            }
        };
        let ms = Duration::from_millis;
        let s = Duration::from_secs;
        check(
            "process_cpu.min_interval",
            self.min_interval,
            ms(10),
            s(60),
            "a duration from 10ms to 1min",
        )?;
        check(
            "process_cpu.time_constant",
            self.time_constant,
            ms(1),
            s(3600),
            "a duration from 1ms to 1h",
        )?;
        check(
            "process_cpu.limits_refresh",
            self.limits_refresh,
            s(1),
            s(86_400),
            "a duration from 1s to 1 day",
        )
    }
}

/// Process CPU utilisation over the CPUs it may use, sampled and exponentially smoothed.
#[derive(Debug)]
pub struct ProcessCpu {
    origin: Instant,
    sources: CpuSources,
    available: bool,
    min_interval: u64,
    limits_refresh: u64,
    tau_nanos: f64,
    /// Try-lock: the thread that sets it refreshes; everyone else reads the cached value.
    refreshing: AtomicBool,
    last_sample: AtomicU64,
    last_ticks: AtomicU64,
    last_limits: AtomicU64,
    smoothed: AtomicF64,
    effective: AtomicF64,
    affinity: AtomicU64,
    quota: AtomicF64,
    read_errors: AtomicU64,
}

impl ProcessCpu {
    /// Reads the real `/proc/self` and cgroup files with the default settings, starting now
    /// (CPU time is real time, so the origin is the real clock).
    ///
    /// Fails if the process CPU time cannot be read (not Linux, /proc not mounted); the caller
    /// should log the error and use [`ProcessCpu::idle`] or another signal. Unreadable cgroup
    /// or affinity files are not errors: they mean "no limit there".
    pub fn new() -> Result<Self, SignalError> {
        Self::with_config(ProcessCpuConfig::default(), Instant::now())
    }

    /// As [`new`](Self::new), with `cfg` and the time origin of later `utilisation(now)` calls.
    /// `origin` should be the current instant: the first sample measures CPU time from the
    /// reading taken here, as if it had been taken at `origin`.
    pub fn with_config(cfg: ProcessCpuConfig, origin: Instant) -> Result<Self, SignalError> {
        if !cfg!(target_os = "linux") {
            return Err(SignalError::Unsupported {
                signal: "process_cpu",
            });
        }
        Self::with_sources(cfg, origin, CpuSources::default())
    }

    /// As [`with_config`](Self::with_config), reading from `sources` (on any OS).
    pub fn with_sources(
        cfg: ProcessCpuConfig,
        origin: Instant,
        sources: CpuSources,
    ) -> Result<Self, SignalError> {
        cfg.validate().map_err(SignalError::Config)?;
        let ticks = read_ticks(&sources.proc_self.join("stat"))?;
        let cpu = Self::build(&cfg, origin, sources, true);
        cpu.last_ticks.store(ticks, Ordering::Relaxed);
        Ok(cpu)
    }

    /// A signal that always reads 0, for where [`new`](Self::new) fails: the service keeps
    /// running without CPU-based shedding (its other signals and the concurrency limit still
    /// protect it). [`effective_cpus`](Self::effective_cpus) still reports
    /// `available_parallelism`.
    pub fn idle(origin: Instant) -> Self {
        let mut cpu = Self::build(
            &ProcessCpuConfig::default(),
            origin,
            CpuSources::default(),
            false,
        );
        cpu.available = false;
        let n = std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64);
        cpu.effective.store(n);
        cpu.quota.store(f64::INFINITY);
        cpu.affinity.store(0, Ordering::Relaxed);
        cpu
    }

    fn build(cfg: &ProcessCpuConfig, origin: Instant, sources: CpuSources, detect: bool) -> Self {
        let cpu = ProcessCpu {
            origin,
            available: true,
            min_interval: saturating_nanos(cfg.min_interval),
            limits_refresh: saturating_nanos(cfg.limits_refresh),
            tau_nanos: saturating_nanos(cfg.time_constant) as f64,
            refreshing: AtomicBool::new(false),
            last_sample: AtomicU64::new(0),
            last_ticks: AtomicU64::new(0),
            last_limits: AtomicU64::new(0),
            smoothed: AtomicF64::new(0.0),
            effective: AtomicF64::new(1.0),
            affinity: AtomicU64::new(0),
            quota: AtomicF64::new(f64::INFINITY),
            read_errors: AtomicU64::new(0),
            sources,
        };
        if detect {
            cpu.store_limits(CpuLimits::detect(&cpu.sources));
        }
        cpu
    }

    fn store_limits(&self, l: CpuLimits) {
        self.effective.store(l.effective.max(f64::MIN_POSITIVE));
        self.affinity
            .store(l.affinity.map_or(0, |a| a as u64), Ordering::Relaxed);
        self.quota.store(l.cgroup_quota.unwrap_or(f64::INFINITY));
    }

    /// Whether CPU time is being read (false for [`idle`](Self::idle)).
    pub fn is_available(&self) -> bool {
        self.available
    }

    /// The CPUs utilisation is measured against: `min(affinity, cgroup quota)`.
    pub fn effective_cpus(&self) -> f64 {
        self.effective.load()
    }

    /// The limits as last detected.
    pub fn limits(&self) -> CpuLimits {
        let a = self.affinity.load(Ordering::Relaxed);
        let q = self.quota.load();
        CpuLimits {
            affinity: (a > 0).then(|| usize::try_from(a).unwrap_or(usize::MAX)),
            cgroup_quota: q.is_finite().then_some(q),
            effective: self.effective.load(),
        }
    }

    /// How many samples failed to read `/proc/self/stat` since construction (the reading then
    /// keeps its last value).
    pub fn read_errors(&self) -> u64 {
        self.read_errors.load(Ordering::Relaxed)
    }

    fn refresh(&self, t: u64, last: u64) {
        if t.saturating_sub(self.last_limits.load(Ordering::Relaxed)) >= self.limits_refresh {
            self.store_limits(CpuLimits::detect(&self.sources));
            self.last_limits.store(t, Ordering::Relaxed);
        }
        let ticks = match read_ticks(&self.sources.proc_self.join("stat")) {
            Ok(t) => t,
            Err(_) => {
                self.read_errors.fetch_add(1, Ordering::Relaxed);
                self.last_sample.store(t, Ordering::Release);
                return;
            }
        };
        let dticks = ticks.saturating_sub(self.last_ticks.load(Ordering::Relaxed));
        let dt = (t - last) as f64;
        // ticks / USER_HZ = seconds of CPU; dt / 1e9 = seconds of wall time.
        let rate = (dticks as f64 / USER_HZ as f64) / (dt / 1e9) / self.effective.load();
        let alpha = 1.0 - (-dt / self.tau_nanos).exp();
        let s = self.smoothed.load();
        self.smoothed.store(super::sanitize(s + (rate - s) * alpha));
        self.last_ticks.store(ticks, Ordering::Relaxed);
        self.last_sample.store(t, Ordering::Release);
    }
}

/// Releases the refresh try-lock even if the refresh unwinds.
struct Unlock<'a>(&'a AtomicBool);

impl Drop for Unlock<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl LoadSignal for ProcessCpu {
    fn name(&self) -> &str {
        "process_cpu"
    }

    fn utilisation(&self, now: Instant) -> f64 {
        let t = nanos_since(self.origin, now);
        let due = |last: u64| t > last && t - last >= self.min_interval;
        if !self.available || !due(self.last_sample.load(Ordering::Acquire)) {
            return self.smoothed.load();
        }
        if self
            .refreshing
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return self.smoothed.load();
        }
        let _unlock = Unlock(&self.refreshing);
        // Re-check: another thread may have refreshed between our load and the lock.
        let last = self.last_sample.load(Ordering::Acquire);
        if due(last) {
            self.refresh(t, last);
        }
        self.smoothed.load()
    }
}

/// Reads CPU ticks from a stat file into a stack buffer (no allocation on the refresh path).
fn read_ticks(path: &Path) -> Result<u64, SignalError> {
    let read_err = |source| SignalError::Read {
        path: path.display().to_string(),
        source,
    };
    let mut f = fs::File::open(path).map_err(read_err)?;
    // A stat line is ~52 numbers of at most 20 digits plus a 16-byte comm: < 1.2 KB.
    let mut buf = [0u8; 4096];
    let mut len = 0;
    while len < buf.len() {
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(read_err(e)),
        }
    }
    let text = String::from_utf8_lossy(&buf[..len]);
    parse_proc_stat_cpu(&text).map_err(|source| SignalError::Parse {
        path: path.display().to_string(),
        source,
    })
}
