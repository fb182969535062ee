//! Why the retry layer stopped, as metric labels.
//!
//! The error a caller sees when the layer gives up on an overloaded downstream is
//! [`crate::wire::OverloadGiveUp`] (defined with the wire conventions, because this service's
//! own server layer turns it into "don't retry" at its edge).

use spillway_core::retry::RetryGate;

/// Why the retry layer did not make another attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GiveUpReason {
    /// One of the core's gates ([`spillway_core::retry::RetryPolicy::decide`]) refused.
    Gate(RetryGate),
    /// Another attempt could not finish before the deadline of the request being served.
    Deadline,
    /// The request body was too large to buffer, so it cannot be sent again.
    NotReplayable,
    /// The local adaptive throttle refused the attempt (the backend is refusing for overload).
    Throttled,
    /// Naive mode used all its attempts.
    NaiveLimit,
}

impl GiveUpReason {
    /// Every reason, for pre-registering metrics.
    pub const ALL: [GiveUpReason; 9] = [
        GiveUpReason::Gate(RetryGate::NotRetryable),
        GiveUpReason::Gate(RetryGate::DontRetry),
        GiveUpReason::Gate(RetryGate::AttemptLimit),
        GiveUpReason::Gate(RetryGate::Widespread),
        GiveUpReason::Gate(RetryGate::Budget),
        GiveUpReason::Deadline,
        GiveUpReason::NotReplayable,
        GiveUpReason::Throttled,
        GiveUpReason::NaiveLimit,
    ];

    /// Snake-case name: the metric label, and the `reason` of [`crate::wire::OverloadGiveUp`].
    pub const fn as_str(self) -> &'static str {
        match self {
            GiveUpReason::Gate(g) => g.as_str(),
            GiveUpReason::Deadline => "deadline",
            GiveUpReason::NotReplayable => "not_replayable",
            GiveUpReason::Throttled => "throttled",
            GiveUpReason::NaiveLimit => "naive_limit",
        }
    }

    pub(crate) fn index(self) -> usize {
        match self {
            GiveUpReason::Gate(RetryGate::NotRetryable) => 0,
            GiveUpReason::Gate(RetryGate::DontRetry) => 1,
            GiveUpReason::Gate(RetryGate::AttemptLimit) => 2,
            GiveUpReason::Gate(RetryGate::Widespread) => 3,
            GiveUpReason::Gate(RetryGate::Budget) => 4,
            GiveUpReason::Deadline => 5,
            GiveUpReason::NotReplayable => 6,
            GiveUpReason::Throttled => 7,
            GiveUpReason::NaiveLimit => 8,
        }
    }
}

impl std::fmt::Display for GiveUpReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
