//! Incident controls: the levers an operator pulls by hand during an overload.
//!
//! Why: automatic shedding handles the overloads it was designed for; incidents are the ones it
//! was not. The overload runbook in the reference guide ("Overload and load shedding", §"Overload
//! runbook", drawn from the SRE book ch. 21–22 and the SRE Workbook ch. 11) asks the operator to
//! *stop the feedback* (turn off retries you control), *shed on purpose, lowest criticality
//! first*, and, when tasks crash as soon as they become healthy, to *cut traffic hard (for
//! example to 1%), let tasks recover and caches warm, then ramp up*. The same guide says a
//! degraded mode must be *exercised* so that it still works when it is needed. Each of those is
//! one control here, set from the admin API (`POST /controls/...`) and consulted by the data path
//! on every request.
//!
//! The data path calls, per request:
//!
//! 1. [`IncidentControls::check`] after classification (health checks never reach it: they
//!    always pass first, as the AWS article ranks them above everything). A
//!    [`ControlRefusal`] becomes `503` with the don't-retry marker (`x-spillway-dont-retry: 1`,
//!    or `grpc-retry-pushback-ms: -1` for gRPC): an operator's cut is fleet-wide, so retrying on
//!    another task cannot help. It is counted under the `reason` label
//!    [`ControlRefusal::reason`] (`incident_shed`, `incident_admit_percent`).
//! 2. [`IncidentControls::retries_enabled`] before any retry of its own.
//! 3. [`IncidentControls::exercise_degraded`] on routes that have a degraded mode.
//!
//! Cost: every read is a handful of relaxed/acquire atomic loads; nothing allocates, nothing
//! locks. Writers (the admin API) are rare; the admit-percent control spans three words and is
//! published through a sequence lock so a request never sees half of an update.
//!
//! **Admit-percent and criticality.** The percentage applies to *every* criticality, including
//! `CRITICAL_PLUS`, unless the operator names an exemption (`exempt_from`): the cut exists to let
//! tasks that crash on startup recover, and an exemption large enough to matter can keep them
//! down. Levels at or above `exempt_from` pass the percentage gate (they can still be shed by
//! shed-below, which never touches `CRITICAL_PLUS` since nothing is below-or-equal to it).
//!
//! **Ramp.** With a ramp of duration `D` started at `t0` from `P`%, the admitted share at `t` is
//! `P + (100 − P) · min(1, (t − t0) / D)`. Without a ramp the share holds at `P`% until changed.
//! Time is passed in (`now`), so tests drive the ramp without sleeping.

use std::fmt;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use spillway_core::clock::{nanos_since, saturating_nanos};
use spillway_core::{ConfigError, Criticality};

/// Metric `reason` label for a request refused by [shed-below](IncidentControls::set_shed_below).
pub const REASON_SHED: &str = "incident_shed";
/// Metric `reason` label for a request refused by
/// [admit-percent](IncidentControls::set_admit_percent).
pub const REASON_ADMIT_PERCENT: &str = "incident_admit_percent";
/// The longest accepted ramp (7 days): longer is almost certainly a unit mistake.
pub const MAX_RAMP: Duration = Duration::from_secs(7 * 24 * 3600);

/// Why an incident control refused a request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ControlRefusal {
    /// The operator sheds every criticality below `below`.
    Shed {
        /// The lowest criticality still admitted.
        below: Criticality,
    },
    /// The request fell outside the share the operator currently admits.
    AdmitPercent {
        /// The share admitted at the time of the decision, in percent.
        percent: f64,
    },
}

impl ControlRefusal {
    /// The metric `reason` label: [`REASON_SHED`] or [`REASON_ADMIT_PERCENT`].
    pub const fn reason(&self) -> &'static str {
        match self {
            ControlRefusal::Shed { .. } => REASON_SHED,
            ControlRefusal::AdmitPercent { .. } => REASON_ADMIT_PERCENT,
        }
    }

    /// Retrying elsewhere never helps: the operator's cut applies to the whole fleet.
    pub const fn retryable_elsewhere(&self) -> bool {
        false
    }
}

impl fmt::Display for ControlRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ControlRefusal::Shed { below } => write!(
                f,
                "shed by an operator: only {below} and above are admitted during this incident"
            ),
            ControlRefusal::AdmitPercent { percent } => write!(
                f,
                "shed by an operator: {percent:.1}% of traffic is admitted during this incident"
            ),
        }
    }
}

/// The admit-percent setting as the admin API gives it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdmitPercent {
    /// The share admitted now, `0..=100` percent.
    pub percent: f64,
    /// Ramp linearly from `percent` to 100% over this long, starting now; `None` holds at
    /// `percent` until changed.
    pub ramp: Option<Duration>,
    /// Levels at or above this one bypass the percentage; `None` applies it to every level.
    pub exempt_from: Option<Criticality>,
}

impl AdmitPercent {
    /// Checks the values, naming the admin API's field on error.
    pub fn validate(&self) -> Result<(), ConfigError> {
        spillway_core::error::check_range(
            "percent",
            self.percent,
            0.0,
            100.0,
            "a number of percent from 0 to 100",
        )?;
        if let Some(r) = self.ramp {
            if r.is_zero() || r > MAX_RAMP {
                return Err(ConfigError::new(
                    "ramp_seconds",
                    r.as_secs_f64(),
                    "a number of seconds above 0 and at most 604800 (7 days)",
                ));
            }
        }
        Ok(())
    }
}

/// A snapshot of every control, for `GET /controls` and `/status`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ControlsState {
    /// Criticalities below this one are shed; `None` when off.
    #[serde(serialize_with = "ser_criticality")]
    pub shed_below: Option<Criticality>,
    /// The admit-percent control; `None` when off.
    pub admit_percent: Option<AdmitPercentState>,
    /// Whether the proxy's own retries are allowed.
    pub retries_enabled: bool,
    /// Share of requests (0..=1) sent down the degraded path on purpose.
    pub exercise_degraded_fraction: f64,
}

/// The admit-percent control at one instant.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AdmitPercentState {
    /// The share admitted when the control was set (the ramp's start), percent.
    pub from_percent: f64,
    /// The share admitted now, percent.
    pub current_percent: f64,
    /// The ramp's length, if ramping.
    pub ramp_seconds: Option<f64>,
    /// Seconds since the control was set.
    pub elapsed_seconds: f64,
    /// Seconds until the ramp reaches 100%, if ramping.
    pub remaining_seconds: Option<f64>,
    /// Levels at or above this one bypass the percentage.
    #[serde(serialize_with = "ser_criticality")]
    pub exempt_from: Option<Criticality>,
    /// The ramp has reached 100%: nothing is refused any more.
    pub complete: bool,
}

fn ser_criticality<S: serde::Serializer>(c: &Option<Criticality>, s: S) -> Result<S::Ok, S::Error> {
    match c {
        Some(c) => s.serialize_some(c.as_str()),
        None => s.serialize_none(),
    }
}

/// The admit-percent words, read together under the sequence lock.
#[derive(Debug, Clone, Copy, PartialEq)]
struct AdmitWords {
    /// 0 = off; otherwise 1 + the exemption's index, or [`NO_EXEMPTION`].
    flags: u8,
    from_percent: f64,
    start_ns: u64,
    /// 0 = hold at `from_percent`.
    ramp_ns: u64,
}

const ADMIT_OFF: u8 = 0;
const NO_EXEMPTION: u8 = 0xFF;

impl AdmitWords {
    const OFF: AdmitWords = AdmitWords {
        flags: ADMIT_OFF,
        from_percent: 100.0,
        start_ns: 0,
        ramp_ns: 0,
    };

    fn exempt_from(&self) -> Option<Criticality> {
        match self.flags {
            ADMIT_OFF | NO_EXEMPTION => None,
            f => Criticality::from_index(usize::from(f - 1)),
        }
    }

    /// The share admitted at `now_ns`, percent.
    fn percent_at(&self, now_ns: u64) -> f64 {
        if self.flags == ADMIT_OFF {
            return 100.0;
        }
        if self.ramp_ns == 0 {
            return self.from_percent;
        }
        let elapsed = now_ns.saturating_sub(self.start_ns);
        if elapsed >= self.ramp_ns {
            return 100.0;
        }
        let progress = elapsed as f64 / self.ramp_ns as f64;
        self.from_percent + (100.0 - self.from_percent) * progress
    }
}

/// A sequence lock over [`AdmitWords`]: readers never block or write; a writer makes the
/// sequence odd, stores, and makes it even again; a reader that saw the sequence change retries.
/// (The pattern of the Linux kernel's seqlock and crossbeam's `SeqLock`; every field is an
/// atomic, so a torn read is detected, never undefined.)
#[derive(Debug)]
struct AdmitCell {
    seq: AtomicU64,
    flags: AtomicU8,
    from_bits: AtomicU64,
    start_ns: AtomicU64,
    ramp_ns: AtomicU64,
}

impl AdmitCell {
    fn new() -> Self {
        AdmitCell {
            seq: AtomicU64::new(0),
            flags: AtomicU8::new(ADMIT_OFF),
            from_bits: AtomicU64::new(100f64.to_bits()),
            start_ns: AtomicU64::new(0),
            ramp_ns: AtomicU64::new(0),
        }
    }

    fn load(&self) -> AdmitWords {
        let mut spins = 0u32;
        loop {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 == 0 {
                let w = AdmitWords {
                    flags: self.flags.load(Ordering::Relaxed),
                    from_percent: f64::from_bits(self.from_bits.load(Ordering::Relaxed)),
                    start_ns: self.start_ns.load(Ordering::Relaxed),
                    ramp_ns: self.ramp_ns.load(Ordering::Relaxed),
                };
                fence(Ordering::Acquire);
                if self.seq.load(Ordering::Relaxed) == s1 {
                    return w;
                }
            }
            // A writer is mid-update (a few stores); let it finish.
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    fn store(&self, w: AdmitWords) {
        // Writers exclude each other by moving the sequence from even to odd.
        let mut s = self.seq.load(Ordering::Relaxed);
        loop {
            if s & 1 == 1 {
                std::thread::yield_now();
                s = self.seq.load(Ordering::Relaxed);
                continue;
            }
            match self
                .seq
                .compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => s = now,
            }
        }
        fence(Ordering::Release);
        self.flags.store(w.flags, Ordering::Relaxed);
        self.from_bits
            .store(w.from_percent.to_bits(), Ordering::Relaxed);
        self.start_ns.store(w.start_ns, Ordering::Relaxed);
        self.ramp_ns.store(w.ramp_ns, Ordering::Relaxed);
        self.seq.store(s + 2, Ordering::Release);
    }
}

/// The operator's incident levers, shared by the admin API (writes) and the data path (reads).
#[derive(Debug)]
pub struct IncidentControls {
    origin: Instant,
    /// 0 = off; `k` = levels whose index is below `k` are shed (k in 1..=3).
    shed_below: AtomicU8,
    admit: AdmitCell,
    retries: AtomicBool,
    exercise_bits: AtomicU64,
}

impl Default for IncidentControls {
    fn default() -> Self {
        Self::new(Instant::now())
    }
}

impl IncidentControls {
    /// Every control off (nothing shed, everything admitted, retries on, nothing exercised).
    /// `origin` is any instant not later than the first `now` passed in.
    pub fn new(origin: Instant) -> Self {
        IncidentControls {
            origin,
            shed_below: AtomicU8::new(0),
            admit: AdmitCell::new(),
            retries: AtomicBool::new(true),
            exercise_bits: AtomicU64::new(0f64.to_bits()),
        }
    }

    /// Decides whether the controls let a request of `criticality` through at `now`. `draw` is
    /// a uniform random number in `[0, 1)` (from `spillway_core::RandomSource`); a request is
    /// admitted by the percentage gate when `draw · 100 < percent`.
    #[inline]
    pub fn check(
        &self,
        now: Instant,
        criticality: Criticality,
        draw: f64,
    ) -> Option<ControlRefusal> {
        let k = self.shed_below.load(Ordering::Relaxed);
        if k != 0 && criticality.index() < usize::from(k) {
            let below =
                Criticality::from_index(usize::from(k)).unwrap_or(Criticality::CriticalPlus);
            return Some(ControlRefusal::Shed { below });
        }
        let w = self.admit.load();
        if w.flags == ADMIT_OFF {
            return None;
        }
        if w.exempt_from().is_some_and(|e| criticality >= e) {
            return None;
        }
        let percent = w.percent_at(nanos_since(self.origin, now));
        if draw * 100.0 < percent {
            None
        } else {
            Some(ControlRefusal::AdmitPercent { percent })
        }
    }

    /// Whether the proxy may retry (its own retries to upstream tasks). Off during an incident
    /// to stop the feedback loop of retries adding load.
    #[inline]
    pub fn retries_enabled(&self) -> bool {
        self.retries.load(Ordering::Relaxed)
    }

    /// Whether this request should take the degraded path on purpose, so the path is known to
    /// work before it is needed: true with probability equal to the configured fraction.
    #[inline]
    pub fn exercise_degraded(&self, draw: f64) -> bool {
        draw < f64::from_bits(self.exercise_bits.load(Ordering::Relaxed))
    }

    /// Sheds every level below `level`; `None` (or `SHEDDABLE`, below which there is nothing)
    /// turns it off.
    pub fn set_shed_below(&self, level: Option<Criticality>) {
        let k = level.map_or(0, |c| c.index() as u8);
        self.shed_below.store(k, Ordering::Relaxed);
    }

    /// The current shed-below level, if any level is shed.
    pub fn shed_below(&self) -> Option<Criticality> {
        match self.shed_below.load(Ordering::Relaxed) {
            0 => None,
            k => Criticality::from_index(usize::from(k)),
        }
    }

    /// Admits only `a.percent`% of traffic from `now`, ramping up if `a.ramp` is set.
    pub fn set_admit_percent(&self, now: Instant, a: AdmitPercent) -> Result<(), ConfigError> {
        a.validate()?;
        self.admit.store(AdmitWords {
            flags: a.exempt_from.map_or(NO_EXEMPTION, |c| c.index() as u8 + 1),
            from_percent: a.percent,
            start_ns: nanos_since(self.origin, now),
            ramp_ns: a.ramp.map_or(0, saturating_nanos),
        });
        Ok(())
    }

    /// Starts a ramp to 100% over `ramp` from the share admitted at `now`, keeping the
    /// exemption. Fails, naming `ramp_seconds` or `percent`, if the ramp is out of range or no
    /// admit-percent control is set.
    pub fn ramp_up(&self, now: Instant, ramp: Duration) -> Result<(), ConfigError> {
        let w = self.admit.load();
        if w.flags == ADMIT_OFF {
            return Err(ConfigError::new(
                "percent",
                "(not set)",
                "an admit-percent control to ramp from: set percent first, or give percent \
                 together with ramp_seconds",
            ));
        }
        let percent = w.percent_at(nanos_since(self.origin, now));
        self.set_admit_percent(
            now,
            AdmitPercent {
                percent,
                ramp: Some(ramp),
                exempt_from: w.exempt_from(),
            },
        )
    }

    /// Turns admit-percent off: everything passes its gate again.
    pub fn clear_admit_percent(&self) {
        self.admit.store(AdmitWords::OFF);
    }

    /// Allows or forbids the proxy's own retries.
    pub fn set_retries_enabled(&self, enabled: bool) {
        self.retries.store(enabled, Ordering::Relaxed);
    }

    /// Sends `fraction` (0..=1) of requests on routes with a degraded mode down that path.
    pub fn set_exercise_degraded(&self, fraction: f64) -> Result<(), ConfigError> {
        spillway_core::error::check_range(
            "fraction",
            fraction,
            0.0,
            1.0,
            "a fraction from 0 to 1 (0.01 = 1% of requests)",
        )?;
        self.exercise_bits
            .store(fraction.to_bits(), Ordering::Relaxed);
        Ok(())
    }

    /// Turns every control off.
    pub fn reset(&self) {
        self.set_shed_below(None);
        self.clear_admit_percent();
        self.set_retries_enabled(true);
        self.exercise_bits.store(0f64.to_bits(), Ordering::Relaxed);
    }

    /// Every control's state at `now`.
    pub fn snapshot(&self, now: Instant) -> ControlsState {
        let now_ns = nanos_since(self.origin, now);
        let w = self.admit.load();
        let admit_percent = (w.flags != ADMIT_OFF).then(|| {
            let elapsed_ns = now_ns.saturating_sub(w.start_ns);
            let ramp = (w.ramp_ns != 0).then(|| Duration::from_nanos(w.ramp_ns));
            let current = w.percent_at(now_ns);
            AdmitPercentState {
                from_percent: w.from_percent,
                current_percent: current,
                ramp_seconds: ramp.map(|r| r.as_secs_f64()),
                elapsed_seconds: Duration::from_nanos(elapsed_ns).as_secs_f64(),
                remaining_seconds: ramp.map(|_| {
                    Duration::from_nanos(w.ramp_ns.saturating_sub(elapsed_ns)).as_secs_f64()
                }),
                exempt_from: w.exempt_from(),
                complete: current >= 100.0,
            }
        });
        ControlsState {
            shed_below: self.shed_below(),
            admit_percent,
            retries_enabled: self.retries_enabled(),
            exercise_degraded_fraction: f64::from_bits(self.exercise_bits.load(Ordering::Relaxed)),
        }
    }
}

pub mod fleet;
pub mod fleet_sync;

#[cfg(test)]
mod tests;
