use spillway_core::controller::{NoAnswer, Outcome};
use spillway_core::retry::{RetryDecision, RetryGate};

use super::{classify, Ask, Ended, Next, TaskMark, Verdict};
use crate::metrics::Fault;

/// Fixed answers to the retry questions, and which were asked.
struct Fixed {
    unsent: bool,
    refused: RetryDecision,
    asked_unsent: u32,
    asked_refused: Vec<bool>,
}

impl Fixed {
    fn new(unsent: bool, refused: RetryDecision) -> Self {
        Fixed {
            unsent,
            refused,
            asked_unsent: 0,
            asked_refused: Vec::new(),
        }
    }

    /// Neither question may be asked.
    fn silent() -> Self {
        Fixed::new(false, RetryDecision::GiveUp(RetryGate::NotRetryable))
    }
}

impl Ask for Fixed {
    fn retry_unsent(&mut self) -> bool {
        self.asked_unsent += 1;
        self.unsent
    }

    fn retry_refused(&mut self, dont_retry: bool) -> RetryDecision {
        self.asked_refused.push(dont_retry);
        self.refused
    }
}

fn answered(status: u16) -> Ended {
    Ended::Responded {
        overload: None,
        server_error: status >= 500,
        switching: status == 101,
    }
}

fn refusal(dont_retry: bool) -> Ended {
    Ended::Responded {
        overload: Some(dont_retry),
        server_error: true,
        switching: false,
    }
}

#[test]
fn an_answer_is_passed_on_as_a_success_without_asking_the_retry_policy() {
    let mut ask = Fixed::silent();
    let v = classify(answered(200), &mut ask);
    assert_eq!(
        v,
        Verdict {
            fault: None,
            task: TaskMark::Succeeded,
            dont_retry_marker: false,
            next: Next::Answer(Outcome::Success),
        }
    );
    assert_eq!((ask.asked_unsent, ask.asked_refused.len()), (0, 0));
}

#[test]
fn a_5xx_that_is_no_overload_refusal_is_an_answer_but_a_failure_of_the_task() {
    let mut ask = Fixed::silent();
    let v = classify(answered(500), &mut ask);
    assert_eq!(v.task, TaskMark::FailedAnswer);
    assert_eq!(v.next, Next::Answer(Outcome::Success));
    assert!(ask.asked_refused.is_empty(), "a 500 is not retried");
}

#[test]
fn a_101_becomes_a_tunnel() {
    let v = classify(answered(101), &mut Fixed::silent());
    assert_eq!(v.next, Next::Tunnel(Outcome::Success));
    assert_eq!(v.task, TaskMark::Succeeded);
}

#[test]
fn an_overload_refusal_the_policy_allows_is_retried_elsewhere() {
    let mut ask = Fixed::new(false, RetryDecision::Retry);
    let v = classify(refusal(false), &mut ask);
    assert_eq!(v.next, Next::RetryElsewhere(Some("overloaded")));
    assert_eq!(
        v.task,
        TaskMark::Failed,
        "a refusal counts against the task"
    );
    assert_eq!(ask.asked_refused, [false]);
}

#[test]
fn the_dont_retry_marker_reaches_the_policy() {
    let mut ask = Fixed::new(false, RetryDecision::GiveUp(RetryGate::DontRetry));
    let v = classify(refusal(true), &mut ask);
    assert_eq!(ask.asked_refused, [true]);
    assert_eq!(v.next, Next::Answer(Outcome::Dropped));
    // The task's own marker is already on its answer; the proxy adds none.
    assert!(!v.dont_retry_marker);
}

#[test]
fn giving_up_for_the_fleet_marks_the_answer_dont_retry() {
    for (gate, marked) in [
        (RetryGate::Widespread, true),
        (RetryGate::Budget, true),
        (RetryGate::AttemptLimit, true),
        (RetryGate::NotRetryable, false),
        (RetryGate::DontRetry, false),
    ] {
        let v = classify(
            refusal(false),
            &mut Fixed::new(false, RetryDecision::GiveUp(gate)),
        );
        assert_eq!(v.dont_retry_marker, marked, "{gate:?}");
        assert_eq!(v.next, Next::Answer(Outcome::Dropped), "{gate:?}");
    }
}

#[test]
fn a_local_throttle_refusal_is_retried_or_given_up_as_dropped() {
    let mut ask = Fixed::new(false, RetryDecision::Retry);
    let v = classify(Ended::Throttled, &mut ask);
    assert_eq!(v.next, Next::RetryElsewhere(None));
    assert_eq!(
        ask.asked_refused,
        [false],
        "asked as a refusal without the marker"
    );
    assert_eq!(v.task, TaskMark::Unmarked, "it never reached the task");

    let give_up = RetryDecision::GiveUp(RetryGate::Budget);
    let v = classify(Ended::Throttled, &mut Fixed::new(false, give_up));
    assert_eq!(v.next, Next::GiveUp(Outcome::Dropped));
    assert!(!v.dont_retry_marker);
}

#[test]
fn a_failed_connection_is_retried_when_allowed_else_answered_as_a_fault() {
    let mut ask = Fixed::new(true, RetryDecision::Retry);
    let v = classify(Ended::ConnectFailed, &mut ask);
    assert_eq!(v.next, Next::RetryElsewhere(Some("connect")));
    assert_eq!(v.fault, Some(Fault::UpstreamConnect));
    assert_eq!(v.task, TaskMark::Failed);
    assert_eq!(ask.asked_unsent, 1);
    assert!(
        ask.asked_refused.is_empty(),
        "no budget charged for a connect"
    );

    let v = classify(Ended::ConnectFailed, &mut Fixed::silent());
    assert_eq!(v.next, Next::GiveUp(Outcome::Ignore));
}

#[test]
fn a_timeout_is_the_tasks_failure_only_when_its_own_time_ran_out() {
    let v = classify(
        Ended::TimedOut {
            bound: NoAnswer::UpstreamTimeout,
        },
        &mut Fixed::silent(),
    );
    assert_eq!(v.task, TaskMark::Failed);
    assert_eq!(v.fault, Some(Fault::UpstreamTimeout));
    assert_eq!(v.next, Next::GiveUp(NoAnswer::UpstreamTimeout.outcome()));

    let v = classify(
        Ended::TimedOut {
            bound: NoAnswer::CallersDeadline,
        },
        &mut Fixed::silent(),
    );
    assert_eq!(
        v.task,
        TaskMark::Accepted,
        "the caller's deadline, not the task"
    );
    assert_eq!(v.next, Next::GiveUp(NoAnswer::CallersDeadline.outcome()));
}

#[test]
fn a_broken_upload_says_nothing_about_the_task() {
    let ended = Ended::ClientBodyBroke;
    let v = classify(ended, &mut Fixed::silent());
    assert_eq!(v.task, TaskMark::Unmarked);
    assert_eq!(v.fault, None);
    assert_eq!(v.next, Next::GiveUp(Outcome::Ignore));
    assert_eq!(ended.refused(), None, "nor about the fleet's overload");
}

#[test]
fn a_broken_or_invalid_answer_is_the_tasks_fault_and_not_retried() {
    for fault in [Fault::UpstreamReset, Fault::UpstreamInvalid] {
        let mut ask = Fixed::silent();
        let v = classify(Ended::UpstreamFailed(fault), &mut ask);
        assert_eq!(v.fault, Some(fault));
        assert_eq!(v.task, TaskMark::Failed);
        assert_eq!(v.next, Next::GiveUp(Outcome::Ignore));
        assert_eq!((ask.asked_unsent, ask.asked_refused.len()), (0, 0));
    }
}

#[test]
fn only_refusals_count_as_refused_for_the_widespread_ring() {
    assert_eq!(Ended::Throttled.refused(), Some(true));
    assert_eq!(refusal(true).refused(), Some(true));
    assert_eq!(answered(200).refused(), Some(false));
    assert_eq!(
        answered(503).refused(),
        Some(false),
        "a 503 without refusal"
    );
    assert_eq!(Ended::ConnectFailed.refused(), Some(false));
    assert_eq!(
        Ended::TimedOut {
            bound: NoAnswer::UpstreamTimeout
        }
        .refused(),
        Some(false)
    );
}
