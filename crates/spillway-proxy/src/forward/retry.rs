//! The retry questions an attempt's verdict asks ([`Ask`]), answered by the upstream pool
//! (is another task left?) and its retry policy (budget, widespread overload: SRE ch. 21).
//!
//! Why apart from the verdict: the verdict's rules (`verdict`) are a pure function of how an
//! attempt ended and these answers, tested without a pool; this is where the answers touch
//! the proxy's state.

use std::time::Instant;

use spillway_core::retry::{Failure, RetryDecision, RetryGate};

use super::verdict::Ask;
use crate::metrics::Fault;
use crate::state::ProxyState;
use crate::upstream::{Pool, Tried};

/// The retry questions of [`classify`](super::verdict::classify), answered by the pool and the retry policy.
pub(super) struct RetryAsk<'r> {
    /// The proxy's state: whether retries are on, the fault counts.
    pub(super) state: &'r ProxyState,
    /// The tasks and their retry policy.
    pub(super) pool: &'r Pool,
    /// The tasks this request has been sent to.
    pub(super) tried: &'r Tried,
    /// The verdict's instant.
    pub(super) now: Instant,
    /// The attempt's number (the first is 1).
    pub(super) attempt: u32,
    /// The request's body can be sent again (it was buffered whole).
    pub(super) replayable: bool,
}

impl RetryAsk<'_> {
    fn more_tasks(&self) -> bool {
        self.pool.pick(self.tried, self.now).is_some()
    }
}

impl Ask for RetryAsk<'_> {
    fn retry_unsent(&mut self) -> bool {
        // The request never reached the task: safe to send elsewhere if we still have the
        // body, retries are on, and attempts remain.
        if self.replayable
            && self.state.retries_enabled()
            && self.attempt < self.pool.retry_policy().max_attempts()
            && self.more_tasks()
        {
            return true;
        }
        if !self.replayable && self.more_tasks() {
            self.state.faults.count(Fault::NotRetriedLargeBody);
        }
        false
    }

    /// Whether an overload refusal may be retried on another task. The budget is charged only
    /// when another task exists (a sidecar with one task never spends it); with no task left, a
    /// widespread overload is still reported as such so the caller is told not to retry. Every
    /// give-up is counted by its gate, so an alert can tell a spent budget from a widespread
    /// overload.
    fn retry_refused(&mut self, dont_retry: bool) -> RetryDecision {
        let retry = self.pool.retry_policy();
        let d = 'gate: {
            if !self.state.retries_enabled() {
                break 'gate RetryDecision::GiveUp(RetryGate::NotRetryable);
            }
            if !self.more_tasks() {
                break 'gate RetryDecision::GiveUp(if retry.is_widespread() {
                    RetryGate::Widespread
                } else {
                    RetryGate::NotRetryable
                });
            }
            if !self.replayable {
                self.state.faults.count(Fault::NotRetriedLargeBody);
                break 'gate RetryDecision::GiveUp(RetryGate::NotRetryable);
            }
            let f = if dont_retry {
                Failure::overloaded_dont_retry(self.attempt)
            } else {
                Failure::overloaded(self.attempt)
            };
            retry.decide(self.now, &f)
        };
        if let RetryDecision::GiveUp(g) = d {
            crate::metrics::retry_gave_up(g);
        }
        d
    }
}
