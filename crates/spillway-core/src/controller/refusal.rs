//! Typed refusals, and the relaxed counters behind the status page.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::criticality::{Criticality, PerCriticality};

use super::episode::LevelCounts;

/// Why a request was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum RefusalReason {
    /// The customer is over its (global) quota for this criticality while the task is
    /// overloaded (SRE book ch. 21, "Per-customer limits").
    OverQuota,
    /// Shed on utilisation: this criticality is above its threshold (SRE book ch. 21).
    Shed,
    /// No concurrency slot for this criticality and no queue to wait in.
    ConcurrencyLimit,
    /// The queue is full (or this request was evicted by a more critical one).
    QueueFull,
    /// Waited in the queue too long (max wait, or CoDel's standing-delay control).
    QueueTimeout,
    /// The deadline passed, or could not be met given the expected service time.
    DeadlineExceeded,
    /// A retry beyond the configured attempts while the task is overloaded (SRE book ch. 21:
    /// retries amplify overload; at most 3 attempts per request).
    TooManyAttempts,
}

impl RefusalReason {
    /// Every reason, in declaration order (indexes the counters).
    pub const ALL: [RefusalReason; 7] = [
        RefusalReason::OverQuota,
        RefusalReason::Shed,
        RefusalReason::ConcurrencyLimit,
        RefusalReason::QueueFull,
        RefusalReason::QueueTimeout,
        RefusalReason::DeadlineExceeded,
        RefusalReason::TooManyAttempts,
    ];

    /// Number of reasons.
    pub const COUNT: usize = 7;

    /// snake_case name, for metric labels.
    pub const fn as_str(self) -> &'static str {
        match self {
            RefusalReason::OverQuota => "over_quota",
            RefusalReason::Shed => "shed",
            RefusalReason::ConcurrencyLimit => "concurrency_limit",
            RefusalReason::QueueFull => "queue_full",
            RefusalReason::QueueTimeout => "queue_timeout",
            RefusalReason::DeadlineExceeded => "deadline_exceeded",
            RefusalReason::TooManyAttempts => "too_many_attempts",
        }
    }

    /// Dense index `0..COUNT`.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Whether retrying on another task can help: yes when the refusal is about *this* task's
    /// overload (another task may have room); no when the customer is over its global share,
    /// the deadline is gone, or the request has used up its attempts.
    pub const fn retry_elsewhere_can_help(self) -> bool {
        matches!(
            self,
            RefusalReason::Shed
                | RefusalReason::ConcurrencyLimit
                | RefusalReason::QueueFull
                | RefusalReason::QueueTimeout
        )
    }

    /// The customer is over quota (HTTP 429 / gRPC RESOURCE_EXHAUSTED at the edge) rather than
    /// the task being overloaded (503 / UNAVAILABLE).
    pub const fn is_customer_over_quota(self) -> bool {
        matches!(self, RefusalReason::OverQuota)
    }

    /// Alias of [`is_customer_over_quota`](Self::is_customer_over_quota).
    pub const fn is_over_quota(self) -> bool {
        self.is_customer_over_quota()
    }
}

impl std::fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request the controller did not admit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("request refused: {reason} (criticality {criticality})")]
pub struct Refusal {
    /// Why.
    pub reason: RefusalReason,
    /// The request's criticality.
    pub criticality: Criticality,
    /// When the client may try again (`Retry-After`), if there is a useful hint.
    pub retry_after: Option<Duration>,
    /// The task's overload is sustained, not momentary: it has refused work of this
    /// criticality for [`SUSTAINED_AFTER`](super::SUSTAINED_AFTER) without a pause of
    /// [`EPISODE_GAP`](super::EPISODE_GAP). A retry elsewhere would then meet a fleet just as
    /// full and only add load (gRFC A6: the server's pushback tells the client not to retry;
    /// SRE book ch. 21: retries amplify overload), so the edge marks it "don't retry" whatever
    /// the reason.
    pub sustained: bool,
}

impl Refusal {
    /// Whether the caller may usefully retry (on another task): the reason allows it and the
    /// overload is momentary. The edge's "don't retry" marker and gRPC pushback follow this.
    pub const fn retry_can_help(&self) -> bool {
        self.reason.retry_elsewhere_can_help() && !self.sustained
    }
}

/// When each criticality was last refused for this task's overload: which level is being shed
/// now. A request more critical than a level shed within its own wait is not refused on an
/// estimate of that wait (`AdmissionController::enqueue`): the shed level's slots come free for
/// it, and refusing it on a guess would let that less critical work run in its place. Relaxed
/// atomics, written at most once per millisecond per level (refusals are the bulk of the work
/// under overload).
#[derive(Debug)]
pub(crate) struct Shedding {
    origin: Instant,
    /// Nanoseconds since `origin` + 1 of each level's latest overload refusal (0: none yet).
    last: [AtomicU64; Criticality::COUNT],
}

impl Shedding {
    pub(crate) fn new(origin: Instant) -> Self {
        Shedding {
            origin,
            last: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Notes an overload refusal of level `c` at `now`.
    pub(crate) fn refused(&self, c: Criticality, now: Instant) {
        let t = crate::clock::nanos_since(self.origin, now).saturating_add(1);
        let cell = &self.last[c.index()];
        if t > cell.load(Ordering::Relaxed).saturating_add(1_000_000) {
            cell.store(t, Ordering::Relaxed);
        }
    }

    /// The lowest level refused for overload within `within` before `now`, if any.
    pub(crate) fn lowest_within(&self, now: Instant, within: Duration) -> Option<Criticality> {
        let t = crate::clock::nanos_since(self.origin, now).saturating_add(1);
        // The 1 ms write granularity: a level refused just now may read up to 1 ms old.
        let window = crate::clock::saturating_nanos(within).saturating_add(1_000_000);
        Criticality::ALL.into_iter().find(|c| {
            let last = self.last[c.index()].load(Ordering::Relaxed);
            last != 0 && t.saturating_sub(last) <= window
        })
    }
}

/// Relaxed counters: exact per thread, eventually consistent across threads — fine for a status
/// page, and no fence on the hot path.
/// `admitted` first (`repr(C)`): the fast path bumps it (see the controller's layout note).
#[derive(Debug, Default)]
#[repr(C)]
pub(crate) struct Counters {
    pub(crate) admitted: [AtomicU64; Criticality::COUNT],
    pub(crate) enqueued: [AtomicU64; Criticality::COUNT],
    pub(crate) cancelled: [AtomicU64; Criticality::COUNT],
    pub(crate) refused: [[AtomicU64; Criticality::COUNT]; RefusalReason::COUNT],
    /// Of `admitted`, and of the overload refusals, those of retries (attempt 2 and on): what
    /// retries add, so an episode can be judged on first attempts (`Episode::is_burst`).
    /// Bumped only for retries, off the first attempts' path.
    pub(crate) retries_admitted: [AtomicU64; Criticality::COUNT],
    pub(crate) retries_refused: [AtomicU64; Criticality::COUNT],
    pub(crate) health_checks: AtomicU64,
    pub(crate) health_in_flight: AtomicUsize,
}

impl Counters {
    #[inline]
    pub(crate) fn bump(cell: &AtomicU64) {
        cell.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a refusal; `retry`: of a retry (attempt 2 and on).
    #[inline]
    pub(crate) fn refused(&self, reason: RefusalReason, c: Criticality, retry: bool) {
        Self::bump(&self.refused[reason.index()][c.index()]);
        if retry && reason.retry_elsewhere_can_help() {
            Self::bump(&self.retries_refused[c.index()]);
        }
    }

    /// Counts an admission; `retry`: of a retry (attempt 2 and on).
    #[inline]
    pub(crate) fn admitted(&self, c: Criticality, retry: bool) {
        Self::bump(&self.admitted[c.index()]);
        if retry {
            Self::bump(&self.retries_admitted[c.index()]);
        }
    }

    /// Level `c`'s refusals for overload so far (reasons where retrying elsewhere can help).
    pub(crate) fn overload_refusals(&self, c: Criticality) -> u64 {
        RefusalReason::ALL
            .iter()
            .filter(|r| r.retry_elsewhere_can_help())
            .map(|r| self.refused[r.index()][c.index()].load(Ordering::Relaxed))
            .sum()
    }

    /// Level `c`'s overload refusals and admissions so far, and the retries' among them.
    pub(crate) fn level(&self, c: Criticality) -> LevelCounts {
        let i = c.index();
        LevelCounts {
            refused: self.overload_refusals(c),
            admitted: self.admitted[i].load(Ordering::Relaxed),
            retries_refused: self.retries_refused[i].load(Ordering::Relaxed),
            retries_admitted: self.retries_admitted[i].load(Ordering::Relaxed),
        }
    }

    pub(crate) fn read(cells: &[AtomicU64; Criticality::COUNT]) -> PerCriticality<u64> {
        PerCriticality::from_fn(|c| cells[c.index()].load(Ordering::Relaxed))
    }

    pub(crate) fn refusal_counts(&self) -> RefusalCounts {
        RefusalCounts(std::array::from_fn(|r| Self::read(&self.refused[r])))
    }
}

/// Refusals so far, by reason × criticality.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct RefusalCounts(pub [PerCriticality<u64>; RefusalReason::COUNT]);

impl RefusalCounts {
    /// Refusals for `reason` at criticality `c`.
    pub fn get(&self, reason: RefusalReason, c: Criticality) -> u64 {
        self.0[reason.index()][c]
    }

    /// Refusals for `reason`, all criticalities.
    pub fn by_reason(&self, reason: RefusalReason) -> u64 {
        self.0[reason.index()].0.iter().sum()
    }

    /// All refusals.
    pub fn total(&self) -> u64 {
        RefusalReason::ALL.iter().map(|r| self.by_reason(*r)).sum()
    }
}
