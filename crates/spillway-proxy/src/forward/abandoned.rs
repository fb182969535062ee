//! An attempt's exchange with its task, and what happens to it when the caller goes away
//! before the task answers: the exchange goes on without the caller, and the request keeps its
//! admission slot and its task's request slot until the task answers.
//!
//! Why hold them: a caller leaving (its connection closed, its HTTP/2 stream reset, its
//! deadline run out) does not stop the upstream. A plain HTTP/1.1 server works on a request
//! whose connection closed, and most HTTP/2 servers on a reset stream unless the handler
//! checks. Freed at once, the slot goes to the next request while the upstream still holds the
//! old one: it runs more than the limit allows, slows down if its service time grows with what
//! it holds, more callers give up, and it collapses — behind a cap tuned to its workers too. In
//! the sweep's small upstreams (`examples/sim/robustness-small.toml`, one worker that slows
//! with what it holds) goodput past capacity was 0–1 % of capacity with the slot freed and
//! 27–31 % held (bench/results/hold-abandoned-issue28.md). Held, the limit counts what the
//! upstream really holds.
//!
//! The hold ends when the response has been read to its end (and discarded; an HTTP/1.1
//! connection goes back to the pool), when the exchange fails, or at the upstream timeout
//! counted from the attempt (`upstream.request_timeout_ms`), whichever is first. Each hold
//! keeps a task's request slot, so `max_requests_per_task` bounds how many there are.
//!
//! The permit keeps the outcome it had when the caller left (`Outcome::Abandoned`: the task
//! failed nothing, and the limit reads the latency only as a lower bound) and is released with
//! the whole time the task took, which the deadline budget learns. Released with only what the
//! caller waited (the slot held, the sample taken when the caller left), the budget saw a slow
//! mode only cut short while waiters queued behind the held slots, and the sweep's late queue
//! exits (R4b) went from 4 to 62 cells of 2,288 at seed 28.
//!
//! `upstream.hold_abandoned = false` cuts the exchange instead (HTTP/2: RST_STREAM; HTTP/1.1:
//! the connection is closed) and frees both slots at once, for upstreams that stop their work
//! when told.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use http::Response;
use http_body_util::BodyExt;
use spillway_core::controller::{Outcome, Permit};
use tokio::time::Instant;

use super::attempt::SendResult;
use crate::metrics::{
    ABANDONED_HELD, ABANDONED_HOLDS, HOLD_ANSWERED, HOLD_FAILED, HOLD_TIMED_OUT, L_END,
};
use crate::upstream::{InSlot, UpstreamBody, UpstreamError};

/// The exchange with a task: a boxed future so that it can move to a task of its own when its
/// caller goes away while it is in progress.
pub(super) type Exchange =
    Pin<Box<dyn Future<Output = Result<Response<UpstreamBody>, UpstreamError>> + Send>>;

/// An exchange in progress, the task's request slot, and the request's admission permit (lent
/// by the send loop, which keeps it for the answer). Dropped while the exchange is unfinished
/// (the caller went away), it hands both slots and the exchange to a task that holds them
/// until the upstream answers.
pub(super) struct InExchange<'p> {
    exchange: Exchange,
    /// The exchange has ended (answered or failed), or is to be cut when dropped.
    over: bool,
    inflight: Option<InSlot>,
    permit: &'p mut Permit,
    /// The hold's end: the attempt's start plus the upstream timeout.
    until: Instant,
    /// `upstream.hold_abandoned`.
    hold: bool,
}

impl<'p> InExchange<'p> {
    /// `exchange`, its attempt started at `sent`, on `inflight`'s slot, admitted with `permit`.
    pub(super) fn new(
        exchange: Exchange,
        inflight: InSlot,
        permit: &'p mut Permit,
        sent: std::time::Instant,
        upstream_timeout: Duration,
        hold: bool,
    ) -> Self {
        InExchange {
            exchange,
            over: false,
            inflight: Some(inflight),
            permit,
            until: Instant::from_std(sent) + upstream_timeout,
            hold,
        }
    }

    /// Waits for the task's answer, `timeout` at most. Called once.
    pub(super) async fn answer(&mut self, timeout: Duration) -> SendResult {
        let result = tokio::time::timeout(timeout, &mut self.exchange).await;
        self.over = result.is_ok();
        result
    }

    /// The wait is over: the task's request slot, for the answer to hold (an exchange still
    /// unfinished — the proxy's own upstream timeout fired — is cut).
    pub(super) fn into_slot(mut self) -> Option<InSlot> {
        self.over = true;
        self.inflight.take()
    }

    /// The caller's deadline ran out while the task worked: the exchange goes on without it,
    /// with the slots, and the permit's outcome is `outcome`.
    pub(super) fn abandon(self, outcome: Outcome) {
        self.permit.set_outcome(outcome);
        // Dropped here with the exchange unfinished: handed over (`Drop`).
    }
}

impl Drop for InExchange<'_> {
    fn drop(&mut self) {
        if self.over || !self.hold {
            return;
        }
        // Dropped outside a runtime (shutting down): nothing can wait for the answer.
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // `Pending` is zero-sized: its box allocates nothing.
        let exchange = std::mem::replace(&mut self.exchange, Box::pin(std::future::pending()));
        let held = Held {
            _permit: self.permit.hand_over(),
            _inflight: self.inflight.take(),
        };
        // Counted here, not in the task: a caller answered 504 sees the hold already counted.
        metrics::gauge!(ABANDONED_HELD).increment(1.0);
        rt.spawn(hold_until_answered(exchange, held, self.until));
    }
}

/// What an abandoned exchange holds until it ends (released when dropped).
struct Held {
    _permit: Permit,
    _inflight: Option<InSlot>,
}

async fn hold_until_answered(exchange: Exchange, held: Held, until: Instant) {
    let end = match tokio::time::timeout_at(until, read_to_end(exchange)).await {
        Ok(true) => HOLD_ANSWERED,
        Ok(false) => HOLD_FAILED,
        Err(_) => HOLD_TIMED_OUT,
    };
    drop(held);
    metrics::gauge!(ABANDONED_HELD).decrement(1.0);
    metrics::counter!(ABANDONED_HOLDS, L_END => end).increment(1);
}

/// Waits for the answer and reads its body to the end, discarding it: whether it all arrived.
async fn read_to_end(exchange: Exchange) -> bool {
    let Ok(res) = exchange.await else {
        return false;
    };
    let mut body = res.into_body();
    loop {
        match body.frame().await {
            None => return true,
            Some(Ok(_)) => {}
            Some(Err(_)) => return false,
        }
    }
}
