//! What one attempt's outcome means: answer the caller, try another task, give up, or open a
//! tunnel; and what it says about the task (failure, success, nothing).
//!
//! Why a plain synchronous function apart from the sending: the rules of SRE ch. 21 ("Handling
//! overload errors", "Client-side throttling") are decided here, and they are easier to read and
//! to test as a table over outcomes than inside the future that waits for the task. The send
//! loop (`send.rs`) only carries them out. The retry policy's gates (budget, widespread
//! overload, attempt limit) are stateful, so they are asked through [`Ask`], which tests answer
//! with fixed values.

use spillway_core::controller::{NoAnswer, Outcome};
use spillway_core::retry::{RetryDecision, RetryGate};

use crate::metrics::Fault;

/// How one attempt ended, reduced to what deciding the next step needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
    /// The task's client throttle refused the request locally: it was never sent.
    Throttled,
    /// No response head within the wait; `bound` says whose time ran out.
    TimedOut {
        /// The configured timeout, or what was left of the caller's deadline.
        bound: NoAnswer,
    },
    /// The connection to the task could not be made: the request never reached it.
    ConnectFailed,
    /// The client's upload broke while it was sent: nothing about the task.
    ClientBodyBroke,
    /// The task broke the connection (`Fault::UpstreamReset`) or sent an invalid response
    /// (`Fault::UpstreamInvalid`).
    UpstreamFailed(Fault),
    /// A response head arrived.
    Responded {
        /// An overload refusal (`Some`), and whether it carries the don't-retry marker.
        overload: Option<bool>,
        /// A 5xx status.
        server_error: bool,
        /// A 101: the exchange becomes a tunnel.
        switching: bool,
    },
}

impl Ended {
    /// What the retry policy's widespread-overload ring records for the task: refused
    /// (`true`), failed otherwise (`false`), or nothing (the client's fault). Recorded before
    /// [`classify`] asks the policy, which reads the ring.
    pub(super) fn refused(self) -> Option<bool> {
        match self {
            Ended::Throttled => Some(true),
            Ended::Responded { overload, .. } => Some(overload.is_some()),
            Ended::ClientBodyBroke => None,
            Ended::TimedOut { .. } | Ended::ConnectFailed | Ended::UpstreamFailed(_) => Some(false),
        }
    }
}

/// What an attempt says about its task, for ejection, balancing and the client throttle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TaskMark {
    /// Nothing.
    Unmarked,
    /// A failure or refusal (`Pool::record_failure`).
    Failed,
    /// An answer (`Pool::record_success`) and an accept for the throttle.
    Succeeded,
    /// A 5xx answer: a failure for ejection, an accept for the throttle (it did not refuse).
    FailedAnswer,
    /// Only an accept for the throttle: the caller's deadline ran out, not the task.
    Accepted,
}

/// The next step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// Send the request to another task, counted as retried for this reason (`None`: a
    /// local throttle refusal, counted as throttled already).
    RetryElsewhere(Option<&'static str>),
    /// Pass the task's response on to the caller, the permit ending with this outcome.
    Answer(Outcome),
    /// Pass the task's 101 on and hold the permit until the tunnel closes.
    Tunnel(Outcome),
    /// The proxy answers the caller itself (an error naming the cause), the permit ending
    /// with this outcome.
    GiveUp(Outcome),
}

/// The verdict on one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Verdict {
    /// The fault counted for it, if any.
    pub(super) fault: Option<Fault>,
    /// What it says about the task.
    pub(super) task: TaskMark,
    /// The proxy gave up on an overload refusal it may not retry: the answer carries the
    /// don't-retry marker so the caller does not retry either (SRE ch. 21).
    pub(super) dont_retry_marker: bool,
    /// What to do next.
    pub(super) next: Next,
}

/// The questions whose answers depend on the retry policy's state and the pool.
pub(super) trait Ask {
    /// A request that never reached its task: may it go to another one (the body can be
    /// replayed, retries are on, attempts and tasks remain)?
    fn retry_unsent(&mut self) -> bool;
    /// An overload refusal (or a local throttle refusal, `dont_retry` false): the retry
    /// policy's decision, which charges the budget when it says retry.
    fn retry_refused(&mut self, dont_retry: bool) -> RetryDecision;
}

/// The verdict on an attempt that ended as `ended`.
pub(super) fn classify(ended: Ended, ask: &mut impl Ask) -> Verdict {
    let verdict = |fault, task, next| Verdict {
        fault,
        task,
        dont_retry_marker: false,
        next,
    };
    match ended {
        Ended::Throttled => {
            // Counted as that task refusing: retried like a refusal without the marker.
            let next = match ask.retry_refused(false) {
                RetryDecision::Retry => Next::RetryElsewhere(None),
                RetryDecision::GiveUp(_) => Next::GiveUp(Outcome::Dropped),
            };
            verdict(None, TaskMark::Unmarked, next)
        }
        Ended::TimedOut { bound } => {
            // A caller's short deadline says nothing about a healthy task (five such calls
            // ejected an idle one): no failure for ejection or balancing, no rejection for the
            // throttle, no congestion sample for the limit.
            let task = if bound == NoAnswer::CallersDeadline {
                TaskMark::Accepted
            } else {
                TaskMark::Failed
            };
            verdict(
                Some(Fault::UpstreamTimeout),
                task,
                Next::GiveUp(bound.outcome()),
            )
        }
        Ended::ConnectFailed => {
            let next = if ask.retry_unsent() {
                Next::RetryElsewhere(Some("connect"))
            } else {
                Next::GiveUp(Outcome::Ignore)
            };
            verdict(Some(Fault::UpstreamConnect), TaskMark::Failed, next)
        }
        // Counted by the answer (`bad_request`), not as the task's fault.
        Ended::ClientBodyBroke => verdict(None, TaskMark::Unmarked, Next::GiveUp(Outcome::Ignore)),
        Ended::UpstreamFailed(fault) => {
            verdict(Some(fault), TaskMark::Failed, Next::GiveUp(Outcome::Ignore))
        }
        Ended::Responded {
            overload: Some(dont_retry),
            switching,
            ..
        } => match ask.retry_refused(dont_retry) {
            RetryDecision::Retry => verdict(
                None,
                TaskMark::Failed,
                Next::RetryElsewhere(Some("overloaded")),
            ),
            RetryDecision::GiveUp(gate) => Verdict {
                fault: None,
                task: TaskMark::Failed,
                dont_retry_marker: matches!(
                    gate,
                    RetryGate::Widespread | RetryGate::Budget | RetryGate::AttemptLimit
                ),
                next: pass(switching, Outcome::Dropped),
            },
        },
        Ended::Responded {
            overload: None,
            server_error,
            switching,
        } => {
            let task = if server_error {
                TaskMark::FailedAnswer
            } else {
                TaskMark::Succeeded
            };
            verdict(None, task, pass(switching, Outcome::Success))
        }
    }
}

/// The task's response passed on: as a tunnel for a 101 (the exchange ends but not the
/// work), else as an answer.
fn pass(switching: bool, outcome: Outcome) -> Next {
    if switching {
        Next::Tunnel(outcome)
    } else {
        Next::Answer(outcome)
    }
}

#[cfg(test)]
mod tests;
