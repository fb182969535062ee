//! Client-side adaptive throttling: a client stops sending what the backend would refuse anyway.
//!
//! Why: a rejection is cheap but not free, and a backend that spends its CPU refusing a flood of
//! requests stays overloaded (SRE book ch. 21, "Client-side throttling"). So each client keeps,
//! per backend, two counts over a sliding window — `requests` it tried to send and `accepts` the
//! backend took — and refuses new requests locally, before they reach the network, with
//!
//! ```text
//! P(reject) = max(0, (requests − K · accepts) / (requests + 1))
//! ```
//!
//! The two details that make it work, both from the chapter, are kept exactly:
//! - a request this throttle refuses still counts in `requests`, so the client cannot talk itself
//!   into believing the pressure has gone;
//! - `P` never reaches 1 (`requests / (requests + 1) < 1`; clamped as well, because in `f64` that
//!   ratio rounds to 1 for huge counts): a trickle always leaks through to detect recovery, and
//!   the throttle releases itself as `accepts` climbs back.
//!
//! Defaults and their sources: window 120 s ("the last two minutes", SRE ch. 21), in 120 buckets
//! of 1 s; K = 2 (SRE ch. 21: "K = 2 … allows twice as many requests as the backend is
//! accepting"; lower K is more aggressive). The optional minimum request rate is the
//! `rps_threshold` idea of Envoy's admission-control filter: a client that has sent too little
//! has too little history to judge (one refused first request gives `P = 1 / 2`). A cold
//! client's first burst still in flight is not such a case any more (below: outstanding
//! requests are left out). It is off by default, as the formula is specified; setting ~1
//! request/s is a sensible guard.
//!
//! **Unanswered is not refused.** A request sent is *outstanding* until its caller
//! [`settle`](AdaptiveThrottle::settle)s it (its answer, refusal, failure or timeout is known),
//! and outstanding requests are left out of `requests`: the formula compares requests the
//! backend has answered for with those it accepted, and a request still on its way has done
//! neither. Counted at once, every request in flight reads as a refusal, and a client whose
//! rate rises faster than answers come back throttles a healthy backend: a proxy starting in
//! front of a 1000-worker, 500 ms service at 1,800 requests/s had sent twice what had come
//! back within its first second, refused ~120 requests locally, and fed them to its
//! concurrency limit as failures, which halved it (issue 28's robustness matrix,
//! `w1000-500ms-exp-t5-0.9x-c0.6`). The SRE book's window of two minutes hides this at
//! steady state; a cold start, or a service slower than its rate's ramp, does not.
//!
//! **After a surge.** The window remembers a surge's requests long after the client stopped
//! sending them: after 5 s at 10× capacity, a client back at its usual rate is still refused
//! ~90% of that rate locally until the surge's seconds leave the window (`spillway demo`'s
//! throttling clients, 10 s window: "not recovered" 6 s after the surge while the server
//! answered everything sent). The formula's own idea is "send at most `K ×` what the backend
//! accepts"; so the probability is also computed with the client's *recent* requests (the
//! current and the previous bucket) against the window's accepts scaled to that span, and the
//! smaller of the two is used. While the client keeps asking for the same, both agree; when it
//! asks for more (a surge starting), the window's formula is the smaller and rules, as
//! specified; when it asks for less than `K ×` the rate the backend has been accepting, it is
//! not refused, whatever the window still holds. Throttled requests still count in both, and
//! the throttle never refuses more than the formula alone would.
//!
//! The hot path ([`AdaptiveThrottle::try_acquire`]) takes no lock and allocates nothing, and its
//! cost does not grow with the number of buckets: both counts are running totals
//! ([`Windowed`]), corrected once per bucket as it leaves the window, so a decision is a
//! few atomic loads, a draw only when `P > 0`, and one compare-exchange plus one atomic add
//! — and the outstanding count's add when a request is let through and subtraction when it
//! settles.
//! (Summing the 120 buckets of both counters on every decision was most of its cost.) Both
//! counts of a slice share one 8-byte word (960 bytes per throttle at the defaults, half of
//! what two words a slice took); each saturates at [`Windowed::MAX_SLICE_COUNT`] events per
//! slice.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use crate::error::{check_range, ConfigError};
use crate::random::{RandomSource, ThreadRandom};
use crate::window::{Windowed, MAX_BUCKETS};

#[cfg(test)]
mod tests;

/// Index of the requests count in the throttle's [`Windowed`].
const REQUESTS: usize = 0;
/// Index of the accepts count.
const ACCEPTS: usize = 1;

/// The largest probability the throttle ever reports: the greatest `f64` below 1.
pub const MAX_PROBABILITY: f64 = 1.0 - f64::EPSILON / 2.0;

/// Settings of one [`AdaptiveThrottle`] (one per backend a client talks to).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct ThrottleConfig {
    /// How far back requests and accepts are remembered. Default 120 s (SRE ch. 21, "the last two
    /// minutes"). Serialized as seconds.
    #[cfg_attr(feature = "serde", serde(with = "crate::window::serde_secs"))]
    pub window: Duration,
    /// How many buckets the window is kept in: old traffic is forgotten one bucket at a time.
    /// Memory grows with this (8 bytes per bucket); a decision's cost does not (running
    /// totals). Default 120 (1 s each). Accepted: `1..=3600`. A bucket counts at most
    /// 16,777,215 requests ([`Windowed::MAX_SLICE_COUNT`]; more are not counted), so keep
    /// `window / buckets` short enough for the request rate to one backend (at the default
    /// 1 s, 16.7 M requests/s).
    pub buckets: usize,
    /// The multiplier `K`: the client sends up to `K ×` what the backend accepts before throttling.
    /// Default 2 (SRE ch. 21). Accepted: finite, `> 0`; lower is more aggressive.
    pub k: f64,
    /// Below this many requests per second (averaged over the window) the throttle never refuses.
    /// Default 0 = off. Accepted: finite, `>= 0`.
    pub min_requests_per_sec: f64,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        ThrottleConfig {
            window: Duration::from_secs(120),
            buckets: 120,
            k: 2.0,
            min_requests_per_sec: 0.0,
        }
    }
}

impl ThrottleConfig {
    /// Checks every field; the error names the first one that is out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.window.is_zero() {
            return Err(ConfigError::new(
                "throttle.window",
                format_args!("{:?}", self.window),
                "a duration > 0 (default 120 s)",
            ));
        }
        if self.buckets == 0 || self.buckets > MAX_BUCKETS {
            return Err(ConfigError::new(
                "throttle.buckets",
                self.buckets,
                "an integer in 1..=3600 (default 120)",
            ));
        }
        if self.window < Duration::from_nanos(self.buckets as u64) {
            return Err(ConfigError::new(
                "throttle.window",
                format_args!("{:?}", self.window),
                "a duration of at least 1 ns per bucket",
            ));
        }
        if !(self.k.is_finite() && self.k > 0.0) {
            return Err(ConfigError::new(
                "throttle.k",
                self.k,
                "a finite number > 0 (default 2; lower throttles harder)",
            ));
        }
        check_range(
            "throttle.min_requests_per_sec",
            self.min_requests_per_sec,
            0.0,
            f64::MAX,
            "a finite number >= 0 (0 = off)",
        )
    }
}

/// The throttle refused a request locally; it was never sent.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error(
    "throttled locally: the backend is refusing requests (reject probability {probability:.3})"
)]
pub struct Throttled {
    /// The reject probability in force when the request was refused, in `[0, 1)`.
    pub probability: f64,
}

/// Adaptive client-side throttle for one backend (SRE ch. 21). `Send + Sync`; share it by `Arc`.
///
/// Use: call [`try_acquire`](Self::try_acquire) before sending; if it returns `Ok`, send, and
/// when the outcome is known call [`record_accept`](Self::record_accept) if the backend did not
/// refuse for overload (any answer but an overload refusal counts as accepted — even an
/// application error shows the backend is taking work), then [`settle`](Self::settle) whatever
/// the outcome (module docs: "Unanswered is not refused"). A request let through and never
/// settled stays outstanding, left out of the formula for good.
pub struct AdaptiveThrottle<R: RandomSource = ThreadRandom> {
    /// Count [`REQUESTS`] and count [`ACCEPTS`], over one window.
    counts: Windowed<2>,
    k: f64,
    /// `min_requests_per_sec × window` in requests: below it the throttle stays open.
    min_requests: f64,
    /// Requests let through by [`try_acquire`](Self::try_acquire) and not yet settled.
    outstanding: AtomicI64,
    rng: R,
}

impl AdaptiveThrottle<ThreadRandom> {
    /// A throttle with the thread-local random source; time is measured from `origin`.
    pub fn new(cfg: ThrottleConfig, origin: Instant) -> Result<Self, ConfigError> {
        Self::with_random(cfg, origin, ThreadRandom)
    }
}

impl<R: RandomSource> AdaptiveThrottle<R> {
    /// A throttle drawing its random numbers from `rng` (e.g. [`crate::SeededRandom`] in tests).
    pub fn with_random(cfg: ThrottleConfig, origin: Instant, rng: R) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(AdaptiveThrottle {
            counts: Windowed::new(cfg.window, cfg.buckets, origin),
            k: cfg.k,
            min_requests: cfg.min_requests_per_sec * cfg.window.as_secs_f64(),
            outstanding: AtomicI64::new(0),
            rng,
        })
    }

    /// `P(reject)` from given counts, with this throttle's `K` and minimum rate; in `[0, 1)`.
    pub fn probability_for(&self, requests: u64, accepts: u64) -> f64 {
        let req = requests as f64;
        if req < self.min_requests {
            return 0.0;
        }
        reject_probability(requests, accepts, self.k)
    }

    /// The probability that a request sent at `now` is refused locally, in `[0, 1)`: the
    /// formula over the window, or less once the client's recent requests are within `K ×`
    /// what the backend accepted per unit of time over the window (module docs, "After a
    /// surge").
    pub fn probability(&self, now: Instant) -> f64 {
        // Outstanding requests have been neither refused nor accepted (module docs): left out.
        // Most were sent recently, so they come out of the recent count as well.
        let outstanding = self.outstanding();
        let (requests, accepts) = self.counts(now);
        let p = self.probability_for(requests.saturating_sub(outstanding), accepts);
        if p == 0.0 {
            return 0.0;
        }
        let ([recent, _], span) = self.counts.recent(now);
        let window = self.counts.window().as_secs_f64();
        let share = span.as_secs_f64() / window;
        let recent = recent.saturating_sub(outstanding) as f64;
        // The window's accepts scaled to the recent span: the backend's accept rate.
        let now_p = (recent - self.k * accepts as f64 * share) / (recent + 1.0);
        if now_p < p {
            now_p.max(0.0)
        } else {
            p // also when `now_p` is NaN (a window of 0 s cannot be configured)
        }
    }

    /// Decides whether a request may be sent at `now`. Counts it as a request either way; one
    /// let through (`Ok`) is outstanding until [`settle`](Self::settle)d.
    pub fn try_acquire(&self, now: Instant) -> Result<(), Throttled> {
        // P is taken from the history *before* this request: counting it first would refuse a
        // brand-new client's first request half the time (1 / (1 + 1)).
        let probability = self.probability(now);
        self.counts.add(now, REQUESTS, 1);
        // No draw when P = 0: cheaper, and keeps injected sources in step with actual decisions.
        if probability > 0.0 && self.rng.uniform() < probability {
            Err(Throttled { probability })
        } else {
            self.outstanding.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
    }

    /// A request [`try_acquire`](Self::try_acquire) let through has its outcome: answered,
    /// refused, failed or timed out (an accept is recorded first, with
    /// [`record_accept`](Self::record_accept)). Call it once per request let through; from
    /// here on the request counts in the formula. A call too many is
    /// made good by the next request let through (the count never reads below zero).
    pub fn settle(&self) {
        // One atomic subtraction, no compare-exchange loop (two threads settling the same
        // throttle retried it); signed, so a stray call goes below zero, read as zero, and is
        // made good by the next request let through.
        self.outstanding.fetch_sub(1, Ordering::Relaxed);
    }

    /// Requests let through and not yet settled.
    pub fn outstanding(&self) -> u64 {
        u64::try_from(self.outstanding.load(Ordering::Relaxed)).unwrap_or(0)
    }

    /// The backend accepted a request sent earlier (anything but an overload refusal).
    pub fn record_accept(&self, now: Instant) {
        self.counts.add(now, ACCEPTS, 1);
    }

    /// `(requests, accepts)` over the window ending at `now`, outstanding requests included
    /// (the formula leaves them out: [`outstanding`](Self::outstanding)). O(1): running
    /// totals. Time is expected to move forward; a `now` behind the newest one seen reads the
    /// newest window (see [`Windowed`]).
    pub fn counts(&self, now: Instant) -> (u64, u64) {
        let [requests, accepts] = self.counts.sums(now);
        (requests, accepts)
    }

    /// Passes `f` the address of the bucket a decision at `now` writes (read from this
    /// throttle, which should be in cache by then; see `crate::hint`, cargo feature `hints`).
    #[cfg(feature = "hints")]
    pub fn hot_pointees(&self, now: Instant, mut f: impl FnMut(*const u8)) {
        f(self.counts.bucket_addr(now));
    }

    /// The multiplier `K` in force.
    pub fn k(&self) -> f64 {
        self.k
    }

    /// The injected random source.
    pub fn random(&self) -> &R {
        &self.rng
    }
}

impl<R: RandomSource> fmt::Debug for AdaptiveThrottle<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdaptiveThrottle")
            .field("window", &self.counts.window())
            .field("buckets", &self.counts.buckets())
            .field("k", &self.k)
            .field("min_requests", &self.min_requests)
            .field("outstanding", &self.outstanding())
            .finish_non_exhaustive()
    }
}

/// The SRE book's client-side throttling formula, `max(0, (requests − K·accepts) / (requests + 1))`,
/// clamped to `[0, `[`MAX_PROBABILITY`]`]` (and 0 for a `K` that is not a finite number > 0).
pub fn reject_probability(requests: u64, accepts: u64, k: f64) -> f64 {
    if !(k.is_finite() && k > 0.0) {
        return 0.0;
    }
    let req = requests as f64;
    let p = (req - k * accepts as f64) / (req + 1.0);
    if p > 0.0 {
        p.min(MAX_PROBABILITY)
    } else {
        0.0 // also maps a NaN to "no throttling"
    }
}
