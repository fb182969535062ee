//! The retry gates: when a failed attempt may be tried again, and when the failure must go up.
//!
//! Why: retries are the most dangerous positive feedback under overload — three attempts per layer
//! stacked three layers deep send the bottom layer 3³ = 27× the traffic (SRE book ch. 21,
//! "Handling Overload Errors"). A retry is allowed only through every gate, checked in this order
//! (cheap and non-consuming first, the budget — which spends — last):
//!
//! 1. [`RetryGate::NotRetryable`]: only overload refusals and connection failures are worth
//!    another attempt; anything else would fail the same way again.
//! 2. [`RetryGate::DontRetry`]: the backend (or a layer below it) said "overloaded; don't retry".
//!    Honouring it is what stops the 27× multiplication: only the layer right above the failure
//!    retries.
//! 3. [`RetryGate::AttemptLimit`]: at most `max_attempts` attempts per request, *counting those the
//!    request carried in* from upstream (default 3 — SRE ch. 21: "about three").
//! 4. [`RetryGate::Widespread`]: most of the distinct tasks recently tried refused — the overload
//!    is not local, and a retry would only move it (see [`RetryPolicy::recent_tasks`]).
//! 5. [`RetryGate::Budget`]: retries ≤ 10 % of requests over a sliding window, plus a small floor
//!    (see [`RetryBudget`]).
//!
//! Defaults and why: window 10 s in 10 buckets — short, so a burst of failures can only spend the
//! retries earned by the last few seconds of healthy traffic (a 120 s window at 100 requests/s
//! would bank 1 200 retries to spend at once), and Finagle's retry budget uses the same 10 s;
//! floor 1 retry/s (10 per window): enough for a quiet client to retry the odd failure, negligible
//! against the 10 % once a client sends more than ~10 requests/s; ring of the last 8 attempts,
//! widespread when ≥ 50 % of at least 2 distinct tasks refused: "half of what we can see is
//! refusing" is no longer "a few tasks" — and moving a refusing task's load onto its one healthy
//! neighbour is how overload cascades.

use std::fmt;
use std::time::{Duration, Instant};

use crate::error::{check_range, ConfigError};
use crate::window::MAX_BUCKETS;

mod budget;
mod widespread;

#[cfg(test)]
mod tests;

pub use budget::RetryBudget;
use widespread::OutcomeRing;
pub use widespread::{RecentTasks, MAX_RING};

/// Settings of a [`RetryPolicy`] (one per client, shared by all its requests).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct RetryConfig {
    /// Attempts per request in total, the first included; 1 disables retries. Default 3
    /// (SRE ch. 21). Accepted: `1..=100`.
    pub max_attempts: u32,
    /// Retries allowed per original request over the window. Default 0.1 (SRE ch. 21, "10
    /// percent"). Accepted: `0..=1`.
    pub budget_ratio: f64,
    /// Retries per second always allowed on top of the ratio, so a quiet client can retry.
    /// Default 1.0. Accepted: finite, `>= 0`.
    pub min_retries_per_sec: f64,
    /// The budget's sliding window. Default 10 s. Accepted: `> 0` and `<= 1 h`. Serialized as
    /// seconds.
    #[cfg_attr(feature = "serde", serde(with = "crate::window::serde_secs"))]
    pub window: Duration,
    /// Buckets the window is kept in. Default 10 (1 s each). Accepted: `1..=3600`.
    pub buckets: usize,
    /// How many recent attempt outcomes the widespread-overload check looks at. Default 8.
    /// Accepted: `1..=64`.
    pub widespread_ring: usize,
    /// Distinct tasks the ring must show before an overload can be judged widespread. Default 2.
    /// Accepted: `1..=widespread_ring`.
    pub widespread_min_tasks: usize,
    /// Fraction of those distinct tasks that must have refused. Default 0.5. Accepted: `(0, 1]`.
    pub widespread_fraction: f64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_attempts: 3,
            budget_ratio: 0.1,
            min_retries_per_sec: 1.0,
            window: Duration::from_secs(10),
            buckets: 10,
            widespread_ring: 8,
            widespread_min_tasks: 2,
            widespread_fraction: 0.5,
        }
    }
}

impl RetryConfig {
    /// Checks every field; the error names the first one that is out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=100).contains(&self.max_attempts) {
            return Err(ConfigError::new(
                "retry.max_attempts",
                self.max_attempts,
                "an integer in 1..=100 (default 3; 1 disables retries)",
            ));
        }
        check_range(
            "retry.budget_ratio",
            self.budget_ratio,
            0.0,
            1.0,
            "a number in 0..=1 (default 0.1)",
        )?;
        check_range(
            "retry.min_retries_per_sec",
            self.min_retries_per_sec,
            0.0,
            f64::MAX,
            "a finite number >= 0 (default 1)",
        )?;
        if self.window.is_zero() || self.window > Duration::from_secs(3600) {
            return Err(ConfigError::new(
                "retry.window",
                format_args!("{:?}", self.window),
                "a duration > 0 and <= 1 h (default 10 s)",
            ));
        }
        if self.buckets == 0 || self.buckets > MAX_BUCKETS {
            return Err(ConfigError::new(
                "retry.buckets",
                self.buckets,
                "an integer in 1..=3600 (default 10)",
            ));
        }
        if self.window < Duration::from_nanos(self.buckets as u64) {
            return Err(ConfigError::new(
                "retry.window",
                format_args!("{:?}", self.window),
                "a duration of at least 1 ns per bucket",
            ));
        }
        if self.widespread_ring == 0 || self.widespread_ring > MAX_RING {
            return Err(ConfigError::new(
                "retry.widespread_ring",
                self.widespread_ring,
                "an integer in 1..=64 (default 8)",
            ));
        }
        if self.widespread_min_tasks == 0 || self.widespread_min_tasks > self.widespread_ring {
            return Err(ConfigError::new(
                "retry.widespread_min_tasks",
                self.widespread_min_tasks,
                "an integer in 1..=retry.widespread_ring (default 2)",
            ));
        }
        if !(self.widespread_fraction > 0.0 && self.widespread_fraction <= 1.0) {
            return Err(ConfigError::new(
                "retry.widespread_fraction",
                self.widespread_fraction,
                "a number in (0, 1] (default 0.5)",
            ));
        }
        Ok(())
    }
}

/// What the caller knows about a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    /// Attempts made for this request so far, including the one that just failed and any the
    /// request carried in from upstream (its attempt header). 0 is read as 1.
    pub attempts_made: u32,
    /// The failure carried an explicit "overloaded; don't retry" marker.
    pub dont_retry: bool,
    /// The failure is of a kind a retry can fix: an overload refusal or a connection failure.
    pub retryable: bool,
}

impl Failure {
    /// An overload refusal (retryable, no "don't retry" marker) after `attempts_made` attempts.
    pub fn overloaded(attempts_made: u32) -> Self {
        Failure {
            attempts_made,
            dont_retry: false,
            retryable: true,
        }
    }

    /// An overload refusal marked "don't retry".
    pub fn overloaded_dont_retry(attempts_made: u32) -> Self {
        Failure {
            attempts_made,
            dont_retry: true,
            retryable: true,
        }
    }

    /// A failure no retry can fix (e.g. a bad request).
    pub fn not_retryable(attempts_made: u32) -> Self {
        Failure {
            attempts_made,
            dont_retry: false,
            retryable: false,
        }
    }
}

/// The gate that refused a retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum RetryGate {
    /// The failure is not one a retry can fix.
    NotRetryable,
    /// The failure was marked "overloaded; don't retry".
    DontRetry,
    /// The request has used all its attempts.
    AttemptLimit,
    /// The client's retry budget is spent.
    Budget,
    /// Most recently tried tasks are refusing: the overload is widespread.
    Widespread,
}

impl RetryGate {
    /// Every gate, in the order [`RetryPolicy::decide`] checks them.
    pub const ALL: [RetryGate; 5] = [
        RetryGate::NotRetryable,
        RetryGate::DontRetry,
        RetryGate::AttemptLimit,
        RetryGate::Widespread,
        RetryGate::Budget,
    ];

    /// The gate's snake_case name, for metric labels and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            RetryGate::NotRetryable => "not_retryable",
            RetryGate::DontRetry => "dont_retry",
            RetryGate::AttemptLimit => "attempt_limit",
            RetryGate::Budget => "budget",
            RetryGate::Widespread => "widespread",
        }
    }
}

impl fmt::Display for RetryGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The answer to "may this failed request be tried again?".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// Retry (on another task if possible). The retry has already been charged to the budget.
    Retry,
    /// Do not retry; pass the failure up (marked "don't retry"), naming the gate that refused.
    GiveUp(RetryGate),
}

impl RetryDecision {
    /// Whether the decision is to retry.
    pub fn is_retry(self) -> bool {
        matches!(self, RetryDecision::Retry)
    }
}

/// The three retry gates of SRE ch. 21 plus the local-vs-widespread judgement, for one client.
/// `Send + Sync`, lock-free; share it by `Arc` across all of the client's requests.
///
/// Use: [`record_request`](Self::record_request) for each original request;
/// [`record_outcome`](Self::record_outcome) for every attempt once its answer is known (including
/// the one that just failed, *before* deciding); [`decide`](Self::decide) on each failure.
#[derive(Debug)]
pub struct RetryPolicy {
    max_attempts: u32,
    budget: RetryBudget,
    ring: OutcomeRing,
}

impl RetryPolicy {
    /// A policy with time measured from `origin`.
    pub fn new(cfg: RetryConfig, origin: Instant) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(RetryPolicy {
            max_attempts: cfg.max_attempts,
            budget: RetryBudget::new(&cfg, origin),
            ring: OutcomeRing::new(
                cfg.widespread_ring,
                cfg.widespread_min_tasks,
                cfg.widespread_fraction,
            ),
        })
    }

    /// Counts one original request (its first attempt) towards the retry budget.
    pub fn record_request(&self, now: Instant) {
        self.budget.record_request(now);
    }

    /// Records the outcome of one attempt sent to `task` (any stable id of the backend task, e.g.
    /// a hash of its address): `refused_for_overload` if it answered with an overload refusal.
    /// `now` is accepted for symmetry and future use; the ring keeps order, not time.
    pub fn record_outcome(&self, _now: Instant, task: u64, refused_for_overload: bool) {
        self.ring.record(task, refused_for_overload);
    }

    /// Decides whether `failure` may be retried at `now`. A [`RetryDecision::Retry`] has been
    /// charged to the budget already; the caller must then send the retry.
    pub fn decide(&self, now: Instant, failure: &Failure) -> RetryDecision {
        if !failure.retryable {
            return RetryDecision::GiveUp(RetryGate::NotRetryable);
        }
        if failure.dont_retry {
            return RetryDecision::GiveUp(RetryGate::DontRetry);
        }
        if failure.attempts_made.max(1) >= self.max_attempts {
            return RetryDecision::GiveUp(RetryGate::AttemptLimit);
        }
        if self.ring.is_widespread() {
            return RetryDecision::GiveUp(RetryGate::Widespread);
        }
        if !self.budget.try_spend(now) {
            return RetryDecision::GiveUp(RetryGate::Budget);
        }
        RetryDecision::Retry
    }

    /// Passes `f` the addresses of what recording a request or an outcome at `now` writes
    /// behind this policy: the budget's current request bucket and the outcome ring (read from
    /// the policy, which should be in cache by then; see `crate::hint`, cargo feature `hints`).
    #[cfg(feature = "hints")]
    pub fn hot_pointees(&self, now: Instant, mut f: impl FnMut(*const u8)) {
        f(self.budget.requests_bucket_addr(now));
        f(self.ring.slots_addr());
    }

    /// The retry budget, for metrics and tests.
    pub fn budget(&self) -> &RetryBudget {
        &self.budget
    }

    /// Distinct tasks among the recent attempts and how many of them refused their latest one.
    pub fn recent_tasks(&self) -> RecentTasks {
        self.ring.recent()
    }

    /// Whether the recent attempts look like a widespread overload right now.
    pub fn is_widespread(&self) -> bool {
        self.ring.is_widespread()
    }

    /// Attempts per request in total, as configured.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }
}
