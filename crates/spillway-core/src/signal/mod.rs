//! Load signals: "how full is this task right now?", as one number.
//!
//! The SRE book (ch. 21, "Utilization signals") has backends shed on a utilisation signal: CPU by
//! default, or an *executor load average* (an exponentially decayed count of active threads
//! against the available CPUs), which also sees a task saturated while its threads are blocked
//! on I/O; services with other bottlenecks define their own. So a signal here is a trait with one
//! reading — a fraction where 1.0 means fully used (it may exceed 1) — and the built-ins are:
//!
//! | signal | reads |
//! | --- | --- |
//! | [`ProcessCpu`] | process CPU time over the CPUs the process may really use (cgroup quota, affinity) |
//! | [`ExecutorLoadAverage`] | exponentially decayed active requests over available CPUs |
//! | [`InFlightSignal`] | in-flight requests over a limit |
//! | [`ManualSignal`] | a value the service sets (e.g. an upstream's ORCA utilisation report) |
//! | [`FnSignal`] | any closure |
//! | [`MaxSignal`] | the maximum of several signals (the tightest bottleneck decides) |
//!
//! Readings are taken on the request path, so every `utilisation` is lock-free: state lives in
//! atomics (f64 as bits), and sampled signals refresh at most once per interval by whichever
//! thread wins a compare-and-swap. Readings are sanitised: NaN and negative values read as 0 and
//! +∞ as `f64::MAX`, so a broken custom signal cannot poison the shed arithmetic.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

mod cgroup_usage;
mod cpu;
mod executor;

pub use cgroup_usage::{cgroup_cpu_usage, parse_cpu_stat_usage, parse_cpuacct_usage};
pub use cpu::{
    available_cpus, parse_cfs_quota, parse_cgroup_path, parse_cpu_list, parse_cpu_max,
    parse_proc_stat_cpu, CpuLimits, CpuSources, ParseError, ProcessCpu, ProcessCpuConfig, USER_HZ,
};
pub use executor::{ExecutorLoadAverage, ExecutorLoadConfig};

/// A utilisation reading: a fraction of capacity in use, 1.0 = fully used (may exceed 1).
pub trait LoadSignal: Send + Sync + fmt::Debug {
    /// A short name for metrics and snapshots, e.g. `process_cpu`.
    fn name(&self) -> &str;
    /// The utilisation at `now`: finite and `>= 0` for the built-in signals.
    fn utilisation(&self, now: Instant) -> f64;
}

/// Why a signal could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SignalError {
    /// A file the signal needs could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A file was read but its contents were not understood.
    #[error("cannot parse {path}: {source}")]
    Parse {
        /// The file.
        path: String,
        /// What was wrong.
        #[source]
        source: ParseError,
    },
    /// The signal's configuration is invalid.
    #[error(transparent)]
    Config(#[from] crate::error::ConfigError),
    /// The signal is not available on this operating system.
    #[error("{signal} is only available on Linux (it reads /proc and /sys/fs/cgroup)")]
    Unsupported {
        /// The signal's name.
        signal: &'static str,
    },
}

/// Maps a raw reading into `[0, f64::MAX]`: NaN and negatives to 0, +∞ to `f64::MAX`.
#[inline]
pub(crate) fn sanitize(v: f64) -> f64 {
    if v.is_nan() || v <= 0.0 {
        0.0
    } else {
        v.min(f64::MAX)
    }
}

/// An `f64` in an `AtomicU64` (bit pattern), so readings need no lock.
#[derive(Debug, Default)]
pub(crate) struct AtomicF64(AtomicU64);

impl AtomicF64 {
    pub(crate) fn new(v: f64) -> Self {
        AtomicF64(AtomicU64::new(v.to_bits()))
    }
    #[inline]
    pub(crate) fn load(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Acquire))
    }
    #[inline]
    pub(crate) fn store(&self, v: f64) {
        self.0.store(v.to_bits(), Ordering::Release);
    }
    /// Applies `f` atomically (CAS loop); returns the new value.
    #[inline]
    pub(crate) fn update(&self, mut f: impl FnMut(f64) -> f64) -> f64 {
        let mut cur = self.0.load(Ordering::Acquire);
        loop {
            let new = f(f64::from_bits(cur)).to_bits();
            match self
                .0
                .compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return f64::from_bits(new),
                Err(actual) => cur = actual,
            }
        }
    }
}

/// A utilisation the service sets itself, e.g. from a queue depth it tracks, a memory-pressure
/// reading, or an upstream's ORCA load report (`cpu_utilization`) relayed to the shed decision.
#[derive(Debug)]
pub struct ManualSignal {
    name: Box<str>,
    value: AtomicF64,
}

impl ManualSignal {
    /// A signal called `name`, reading 0 until [`set`](Self::set).
    pub fn new(name: impl Into<String>) -> Self {
        ManualSignal {
            name: name.into().into_boxed_str(),
            value: AtomicF64::new(0.0),
        }
    }

    /// Sets the reading; NaN and negative values store 0, +∞ stores `f64::MAX`.
    pub fn set(&self, utilisation: f64) {
        self.value.store(sanitize(utilisation));
    }

    /// The current reading (same as [`LoadSignal::utilisation`], without a time).
    pub fn get(&self) -> f64 {
        self.value.load()
    }
}

impl LoadSignal for ManualSignal {
    fn name(&self) -> &str {
        &self.name
    }
    fn utilisation(&self, _now: Instant) -> f64 {
        self.value.load()
    }
}

type UtilisationFn = dyn Fn(Instant) -> f64 + Send + Sync;

/// A signal computed by a closure, for bottlenecks the built-ins do not see (connection pools,
/// memory, disk queue). The closure runs on every reading, so it must be cheap.
pub struct FnSignal {
    name: Box<str>,
    f: Box<UtilisationFn>,
}

impl FnSignal {
    /// A signal called `name` whose reading at `now` is `f(now)` (sanitised).
    pub fn new(
        name: impl Into<String>,
        f: impl Fn(Instant) -> f64 + Send + Sync + 'static,
    ) -> Self {
        FnSignal {
            name: name.into().into_boxed_str(),
            f: Box::new(f),
        }
    }
}

impl fmt::Debug for FnSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnSignal")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl LoadSignal for FnSignal {
    fn name(&self) -> &str {
        &self.name
    }
    fn utilisation(&self, now: Instant) -> f64 {
        sanitize((self.f)(now))
    }
}

type CountsFn = dyn Fn() -> (usize, usize) + Send + Sync;

enum InFlightSource {
    Atomics {
        in_flight: Arc<AtomicUsize>,
        limit: Arc<AtomicUsize>,
    },
    Fn(Box<CountsFn>),
}

/// In-flight requests over a limit: the SRE book's "cap work in progress" as a utilisation, so a
/// concurrency limit can drive criticality-ordered shedding before it starts refusing outright.
///
/// A limit of 0 is read as 1 (no division by zero): with nothing allowed to run, one request in
/// flight already reads as full.
pub struct InFlightSignal {
    name: Box<str>,
    source: InFlightSource,
}

impl InFlightSignal {
    /// Reads `in_flight / limit` from two shared counters, which their owner keeps up to date.
    pub fn new(
        name: impl Into<String>,
        in_flight: Arc<AtomicUsize>,
        limit: Arc<AtomicUsize>,
    ) -> Self {
        InFlightSignal {
            name: name.into().into_boxed_str(),
            source: InFlightSource::Atomics { in_flight, limit },
        }
    }

    /// Reads `(in_flight, limit)` from a closure, e.g. from a limiter that owns both.
    pub fn from_fn(
        name: impl Into<String>,
        counts: impl Fn() -> (usize, usize) + Send + Sync + 'static,
    ) -> Self {
        InFlightSignal {
            name: name.into().into_boxed_str(),
            source: InFlightSource::Fn(Box::new(counts)),
        }
    }

    /// The current `(in_flight, limit)` pair.
    pub fn counts(&self) -> (usize, usize) {
        match &self.source {
            InFlightSource::Atomics { in_flight, limit } => (
                in_flight.load(Ordering::Relaxed),
                limit.load(Ordering::Relaxed),
            ),
            InFlightSource::Fn(f) => f(),
        }
    }
}

impl fmt::Debug for InFlightSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (in_flight, limit) = self.counts();
        f.debug_struct("InFlightSignal")
            .field("name", &self.name)
            .field("in_flight", &in_flight)
            .field("limit", &limit)
            .finish()
    }
}

impl LoadSignal for InFlightSignal {
    fn name(&self) -> &str {
        &self.name
    }
    fn utilisation(&self, _now: Instant) -> f64 {
        let (in_flight, limit) = self.counts();
        in_flight as f64 / limit.max(1) as f64
    }
}

/// The maximum of several signals: a task is as full as its tightest resource.
#[derive(Debug)]
pub struct MaxSignal {
    name: Box<str>,
    signals: Vec<Arc<dyn LoadSignal>>,
}

impl MaxSignal {
    /// The maximum of `signals`; reads 0 if there are none.
    pub fn new(name: impl Into<String>, signals: Vec<Arc<dyn LoadSignal>>) -> Self {
        MaxSignal {
            name: name.into().into_boxed_str(),
            signals,
        }
    }

    /// The signals combined.
    pub fn signals(&self) -> &[Arc<dyn LoadSignal>] {
        &self.signals
    }

    /// The highest reading and the name of the signal that gave it (the first one on ties), for
    /// snapshots that say *why* a task is shedding. `None` if there are no signals.
    pub fn dominant(&self, now: Instant) -> Option<(&str, f64)> {
        let mut best: Option<(&str, f64)> = None;
        for s in &self.signals {
            let u = sanitize(s.utilisation(now));
            if !matches!(best, Some((_, b)) if u <= b) {
                best = Some((s.name(), u));
            }
        }
        best
    }
}

impl LoadSignal for MaxSignal {
    fn name(&self) -> &str {
        &self.name
    }
    fn utilisation(&self, now: Instant) -> f64 {
        self.signals
            .iter()
            .map(|s| sanitize(s.utilisation(now)))
            .fold(0.0, f64::max)
    }
}

#[cfg(test)]
mod tests;
