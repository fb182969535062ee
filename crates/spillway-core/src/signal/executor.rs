//! The SRE book's executor load average (ch. 21, "Utilization signals"): an exponentially
//! decayed average of the number of active requests (threads, in Google's servers) over the
//! CPUs available. Unlike CPU time it also rises when requests are blocked on I/O or locks, so a
//! task whose bottleneck is not the CPU still sees itself full.
//!
//! The active count is a step function of time (it changes only when
//! [`ExecutorLoadAverage::record_active`] is called), so the average is updated with the exact
//! continuous-time solution over each step, not a per-sample EWMA that would depend on how often
//! the count is recorded: over an interval `Δt` during which `x` requests were active,
//! `avg ← avg + (x − avg)·(1 − e^(−Δt/τ))`. This is the formula Linux's load average uses with a
//! fixed 5 s step (`kernel/sched/loadavg.c`, `EXP_1 = 2^11·e^(−5/60)`), generalised to irregular
//! steps.
//!
//! τ defaults to 1 s. Linux's load averages use τ = 1, 5 and 15 minutes, which is for humans
//! reading trends; shedding must react to a surge within a second or two (AWS's load-shedding
//! article: a server that keeps accepting work past its limit builds a backlog that times out),
//! yet not to every momentary burst of arrivals. 1 s matches [`ProcessCpu`](super::ProcessCpu)'s
//! smoothing, so the two can be combined in a [`MaxSignal`](super::MaxSignal).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{available_cpus, AtomicF64, LoadSignal};
use crate::clock::{nanos_since, saturating_nanos};
use crate::error::ConfigError;

/// Settings of an [`ExecutorLoadAverage`].
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
pub struct ExecutorLoadConfig {
    /// Decay time constant τ; default 1 s (see the module docs for why). Accepted: 1 ms to 1 h.
    pub time_constant: Duration,
    /// CPUs to divide by; `None` (the default) detects them with [`available_cpus`] (cgroup
    /// quota and affinity aware). Accepted: a finite number > 0.
    pub cpus: Option<f64>,
}

impl Default for ExecutorLoadConfig {
    fn default() -> Self {
        ExecutorLoadConfig {
            time_constant: Duration::from_secs(1),
            cpus: None,
        }
    }
}

impl ExecutorLoadConfig {
    /// Checks every setting; the error names the field and what it accepts.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.time_constant < Duration::from_millis(1)
            || self.time_constant > Duration::from_secs(3600)
        {
            return Err(ConfigError::new(
                "executor_load.time_constant",
                format_args!("{:?}", self.time_constant),
                "a duration from 1ms to 1h",
            ));
        }
        if let Some(c) = self.cpus {
            crate::error::check_range(
                "executor_load.cpus",
                c,
                f64::MIN_POSITIVE,
                1e6,
                "a number of CPUs > 0 (fractions allowed), or none to detect",
            )?;
        }
        Ok(())
    }
}

/// Exponentially decayed count of active requests over available CPUs; lock-free.
///
/// Exact when updates do not race. When two threads record at once, each still claims its own
/// time interval by a compare-and-swap on the last-update timestamp and applies that interval's
/// decay atomically, so the total decay is exact and the average stays a convex combination of
/// the recorded counts (it can never leave their range or become NaN).
#[derive(Debug)]
pub struct ExecutorLoadAverage {
    origin: Instant,
    tau_nanos: f64,
    cpus: f64,
    /// Average active count as of `last_nanos`.
    avg: AtomicF64,
    last_nanos: AtomicU64,
    /// The active count held since `last_nanos`.
    active: AtomicU64,
}

impl ExecutorLoadAverage {
    /// An average starting at 0 active requests at `origin`.
    pub fn new(cfg: ExecutorLoadConfig, origin: Instant) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(ExecutorLoadAverage {
            origin,
            tau_nanos: saturating_nanos(cfg.time_constant) as f64,
            cpus: cfg.cpus.unwrap_or_else(available_cpus),
            avg: AtomicF64::new(0.0),
            last_nanos: AtomicU64::new(0),
            active: AtomicU64::new(0),
        })
    }

    /// The CPUs the average is divided by.
    pub fn cpus(&self) -> f64 {
        self.cpus
    }

    /// Records that `active` requests are running from `now` on (call on every start and end of
    /// a request, or periodically with the current count). A `now` earlier than the last record
    /// only replaces the held count: time never runs backwards for the average.
    pub fn record_active(&self, now: Instant, active: usize) {
        let t = nanos_since(self.origin, now);
        let active = u64::try_from(active).unwrap_or(u64::MAX);
        let mut last = self.last_nanos.load(Ordering::Acquire);
        loop {
            if t <= last {
                self.active.store(active, Ordering::Release);
                return;
            }
            match self.last_nanos.compare_exchange_weak(
                last,
                t,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(actual) => last = actual,
            }
        }
        // This thread owns the interval (last, t]; the count held over it is the previous one.
        let held = self.active.swap(active, Ordering::AcqRel) as f64;
        let decay = (-((t - last) as f64) / self.tau_nanos).exp();
        self.avg.update(|a| held + (a - held) * decay);
    }

    /// The decayed average number of active requests at `now` (not divided by CPUs).
    pub fn average(&self, now: Instant) -> f64 {
        let last = self.last_nanos.load(Ordering::Acquire);
        let avg = self.avg.load();
        let held = self.active.load(Ordering::Acquire) as f64;
        let dt = nanos_since(self.origin, now).saturating_sub(last) as f64;
        held + (avg - held) * (-dt / self.tau_nanos).exp()
    }
}

impl LoadSignal for ExecutorLoadAverage {
    fn name(&self) -> &str {
        "executor_load_average"
    }
    fn utilisation(&self, now: Instant) -> f64 {
        super::sanitize(self.average(now) / self.cpus)
    }
}
