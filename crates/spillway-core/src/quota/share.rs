//! Leased shares: the book's side of fleet-wide quotas.
//!
//! Why: a static `global / tasks` split is wrong as soon as the fleet autoscales or traffic
//! reaches its instances unevenly (one gateway taking 80% of a customer). Google's Doorman
//! (client-side leases of a global capacity, max-min fair over the clients' wants, a safe
//! fallback capacity when the server is unreachable) fixes that without a round trip per
//! request, unlike Envoy's global rate limit service. The request path must never wait on the
//! network, so the book stays local and lock-free; what a fleet needs from it is only
//!
//! * each shared bucket's demand — the cost offered to it, admitted or refused
//!   ([`QuotaBook::offered`], a cumulative count the lease client differentiates), and
//! * a way to re-rate a bucket with the share the fleet agreed ([`QuotaBook::set_rate`]).
//!
//! The bucket's state is a theoretical arrival time, so a new rate keeps its *fill fraction*
//! (a full bucket stays full, a half-empty one stays half-empty) and rescales its capacity
//! (`rate × burst`) and any debt: nothing is granted or forgiven by the change itself.
//! Unlimited buckets and quotas of 0 are not shared and cannot be re-rated.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{QuotaBook, QuotaConfig, MAX_DURATION};

#[cfg(test)]
#[path = "share_tests.rs"]
mod tests;

#[path = "fair.rs"]
pub mod fair;
use crate::criticality::Criticality;
use crate::error::ConfigError;

/// Default lease interval: 500 ms — a share follows a shift of traffic within about a second,
/// for one store round trip per instance per interval however many requests it serves.
pub const DEFAULT_LEASE_INTERVAL: Duration = Duration::from_millis(500);

/// Shortest accepted lease interval (below it the store's load grows for no visible gain).
const MIN_LEASE: Duration = Duration::from_millis(50);
/// Longest accepted lease interval (beyond it membership takes too long to notice a loss).
const MAX_LEASE: Duration = Duration::from_secs(10);

/// Smallest rate [`QuotaBook::set_rate`] sets, cost units/s: a share of 0 would make the
/// bucket look like a configured quota of 0 (refused with the longest `retry_after`, no
/// account kept); this refuses the same while enforcing and keeps counting demand.
const MIN_RATE: f64 = 1e-6;

/// One bucket a fleet shares: a configured customer's (or the default slot's) criticality with
/// a finite, positive global quota.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SharedBucket<'a> {
    /// The customer, `None` for the default slot shared by every unlisted name.
    pub customer: Option<&'a str>,
    /// The criticality.
    pub criticality: Criticality,
    /// The global quota, cost units per second.
    pub global: f64,
    /// The rate this instance enforces now, cost units per second.
    pub rate: f64,
    /// Position for [`QuotaBook::offered`] and [`QuotaBook::set_rate`] (valid for this book).
    pub index: usize,
}

/// Demand is smoothed over this (an exponential average) while it holds steady: a second of a
/// 15 requests/s customer is few enough arrivals that one interval's count alone would swing
/// the shares.
pub const DEMAND_SMOOTHING: Duration = Duration::from_secs(1);

/// A reading this far from the estimate (as a fraction of the larger of the two) is off; off
/// on the same side for [`SHIFT_WINDOW`] is a shift of demand rather than noise, and so is one
/// reading of that length off by twice this, or one reading whose arrivals show it cannot be
/// noise ([`SIGNIFICANT_GAP`]).
const SHIFT: f64 = 0.25;

/// The least time of arrivals a shift is taken from when the arrivals are too few to tell it
/// from noise in one reading: about half a second (less a tenth for the lease timer's jitter).
const SHIFT_WINDOW: f64 = 0.45;

/// The least time a run with a reading of nothing is taken from: at a few arrivals per second
/// half a second without one is common (two services at 2 requests/s in 100 ms leases: the quiet
/// one's estimate fell to 0 and it was refused), so a drop to nothing needs three times as long.
const SHIFT_WINDOW_EMPTY: f64 = 3.0 * SHIFT_WINDOW;

/// One reading is a shift by itself when its arrival count `k` and the count the estimate
/// expects, `λ`, are this far apart in square roots: `|√k − √λ| ≥ 2`. The square root of a
/// Poisson count has a standard deviation of about ½ whatever its mean (Anscombe's transform),
/// so this is about four standard deviations: a steady demand reads that far off in well under
/// one reading in ten thousand.
const SIGNIFICANT_GAP: f64 = 2.0;

/// ... and when `k` or `λ` is at least this (a Poisson mean of 9 reads 0 once in 8,000).
const SIGNIFICANT_COUNT: f64 = 9.0;

/// The long view's memory, in smoothing times (8 s for the proxy's 1 s).
const LONG_MEMORY: f64 = 8.0;

/// A bucket whose smoothed estimate rests on this many arrivals or more (within a smoothing
/// time) reports it; under half as many, it reports its long view.
const BUSY: f64 = 4.0;

/// Arrivals a long view with none still asks for (the rule of three: a Poisson mean of 3
/// shows no arrival 5% of the time).
const EMPTY_BOUND: f64 = 3.0;

/// One bucket's demand as a lease client reports it: the offered rate, smoothed while steady,
/// followed at once when it shifts.
///
/// Why not only smoothing: after the busiest instance becomes the quietest, a one-second
/// average keeps reporting the old demand for seconds, and the max-min share follows the
/// reports, so the fleet took 3.7–4.8 s to admit its quota again (bench/results/
/// fleet2-controls-sim.md).
///
/// Why arrival counts: whether one reading is a shift or noise depends on how many requests
/// it rests on, not on its length. A reading off the estimate by more than a quarter whose
/// arrival count is also about four Poisson standard deviations from what the estimate expects
/// (`SIGNIFICANT_GAP`, 2: `|√k − √λ| ≥ 2`) is taken as it stands, at once: a busy bucket follows a shift at its
/// next reading, however short the lease interval (at 250 ms leases a half-second window cost
/// two readings, so about four intervals; bench/results/fleet4-issue31.md). Readings with too
/// few arrivals to tell (a few requests per interval) keep the time rule: off by more than a
/// quarter on the same side for half a second (two readings or more, or one off by half; a
/// second and a half when one of them saw nothing), then the newest half second is taken.
/// Shorter runs are smoothed, so an instance that sees a few arrivals per interval does not
/// report each interval's count. The first reading stands as it is (no history to smooth it
/// with), so a busy instance is not under-reported after it starts.
///
/// Why a long view for quiet buckets: at 10,000 instances sharing 1,000/s (0.3 requests/s
/// each on average) a one-second estimate is mostly 0 and, after each arrival, several times
/// the fair level for a second. The store's level is computed over `min(demand, level)`, so
/// those spikes are cut off and the level came out twice what the true demands give, while
/// the shares asked from the estimate were under the demand half the time: the fleet admitted
/// 81% of its quota, and 1,000 instances held only because the two errors cancelled
/// (bench/results/fleet6-issue31.md). A bucket whose smoothed estimate rests on few arrivals
/// (under `BUSY`, 4, in a smoothing time; once busy, under half that) reports its rate over
/// the last `LONG_MEMORY` (8) smoothing times
/// (decayed counts over decayed time, so no first reading weighs more than its time) and
/// asks for a Poisson upper bound of it; a busy one reports the smoothed estimate as before,
/// and the long view follows it, so a bucket that turns quiet starts its long view from its
/// demand then. Shifts are still taken from the counted readings, as above.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct DemandEstimate {
    /// Cost units per second; `None` before the first reading.
    est: Option<f64>,
    /// Cost units per arrival (smoothed), to turn the estimate into an expected count.
    per_arrival: Option<f64>,
    /// The side (+1 above, −1 below, 0 none) of the current run of readings off the estimate.
    side: i8,
    /// The estimate before the run began, which its readings are compared with.
    anchor: f64,
    /// The run's readings: cost units offered, seconds, readings.
    run_units: f64,
    run_secs: f64,
    run_len: u32,
    /// The run's arrivals.
    run_arrivals: u64,
    /// Whether a reading of the run saw nothing offered.
    run_empty: bool,
    /// The smoothing time of the last reading, seconds (for [`DemandEstimate::upper`]).
    smoothing: f64,
    /// Whether the last reading was taken as a shift.
    shifted: bool,
    /// The long view (for a bucket with few arrivals): cost units, seconds and arrivals, each
    /// decayed over `LONG_MEMORY` smoothing times, so its rate is units / seconds.
    long_units: f64,
    long_secs: f64,
    long_arrivals: f64,
    /// Whether the smoothed estimate rests on enough arrivals to be reported (`BUSY`).
    busy: bool,
}

impl DemandEstimate {
    /// The estimate, cost units/s (0 before the first reading).
    pub fn get(&self) -> f64 {
        self.value().unwrap_or(0.0)
    }

    /// The estimate, cost units/s, or `None` before the first reading.
    pub fn value(&self) -> Option<f64> {
        let est = self.est?;
        Some(self.long().map_or(est, |(rate, _)| rate))
    }

    /// The long view's rate and arrivals when it is the one to report: arrivals are counted
    /// and the smoothed estimate rests on too few of them.
    fn long(&self) -> Option<(f64, f64)> {
        self.per_arrival?;
        (!self.busy && self.long_secs > 0.0).then(|| {
            (
                self.long_units / self.long_secs,
                self.long_arrivals.max(0.0),
            )
        })
    }

    /// An upper bound of the demand: the estimate plus two standard deviations of the Poisson
    /// noise of the arrivals it rests on (an average of `λ` arrivals/s over a smoothing time
    /// `τ` varies by `√(λ / 2τ)`); from the long view, `n + 2√n + 3` arrivals over its
    /// seconds (`n` its arrivals; with none, the rule of three). The lease client asks for
    /// this much for itself while the fleet's level is computed over the estimates.
    ///
    /// Why: an instance that sees a few requests per interval reads its demand low about half
    /// the time, and a share of exactly its estimate then refuses what its demand would have
    /// had: simulated with Poisson arrivals, 1,000 instances sharing 1,000/s admitted 75–80%
    /// of it and 10,000 about half (bench/results/fleet4-issue31.md). The excess goes unused
    /// while demand holds; if many quiet instances grow at once the fleet admits up to their
    /// asks until the estimates, and with them the level, catch up (the smoothing time). A
    /// larger ask (a rule-of-three term for windows without arrivals) made 1,000 instances
    /// admit 4–5% over the quota while the level was computed over one-second estimates
    /// (bench/results/fleet4-issue31.md); over the long view's reports it no longer does
    /// (bench/results/fleet6-issue31.md).
    pub fn upper(&self) -> f64 {
        if let (Some((_, n)), Some(cpa)) = (self.long(), self.per_arrival) {
            return (n + 2.0 * n.sqrt() + EMPTY_BOUND) * cpa / self.long_secs;
        }
        let est = self.get();
        match self.per_arrival {
            Some(cpa) if self.smoothing > 0.0 => {
                est + 2.0 * (est * cpa / (2.0 * self.smoothing)).sqrt()
            }
            _ => est,
        }
    }

    /// Whether the last reading was taken as a shift of demand (the store should then share
    /// the quota out afresh rather than apply a level computed before it).
    pub fn shifted(&self) -> bool {
        self.shifted
    }

    /// Takes `rate` (cost units/s over the last `dt` seconds) into the estimate; returns it.
    /// Without an arrival count only the time rule tells a shift from noise.
    pub fn update(&mut self, rate: f64, dt: f64) -> f64 {
        self.update_with(rate, dt, None, DEMAND_SMOOTHING.as_secs_f64())
    }

    /// [`update`](Self::update) with steady demand smoothed over `smoothing_s` seconds instead
    /// of [`DEMAND_SMOOTHING`] (the simulator's knob).
    pub fn update_over(&mut self, rate: f64, dt: f64, smoothing_s: f64) -> f64 {
        self.update_with(rate, dt, None, smoothing_s)
    }

    /// Takes a reading of `rate` cost units/s over `dt` seconds resting on `arrivals`
    /// requests (when known), smoothing steady demand over `smoothing_s` seconds; returns the
    /// estimate.
    pub fn update_with(
        &mut self,
        rate: f64,
        dt: f64,
        arrivals: Option<u64>,
        smoothing_s: f64,
    ) -> f64 {
        let rate = if rate.is_finite() { rate.max(0.0) } else { 0.0 };
        let dt = if dt.is_finite() { dt.max(0.0) } else { 0.0 };
        self.shifted = false;
        // Cost per arrival of this reading, when it has both.
        let per = arrivals
            .filter(|&k| k > 0 && rate > 0.0 && dt > 0.0)
            .map(|k| rate * dt / k as f64);
        self.smoothing = smoothing_s;
        let g = if smoothing_s > 0.0 {
            (-dt / (smoothing_s * LONG_MEMORY)).exp()
        } else {
            0.0
        };
        self.long_units = self.long_units * g + rate * dt;
        self.long_secs = self.long_secs * g + dt;
        self.long_arrivals = self.long_arrivals * g + arrivals.unwrap_or(0) as f64;
        let Some(est) = self.est else {
            self.est = Some(rate);
            self.per_arrival = per;
            return rate;
        };
        // Readings of a run are compared with the estimate from before it: the first ones were
        // smoothed in, and would hide the shift they began.
        let reference = if self.side != 0 { self.anchor } else { est };
        let scale = rate.max(reference);
        let off = if scale > 0.0 {
            (rate - reference) / scale
        } else {
            0.0
        };
        let side = if off > SHIFT {
            1
        } else if off < -SHIFT {
            -1
        } else {
            0
        };
        // Whether `k` arrivals in `secs` cannot be the reference's (see SIGNIFICANT_GAP).
        let cpa = self.per_arrival.or(per).filter(|&c| c > 0.0);
        let beyond_noise = |k: u64, secs: f64| match cpa {
            Some(cpa) => {
                let k = k as f64;
                let expected = reference * secs / cpa;
                k.max(expected) >= SIGNIFICANT_COUNT
                    && (k.sqrt() - expected.sqrt()).abs() >= SIGNIFICANT_GAP
            }
            None => false,
        };
        let significant = side != 0 && arrivals.is_some_and(|k| beyond_noise(k, dt));
        let alpha = if dt > 0.0 && smoothing_s > 0.0 {
            1.0 - (-dt / smoothing_s).exp()
        } else {
            0.0
        };
        if let Some(per) = per {
            self.per_arrival = Some(self.per_arrival.map_or(per, |p| p + alpha * (per - p)));
        }
        if side == 0 || side != self.side {
            self.side = side;
            self.anchor = reference;
            self.run_units = 0.0;
            self.run_secs = 0.0;
            self.run_len = 0;
            self.run_arrivals = 0;
            self.run_empty = false;
        }
        if side != 0 {
            self.run_units += rate * dt;
            self.run_secs += dt;
            self.run_len += 1;
            self.run_arrivals += arrivals.unwrap_or(0);
            self.run_empty |= rate == 0.0;
        }
        let window = if self.run_empty {
            SHIFT_WINDOW_EMPTY
        } else {
            SHIFT_WINDOW
        };
        let timed = if arrivals.is_some() {
            // Counted: the run as a whole is beyond noise (a quiet instance's runs of empty
            // readings are not a drop to nothing until they could not be chance).
            side != 0 && self.run_len >= 2 && beyond_noise(self.run_arrivals, self.run_secs)
        } else {
            side != 0 && self.run_secs >= window && (self.run_len >= 2 || off.abs() >= 2.0 * SHIFT)
        };
        let next = if significant {
            // Too many arrivals off to be noise: the reading stands, now.
            self.side = 0;
            self.shifted = true;
            rate
        } else if timed {
            self.side = 0;
            self.shifted = true;
            // The newest half second: a reading that long alone, else the run's average (its
            // first reading may straddle the shift, so it is left out when it can be).
            if dt >= window && arrivals.is_none() {
                rate
            } else {
                self.run_units / self.run_secs
            }
        } else {
            est + alpha * (rate - est)
        };
        self.est = Some(next);
        // Arrivals the smoothed estimate rests on: busy from BUSY up, quiet again under half
        // of it (so a quiet bucket's lucky reading does not swap views back and forth).
        let cpa = self.per_arrival.filter(|&c| c > 0.0);
        let count = cpa.map_or(0.0, |c| next * smoothing_s / c);
        self.busy = count >= if self.busy { BUSY / 2.0 } else { BUSY };
        if self.shifted || self.busy {
            // While busy, or at a shift, the long view restarts from the smoothed estimate
            // with a smoothing time's weight: when the bucket turns quiet, or after its
            // demand moved, the long view starts from the demand now, not from an average
            // of seconds ago, and its own arrivals outweigh that start within seconds.
            self.long_secs = smoothing_s.min(self.long_secs);
            self.long_units = next * self.long_secs;
            self.long_arrivals = cpa.map_or(0.0, |c| self.long_units / c);
        }
        next
    }
}

/// `amount` cost units in millionths, for the offered counter.
#[inline]
pub(super) fn micro_units(amount: f64) -> u64 {
    let m = amount * 1e6;
    if m >= u64::MAX as f64 {
        u64::MAX
    } else if m > 0.0 {
        m as u64
    } else {
        0
    }
}

pub(super) fn validate_store(cfg: &QuotaConfig) -> Result<(), ConfigError> {
    if !(MIN_LEASE..=MAX_LEASE).contains(&cfg.lease_interval) || cfg.lease_interval > MAX_DURATION {
        return Err(ConfigError::new(
            "quota.lease_interval_ms",
            format!("{} ms", cfg.lease_interval.as_secs_f64() * 1e3),
            "a duration in 50 ..= 10000 ms",
        ));
    }
    if let Some(url) = &cfg.store {
        if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            return Err(ConfigError::new(
                "quota.store",
                format!("{url:?}"),
                "a redis://host:port/db or rediss://host:port/db URL",
            ));
        }
    }
    if cfg.store.is_none() && cfg.store_password_file.is_some() {
        return Err(ConfigError::new(
            "quota.store_password_file",
            "set without quota.store",
            "a password file only together with a store",
        ));
    }
    Ok(())
}

impl QuotaBook {
    /// The buckets a fleet shares, in a fixed order (configured customers in configuration
    /// order, then the default slot; criticalities from lowest to highest).
    pub fn shared_buckets(&self) -> Vec<SharedBucket<'_>> {
        let configured = self.slots.len().saturating_sub(1);
        let mut out = Vec::new();
        for (i, slot) in self.slots.iter().enumerate() {
            for c in Criticality::ALL {
                let b = &slot.buckets[c.index()];
                if b.global >= 0.0 {
                    out.push(SharedBucket {
                        customer: (i < configured).then_some(&*slot.name),
                        criticality: c,
                        global: b.global,
                        rate: 1e9 / b.ns_per_unit(),
                        index: i * Criticality::COUNT + c.index(),
                    });
                }
            }
        }
        out
    }

    /// Cost units offered to the shared bucket `index` since the book was built, admitted or
    /// refused (0 for an index that is not a shared bucket). Monotonic.
    pub fn offered(&self, index: usize) -> f64 {
        match self.shared(index) {
            Some(b) => b.offered.load(Ordering::Relaxed) as f64 / 1e6,
            None => 0.0,
        }
    }

    /// Requests offered to the shared bucket `index` since the book was built, admitted or
    /// refused (0 for an index that is not a shared bucket). Monotonic.
    pub fn arrivals(&self, index: usize) -> u64 {
        self.shared(index)
            .map_or(0, |b| b.arrivals.load(Ordering::Relaxed))
    }

    /// The instant the book counts from: its counts of offered cost and arrivals start here.
    pub fn origin(&self) -> std::time::Instant {
        self.origin
    }

    /// Re-rates the shared bucket `index` to `per_sec` cost units per second (this instance's
    /// share; at least a millionth). Keeps the bucket's fill fraction (see the module docs).
    /// Returns false, changing nothing, for an index that is not a shared bucket.
    pub fn set_rate(&self, index: usize, per_sec: f64) -> bool {
        let Some(b) = self.shared(index) else {
            return false;
        };
        let rate = if per_sec.is_finite() {
            per_sec.max(MIN_RATE)
        } else if per_sec > 0.0 {
            b.global.max(MIN_RATE) // +inf: the whole quota
        } else {
            MIN_RATE
        };
        b.ns_per_unit
            .store((1e9 / rate).to_bits(), Ordering::Relaxed);
        true
    }

    /// The static per-task rate of the shared bucket `index` (`global / tasks`): the fallback
    /// when no share can be had.
    pub fn static_rate(&self, index: usize) -> Option<f64> {
        self.shared(index).map(|b| b.global / f64::from(self.tasks))
    }

    fn shared(&self, index: usize) -> Option<&super::Bucket> {
        let slot = self.slots.get(index / Criticality::COUNT)?;
        let b = &slot.buckets[index % Criticality::COUNT];
        (b.global >= 0.0).then_some(b)
    }
}
