//! The concurrency limiter: hands out slots up to an adaptive limit, keeping headroom for the
//! more critical levels.
//!
//! Why it is shaped like this:
//!
//! - **Lock-free admit.** The in-flight count is an atomic taken with a compare-and-swap, and the
//!   current limit is mirrored in an atomic, so admitting costs a few atomic operations and no
//!   lock. The [`Limit`] algorithm (Netflix concurrency-limits style) sits behind a mutex that is
//!   only taken on release, to feed it one [`Sample`] and re-read the limit.
//! - **Headroom.** Lower criticality may not take the last share of the limit: a request of
//!   level `c` is admitted only while `in_flight < allowed(c) = max(1, ⌊limit · fraction(c)⌋)`
//!   (and `0` when the limit is 0). With the default fractions (SHEDDABLE 0.8, SHEDDABLE_PLUS 0.9,
//!   CRITICAL 0.95, CRITICAL_PLUS 1.0 — the same ladder as the shed thresholds of the SRE book's
//!   criticality scheme, ch. 21) a burst of sheddable traffic can never fill the task, and 5% of
//!   it is kept for CRITICAL_PLUS. The `max(1, …)` keeps every level able to run one request
//!   when the limit is at least 1, so no level starves outright on a tiny limit.
//! - **No slot held back beyond the fractions.** At small limits the fractions leave the
//!   higher levels little (at 5: 4 / 4 / 4 / 5), and the ladder used to lower each level to one
//!   slot below the level above it (3 / 3 / 4 / 5) so that a CRITICAL arrival never found a
//!   limiter full of sheddable work. Now the queue serves CRITICAL first and lets it wait for
//!   its deadline, so such an arrival waits one slot's turnover; and once the limit holds to
//!   what the upstream can run (the Envoy gradient's `knee_cap`, at 4 for 4 workers) the
//!   reserve idled a quarter to a half of the workers: SHEDDABLE 2 of 4 slots, its queue
//!   refused at 0.9 × capacity (issue 28's sweep, `c=4 mean=10ms exp 20x 0.9x crit=0.6`:
//!   −23.55 pp against the unprotected service; `bench/results/knee-ladder-issue28.md`). Each
//!   level's allowance is its own share, capped by the level above ([`allowed_ladder`]).
//!
//! [`Limiter::try_acquire`] / [`Limiter::release`] are the raw operations the admission
//! controller uses; [`Limiter::acquire`] wraps them in an RAII [`LimiterPermit`] for direct use.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::criticality::{Criticality, PerCriticality};
use crate::error::ConfigError;
use crate::limit::{Limit, Sample};
use crate::queue::SlotSource;

/// Default share of the limit each level may fill: SHEDDABLE 0.8, SHEDDABLE_PLUS 0.9,
/// CRITICAL 0.95, CRITICAL_PLUS 1.0 (see the module docs).
pub const DEFAULT_HEADROOM: PerCriticality<f64> = PerCriticality([0.8, 0.9, 0.95, 1.0]);

const HEADROOM_FIELDS: [&str; Criticality::COUNT] = [
    "headroom.sheddable",
    "headroom.sheddable_plus",
    "headroom.critical",
    "headroom.critical_plus",
];

/// Checks headroom fractions: each in `(0, 1]`, non-decreasing with criticality.
pub fn validate_headroom(headroom: &PerCriticality<f64>) -> Result<(), ConfigError> {
    let mut previous = 0.0;
    for c in Criticality::ALL {
        let f = headroom[c];
        let field = HEADROOM_FIELDS[c.index()];
        if !(f.is_finite() && f > 0.0 && f <= 1.0) {
            return Err(ConfigError::new(
                field,
                f,
                "a fraction of the limit in (0, 1]",
            ));
        }
        if f < previous {
            return Err(ConfigError::new(
                field,
                f,
                "a fraction >= the one of every lower criticality (higher levels get at least as much)",
            ));
        }
        previous = f;
    }
    Ok(())
}

/// How many requests in flight a level with share `fraction` may start below, at `limit`.
#[inline]
pub fn allowed_for(limit: usize, fraction: f64) -> usize {
    if limit == 0 {
        return 0;
    }
    // f64 → usize `as` saturates and maps NaN to 0; `max(1)` keeps one slot per level.
    ((limit as f64 * fraction) as usize).clamp(1, limit)
}

/// How many requests in flight each level may start below, at `limit`, given the per-level
/// `headroom` fractions (indexed by [`Criticality::index`]): each level's [`allowed_for`]
/// share, capped by the level above's (module docs), so non-decreasing with criticality.
pub fn allowed_ladder(
    limit: usize,
    headroom: &[f64; Criticality::COUNT],
) -> [usize; Criticality::COUNT] {
    let mut out = [0; Criticality::COUNT];
    if limit == 0 {
        return out;
    }
    let top = Criticality::COUNT - 1;
    out[top] = allowed_for(limit, headroom[top]);
    for i in (0..top).rev() {
        out[i] = allowed_for(limit, headroom[i]).min(out[i + 1]);
    }
    out
}

/// Concurrency slots up to an adaptive limit.
///
/// Fields in declaration order (`repr(C)`), those every acquire and release touches first, in
/// two cache lines (see the admission controller's layout note).
#[repr(C)]
pub struct Limiter {
    limit: AtomicUsize,
    in_flight: AtomicUsize,
    /// `allowed_ladder(limit)`, recomputed only when the limit changes (under the algorithm's
    /// lock) so that admission reads one atomic instead of redoing the ladder's arithmetic.
    allowed: [AtomicUsize; Criticality::COUNT],
    by_criticality: [AtomicUsize; Criticality::COUNT],
    /// [`Limit::probing`], mirrored after every sample as the limit is.
    probing: AtomicBool,
    algorithm: Mutex<Box<dyn Limit>>,
    /// Where the algorithm's state lives (its box never moves), for prefetch hints: an
    /// address, never dereferenced.
    #[cfg_attr(not(feature = "hints"), allow(dead_code))]
    algorithm_at: usize,
    headroom: [f64; Criticality::COUNT],
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field(
                "algorithm",
                // Never blocks: formatting while the algorithm runs must not deadlock.
                &self.algorithm.try_lock().map_or("(busy)", |g| g.name()),
            )
            .field("limit", &self.limit())
            .field("in_flight", &self.in_flight())
            .field("headroom", &self.headroom)
            .finish()
    }
}

impl Limiter {
    /// A limiter driven by `algorithm`, with per-level `headroom` fractions.
    pub fn new(
        mut algorithm: Box<dyn Limit>,
        headroom: PerCriticality<f64>,
    ) -> Result<Self, ConfigError> {
        validate_headroom(&headroom)?;
        algorithm.set_lowest_share(headroom.0[0]);
        let ladder = allowed_ladder(algorithm.limit(), &headroom.0);
        // The data pointer of the boxed algorithm (a thin cast of the fat pointer).
        let algorithm_at = &*algorithm as *const dyn Limit as *const u8 as usize;
        Ok(Limiter {
            algorithm_at,
            limit: AtomicUsize::new(algorithm.limit()),
            allowed: ladder.map(AtomicUsize::new),
            in_flight: AtomicUsize::new(0),
            by_criticality: std::array::from_fn(|_| AtomicUsize::new(0)),
            probing: AtomicBool::new(algorithm.probing()),
            headroom: headroom.0,
            algorithm: Mutex::new(algorithm),
        })
    }

    /// The address of the algorithm's state, for prefetch hints.
    #[cfg(feature = "hints")]
    #[inline]
    pub(crate) fn algorithm_addr(&self) -> *const u8 {
        self.algorithm_at as *const u8
    }

    /// The algorithm's name (`"gradient2"`, …).
    pub fn algorithm_name(&self) -> &'static str {
        // Read under the algorithm's lock (snapshots only): the limiter's own fields sit on
        // the controller's hot cache lines.
        match self.algorithm.lock() {
            Ok(g) => g.name(),
            Err(poisoned) => poisoned.into_inner().name(),
        }
    }

    /// The current limit.
    #[inline]
    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Acquire)
    }

    /// Requests holding a slot.
    #[inline]
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Whether the algorithm's limit is still growing from a start that knew nothing of the
    /// upstream ([`Limit::probing`]).
    #[inline]
    pub fn probing(&self) -> bool {
        self.probing.load(Ordering::Relaxed)
    }

    /// Requests of level `c` holding a slot.
    pub fn in_flight_of(&self, c: Criticality) -> usize {
        self.by_criticality[c.index()].load(Ordering::Relaxed)
    }

    /// In-flight count below which level `c` may start a request, at the current limit.
    #[inline]
    pub fn allowed(&self, c: Criticality) -> usize {
        self.allowed[c.index()].load(Ordering::Acquire)
    }

    /// Whether every slot of the limit is taken (nothing at all could be admitted).
    #[inline]
    pub fn is_full(&self) -> bool {
        self.in_flight() >= self.limit()
    }

    /// Takes a slot for level `c` if the in-flight count is below `allowed(c)`; returns the
    /// in-flight count including this request (what [`Sample::in_flight`] reports).
    /// Lock-free: one compare-and-swap loop.
    #[inline]
    pub fn try_acquire(&self, c: Criticality) -> Option<usize> {
        let allowed = self.allowed(c);
        let mut current = self.in_flight.load(Ordering::SeqCst);
        loop {
            if current >= allowed {
                return None;
            }
            match self.in_flight.compare_exchange_weak(
                current,
                current + 1,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => {
                    self.by_criticality[c.index()].fetch_add(1, Ordering::Relaxed);
                    return Some(current + 1);
                }
                Err(actual) => current = actual,
            }
        }
    }

    /// Returns a slot taken by [`try_acquire`](Self::try_acquire) for level `c`, first feeding
    /// `sample` (if any) to the algorithm and mirroring the new limit.
    pub fn release(&self, c: Criticality, sample: Option<&Sample>) {
        self.release_with_budget(c, sample, None);
    }

    /// [`release`](Self::release), telling the algorithm the callers' latency `budget` with
    /// the sample ([`Limit::set_latency_budget`]).
    pub fn release_with_budget(
        &self,
        c: Criticality,
        sample: Option<&Sample>,
        budget: Option<Duration>,
    ) {
        self.release_fed(c, sample, false, budget, None);
    }

    /// Releases a slot whose caller gave up while it ran ([`crate::controller::Outcome::Abandoned`]):
    /// its latency goes to [`Limit::on_abandoned`] as a lower bound, not as a sample.
    pub fn release_abandoned(&self, c: Criticality, sample: &Sample, budget: Option<Duration>) {
        self.release_fed(c, Some(sample), true, budget, None);
    }

    /// The admission controller's release: as [`release_with_budget`](Self::release_with_budget)
    /// or, for a request whose caller left, [`release_abandoned`](Self::release_abandoned),
    /// telling the algorithm under the same lock whether some level's overload is sustained
    /// ([`Limit::set_overloaded`]).
    pub(crate) fn release_from_controller(
        &self,
        c: Criticality,
        sample: Option<&Sample>,
        abandoned: bool,
        budget: Option<Duration>,
        overloaded: bool,
    ) {
        self.release_fed(c, sample, abandoned, budget, Some(overloaded));
    }

    /// Feeds `sample` (if any; to [`Limit::on_abandoned`] when `abandoned`), then returns the slot.
    fn release_fed(
        &self,
        c: Criticality,
        sample: Option<&Sample>,
        abandoned: bool,
        budget: Option<Duration>,
        overloaded: Option<bool>,
    ) {
        match sample {
            Some(s) if abandoned => self.feed(budget, overloaded, |algo| algo.on_abandoned(s)),
            Some(s) => self.feed(budget, overloaded, |algo| algo.on_sample(s)),
            None => {}
        }
        self.by_criticality[c.index()].fetch_sub(1, Ordering::Relaxed);
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }

    /// Feeds one sample to the algorithm and mirrors its limit (the only lock in the limiter).
    pub fn record(&self, sample: &Sample) {
        self.record_with_budget(sample, None);
    }

    /// [`record`](Self::record), first telling the algorithm the callers' latency `budget`
    /// ([`Limit::set_latency_budget`]).
    pub fn record_with_budget(&self, sample: &Sample, budget: Option<Duration>) {
        self.feed(budget, None, |algo| algo.on_sample(sample));
    }

    /// Runs `f` on the algorithm under its lock (first telling it the callers' budget and the
    /// overload, where known), then mirrors its limit into the atomics.
    fn feed(
        &self,
        budget: Option<Duration>,
        overloaded: Option<bool>,
        f: impl FnOnce(&mut dyn Limit),
    ) {
        // A panic inside an algorithm poisons the mutex; the algorithm state is still the best
        // estimate there is, so keep using it rather than failing every later release.
        let mut algo = match self.algorithm.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(b) = budget {
            algo.set_latency_budget(b);
        }
        if let Some(o) = overloaded {
            algo.set_overloaded(o);
        }
        f(&mut **algo);
        let probing = algo.probing();
        if probing != self.probing.load(Ordering::Relaxed) {
            self.probing.store(probing, Ordering::Relaxed);
        }
        let limit = algo.limit();
        if limit != self.limit.load(Ordering::Relaxed) {
            // Still under the lock: writers are serialised, so the ladder matches the limit.
            for (slot, allowed) in self
                .allowed
                .iter()
                .zip(allowed_ladder(limit, &self.headroom))
            {
                slot.store(allowed, Ordering::Release);
            }
            self.limit.store(limit, Ordering::Release);
        }
    }

    /// Takes a slot for `c` as an RAII guard that returns it when dropped.
    pub fn acquire(&self, c: Criticality, now: Instant) -> Option<LimiterPermit<'_>> {
        let in_flight = self.try_acquire(c)?;
        Some(LimiterPermit {
            limiter: self,
            criticality: c,
            started: now,
            in_flight,
            sample: None,
        })
    }
}

impl SlotSource for Limiter {
    fn has_slot(&self, c: Criticality) -> bool {
        self.in_flight() < self.allowed(c)
    }

    fn take_slot(&self, c: Criticality) -> bool {
        self.try_acquire(c).is_some()
    }
}

/// A slot held from a [`Limiter`]; returned on drop.
///
/// Without [`finish`](Self::finish) the slot is returned with no sample (the algorithm learns
/// nothing from an abandoned request).
#[derive(Debug)]
#[must_use = "dropping the permit returns the slot at once"]
pub struct LimiterPermit<'a> {
    limiter: &'a Limiter,
    criticality: Criticality,
    started: Instant,
    in_flight: usize,
    sample: Option<Sample>,
}

impl LimiterPermit<'_> {
    /// The in-flight count when this slot was taken (including it).
    pub fn in_flight_at_start(&self) -> usize {
        self.in_flight
    }

    /// Completes the request at `now`; `dropped` marks a timeout or downstream overload (a
    /// congestion signal to the algorithm).
    pub fn finish(mut self, now: Instant, dropped: bool) {
        self.sample = Some(Sample {
            rtt: now.saturating_duration_since(self.started),
            in_flight: self.in_flight,
            dropped,
            now,
        });
    }

    /// Time since the slot was taken.
    pub fn elapsed(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.started)
    }
}

impl Drop for LimiterPermit<'_> {
    fn drop(&mut self) {
        self.limiter.release(self.criticality, self.sample.as_ref());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::{FixedConfig, LimitConfig};

    fn fixed(limit: usize) -> Limiter {
        let cfg = LimitConfig::Fixed(FixedConfig { limit });
        Limiter::new(cfg.build(Instant::now()), DEFAULT_HEADROOM).expect("valid")
    }

    #[test]
    fn allowed_keeps_one_slot_per_level() {
        assert_eq!(allowed_for(0, 1.0), 0);
        assert_eq!(allowed_for(1, 0.8), 1);
        assert_eq!(allowed_for(10, 0.8), 8);
        assert_eq!(allowed_for(10, 0.95), 9);
        assert_eq!(allowed_for(10, 1.0), 10);
        assert_eq!(allowed_for(usize::MAX, 1.0), usize::MAX);
        assert_eq!(allowed_for(5, f64::NAN), 1);
    }

    #[test]
    fn ladder_is_each_levels_share_capped_by_the_level_above() {
        let h = DEFAULT_HEADROOM.0;
        // At a limit of 4 (a 4-worker upstream's knee) SHEDDABLE may use 3, not 2.
        assert_eq!(allowed_ladder(4, &h), [3, 3, 3, 4]);
        assert_eq!(allowed_ladder(5, &h), [4, 4, 4, 5]);
        assert_eq!(allowed_ladder(10, &h), [8, 9, 9, 10]);
        assert_eq!(allowed_ladder(20, &h), [16, 18, 19, 20]);
        assert_eq!(allowed_ladder(100, &h), [80, 90, 95, 100]);
        assert_eq!(allowed_ladder(1, &h), [1, 1, 1, 1]);
        assert_eq!(allowed_ladder(0, &h), [0, 0, 0, 0]);
        // Fractions that fall with criticality (not valid headroom) are capped from above.
        assert_eq!(allowed_ladder(10, &[1.0, 0.5, 1.0, 1.0]), [5, 5, 10, 10]);
        for limit in 0..300 {
            let a = allowed_ladder(limit, &h);
            assert!(a.windows(2).all(|w| w[0] <= w[1]), "{limit}: {a:?}");
            for (i, &x) in a.iter().enumerate() {
                assert_eq!(x, allowed_for(limit, h[i]), "{limit}: its own share");
            }
        }
    }

    #[test]
    fn headroom_refuses_sheddable_before_critical() {
        // At a limit of 20 the shares are SHEDDABLE 16, SHEDDABLE_PLUS 18, CRITICAL 19,
        // CRITICAL_PLUS 20.
        let l = fixed(20);
        let permits: Vec<_> = (0..16)
            .map(|_| l.try_acquire(Criticality::Sheddable).expect("below 16"))
            .collect();
        assert_eq!(permits.len(), 16);
        assert_eq!(l.try_acquire(Criticality::Sheddable), None);
        assert_eq!(l.try_acquire(Criticality::SheddablePlus), Some(17));
        assert_eq!(l.try_acquire(Criticality::SheddablePlus), Some(18));
        assert_eq!(l.try_acquire(Criticality::SheddablePlus), None);
        assert_eq!(l.try_acquire(Criticality::Critical), Some(19));
        assert_eq!(
            l.try_acquire(Criticality::Critical),
            None,
            "critical stops at 19"
        );
        assert_eq!(l.try_acquire(Criticality::CriticalPlus), Some(20));
        assert!(l.is_full());
        assert_eq!(l.try_acquire(Criticality::CriticalPlus), None);
        assert_eq!(l.in_flight_of(Criticality::Sheddable), 16);
        for _ in 0..16 {
            l.release(Criticality::Sheddable, None);
        }
        for _ in 0..2 {
            l.release(Criticality::SheddablePlus, None);
        }
        l.release(Criticality::Critical, None);
        l.release(Criticality::CriticalPlus, None);
        assert_eq!(l.in_flight(), 0);
    }

    #[test]
    fn raii_permit_returns_its_slot() {
        let l = fixed(1);
        let now = Instant::now();
        let p = l.acquire(Criticality::Sheddable, now).expect("one slot");
        assert_eq!(p.in_flight_at_start(), 1);
        assert!(l.acquire(Criticality::CriticalPlus, now).is_none());
        p.finish(now + Duration::from_millis(3), false);
        assert_eq!(l.in_flight(), 0);
        assert!(l.acquire(Criticality::Critical, now).is_some());
        assert_eq!(l.in_flight(), 0);
    }

    #[test]
    fn headroom_validation_names_the_field() {
        let mut h = DEFAULT_HEADROOM;
        h[Criticality::Critical] = 0.5;
        let e = validate_headroom(&h).unwrap_err();
        assert_eq!(e.field, "headroom.critical");
        h[Criticality::Critical] = 1.5;
        assert_eq!(
            validate_headroom(&h).unwrap_err().field,
            "headroom.critical"
        );
        h = DEFAULT_HEADROOM;
        h[Criticality::Sheddable] = 0.0;
        assert_eq!(
            validate_headroom(&h).unwrap_err().field,
            "headroom.sheddable"
        );
        assert!(validate_headroom(&DEFAULT_HEADROOM).is_ok());
    }
}
