//! What ends an admitted request's wait for its upstream before the answer comes, and what the
//! concurrency limit learns from it. One decision, so that the proxy and the simulation that
//! models it (`spillway sim --sweep`) release the same permit the same way (issue 28: a
//! caller's deadline is not the upstream's failure, and the model must drive the same code).

use std::time::Duration;

use super::Outcome;

/// Why an admitted request's wait for its upstream's answer ended without one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoAnswer {
    /// The caller went away first: it cancelled, reset its stream or closed its connection
    /// (its own timer fired without telling the proxy).
    CallerGone,
    /// The caller's deadline, propagated to the proxy (`grpc-timeout`,
    /// `x-spillway-deadline-ms`), ran out before the proxy's own limit on the wait would have.
    CallersDeadline,
    /// The proxy's own limit on the wait (its configured upstream timeout) ran out first.
    UpstreamTimeout,
}

impl NoAnswer {
    /// The timer a proxy sets on its wait for an answer, and what that timer firing will mean:
    /// the `configured` timeout, or what is `deadline_left` of the caller's deadline when that
    /// is shorter.
    pub fn wait_bound(
        configured: Duration,
        deadline_left: Option<Duration>,
    ) -> (Duration, NoAnswer) {
        match deadline_left {
            Some(left) if left < configured => (left, NoAnswer::CallersDeadline),
            _ => (configured, NoAnswer::UpstreamTimeout),
        }
    }

    /// How the permit is released. Only the proxy's own timeout says the upstream was slow (a
    /// congestion signal); a caller's short deadline or departure is not the upstream's
    /// failure — the latency is only known to exceed what the caller allowed — so it is
    /// [`Outcome::Abandoned`]: a lower bound, never a drop.
    pub fn outcome(self) -> Outcome {
        match self {
            NoAnswer::UpstreamTimeout => Outcome::Dropped,
            NoAnswer::CallerGone | NoAnswer::CallersDeadline => Outcome::Abandoned,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shorter_bound_wins_and_names_the_outcome() {
        let s = Duration::from_secs(30);
        let ms = Duration::from_millis;
        assert_eq!(
            NoAnswer::wait_bound(s, None),
            (s, NoAnswer::UpstreamTimeout)
        );
        assert_eq!(
            NoAnswer::wait_bound(s, Some(ms(20))),
            (ms(20), NoAnswer::CallersDeadline)
        );
        // A deadline no shorter than the configured timeout leaves the timeout in charge.
        assert_eq!(
            NoAnswer::wait_bound(ms(100), Some(ms(100))),
            (ms(100), NoAnswer::UpstreamTimeout)
        );
        assert_eq!(NoAnswer::UpstreamTimeout.outcome(), Outcome::Dropped);
        assert_eq!(NoAnswer::CallersDeadline.outcome(), Outcome::Abandoned);
        assert_eq!(NoAnswer::CallerGone.outcome(), Outcome::Abandoned);
    }
}
