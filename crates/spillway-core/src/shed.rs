//! Shedding on utilisation, lowest criticality first, with a probability ramp instead of a cliff.
//!
//! The SRE book (ch. 21, "Utilization signals" and "Criticality") has a backend shed SHEDDABLE
//! traffic first when its utilisation signal crosses a threshold, then SHEDDABLE_PLUS, and reject
//! CRITICAL only when the task would otherwise fail. A hard threshold ("shed everything of this
//! level once u > T") makes the admitted load jump between all and nothing each time the signal
//! crosses T, so the signal — and the shedding — oscillates. Instead each level's shed
//! probability rises linearly from 0 at its threshold to 1 at `threshold + ramp`:
//!
//! ```text
//! p_own(c, u) = clamp((u − T_c) / ramp, 0, 1)        (ramp = 0: a step, 1 iff u > T_c)
//! p(c, u)     = max(p_own(c, u), p(c + 1, u))         (never shed a level less than the one above)
//! ```
//!
//! Admitted load is then `offered · (1 − p(u))`, a continuous decreasing function of utilisation,
//! which settles at a fixed point inside the ramp instead of flapping across the threshold (the
//! same reason AWS's load-shedding article prefers shedding a *fraction* of traffic).
//!
//! Defaults (thresholds 0.8 / 0.9 / 1.0 / never, ramp 0.1) follow the SRE book's ordering and the
//! AWS article's advice to start shedding before the service reaches the knee of its latency
//! curve; with them SHEDDABLE is fully shed at 0.9, SHEDDABLE_PLUS at 1.0, and CRITICAL only above
//! 1.0. CRITICAL_PLUS is never shed on utilisation alone (the concurrency limit still protects the
//! task). Validation guarantees the order: thresholds are non-decreasing with criticality, a level
//! without a threshold has none above it, and each sheddable level is fully shed by the time the
//! first critical level starts shedding.

use crate::criticality::{Criticality, PerCriticality};
use crate::error::ConfigError;

/// Largest accepted threshold or ramp. Utilisation may exceed 1 (executor load over CPUs), but a
/// threshold beyond 10× capacity is certainly a unit mistake (percent instead of a fraction).
const MAX_SETTING: f64 = 10.0;

/// Where each criticality starts being shed, and how wide the probability ramp is.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
pub struct ShedConfig {
    /// Utilisation (fraction, 1.0 = full) above which each level starts being shed; `None` = never
    /// shed on utilisation. Default `[0.8, 0.9, 1.0, None]` (SHEDDABLE … CRITICAL_PLUS).
    pub thresholds: PerCriticality<Option<f64>>,
    /// Width of the linear ramp from probability 0 (at the threshold) to 1 (at threshold + ramp).
    /// Default 0.1: SHEDDABLE is fully shed at 0.9, before CRITICAL starts at 1.0.
    pub ramp: f64,
}

impl Default for ShedConfig {
    fn default() -> Self {
        ShedConfig {
            thresholds: PerCriticality([Some(0.8), Some(0.9), Some(1.0), None]),
            ramp: 0.1,
        }
    }
}

impl ShedConfig {
    /// Checks every setting; the error names the field and what it accepts.
    pub fn validate(&self) -> Result<(), ConfigError> {
        crate::error::check_range(
            "shed.ramp",
            self.ramp,
            0.0,
            MAX_SETTING,
            "a utilisation width in [0, 10] (0 = a hard threshold)",
        )?;
        let mut previous: Option<f64> = None;
        let mut seen_none = false;
        for c in Criticality::ALL {
            let field = threshold_field(c);
            match self.thresholds[c] {
                None => seen_none = true,
                Some(t) => {
                    crate::error::check_range(
                        field,
                        t,
                        0.0,
                        MAX_SETTING,
                        "a utilisation fraction in [0, 10] (1.0 = fully used), or none",
                    )?;
                    if seen_none {
                        return Err(ConfigError::new(
                            field,
                            t,
                            "none, because a lower criticality has no threshold \
                             (higher criticalities must never be shed before lower ones)",
                        ));
                    }
                    if let Some(p) = previous {
                        if t < p {
                            return Err(ConfigError::new(
                                field,
                                t,
                                "a threshold >= the one of the criticality below it \
                                 (lower criticalities are shed first)",
                            ));
                        }
                    }
                    previous = Some(t);
                }
            }
        }
        // SRE book: reject CRITICAL only once the sheddable traffic is gone, so every sheddable
        // level must reach probability 1 no later than the first critical level starts.
        if let Some(first_critical) =
            self.thresholds[Criticality::Critical].or(self.thresholds[Criticality::CriticalPlus])
        {
            for c in [Criticality::Sheddable, Criticality::SheddablePlus] {
                if let Some(t) = self.thresholds[c] {
                    if t + self.ramp > first_critical + 1e-12 {
                        return Err(ConfigError::new(
                            "shed.ramp",
                            self.ramp,
                            "a width small enough that every SHEDDABLE* level is fully shed \
                             (threshold + ramp) before the first CRITICAL* threshold",
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

fn threshold_field(c: Criticality) -> &'static str {
    match c {
        Criticality::Sheddable => "shed.thresholds.SHEDDABLE",
        Criticality::SheddablePlus => "shed.thresholds.SHEDDABLE_PLUS",
        Criticality::Critical => "shed.thresholds.CRITICAL",
        Criticality::CriticalPlus => "shed.thresholds.CRITICAL_PLUS",
    }
}

/// The validated shed policy: pure arithmetic, no state, no allocation. The thresholds every
/// decision reads come first (`repr(C)`; see the admission controller's layout note).
#[derive(Debug, Clone, PartialEq)]
#[repr(C)]
pub struct ShedPolicy {
    /// Thresholds with `None` as +∞, so the hot path does no `Option` matching.
    start: [f64; Criticality::COUNT],
    cfg: ShedConfig,
}

impl ShedPolicy {
    /// Validates `cfg` and builds the policy.
    pub fn new(cfg: ShedConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let start = Criticality::ALL.map(|c| cfg.thresholds[c].unwrap_or(f64::INFINITY));
        Ok(ShedPolicy { cfg, start })
    }

    /// The configuration this policy was built from.
    pub fn config(&self) -> &ShedConfig {
        &self.cfg
    }

    /// The utilisation above which `c` starts being shed, if it ever is.
    pub fn threshold(&self, c: Criticality) -> Option<f64> {
        self.cfg.thresholds[c]
    }

    /// This level's own ramp, ignoring the levels above it.
    #[inline]
    fn own(&self, index: usize, u: f64) -> f64 {
        let t = self.start[index];
        if u <= t {
            return 0.0;
        }
        if self.cfg.ramp <= 0.0 {
            return 1.0;
        }
        ((u - t) / self.cfg.ramp).min(1.0)
    }

    /// Probability in `[0, 1]` of shedding a request of criticality `c` at `utilisation`.
    ///
    /// 0 at or below the level's threshold, rising linearly to 1 at threshold + ramp, and never
    /// below the probability of any higher level. A NaN utilisation (a broken signal) sheds
    /// nothing: failing open keeps serving while the concurrency limit still protects the task.
    pub fn probability(&self, c: Criticality, utilisation: f64) -> f64 {
        // Thresholds never decrease with criticality (validated), so at or below this level's own
        // threshold every level above it is at 0 too: the usual case, answered without the loop.
        if utilisation.is_nan() || utilisation <= self.start[c.index()] {
            return 0.0;
        }
        let mut p: f64 = 0.0;
        // Max with every higher level: ordering holds even if thresholds were equal or the
        // arithmetic rounds differently per level.
        for i in c.index()..Criticality::COUNT {
            p = p.max(self.own(i, utilisation));
        }
        p
    }

    /// Whether to shed this request: `draw` is a uniform draw in `[0, 1)` (from a
    /// [`RandomSource`](crate::random::RandomSource)); sheds iff `draw < probability`.
    #[inline]
    pub fn should_shed(&self, c: Criticality, utilisation: f64, draw: f64) -> bool {
        self.should_shed_with(c, utilisation, || draw)
    }

    /// [`should_shed`](Self::should_shed), taking the draw from `draw` only when the answer
    /// depends on it (`0 < p < 1`): a caller with a thread-local generator then pays for no
    /// draw in the usual case of nothing being shed.
    #[inline]
    pub fn should_shed_with(
        &self,
        c: Criticality,
        utilisation: f64,
        draw: impl FnOnce() -> f64,
    ) -> bool {
        let p = self.probability(c, utilisation);
        // Guards keep out-of-contract draws (negative, 1.0, NaN) from shedding at p = 0 or
        // admitting at p = 1.
        p >= 1.0 || (p > 0.0 && draw() < p)
    }

    /// The lowest threshold of any level: the task counts as "overloaded" above it (quota
    /// enforcement, reporting). `f64::INFINITY` if no level is ever shed on utilisation.
    pub fn lowest_threshold(&self) -> f64 {
        self.start.iter().copied().fold(f64::INFINITY, f64::min)
    }
}

impl Default for ShedPolicy {
    fn default() -> Self {
        let cfg = ShedConfig::default();
        let start = Criticality::ALL.map(|c| cfg.thresholds[c].unwrap_or(f64::INFINITY));
        ShedPolicy { cfg, start }
    }
}

#[cfg(test)]
mod tests;
