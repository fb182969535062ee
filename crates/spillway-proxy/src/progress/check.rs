//! The rules [`watch`](super::watch) applies to a connection at each of its timer's checks,
//! apart from the loop that waits for the timer: what a check compares, and what it decides.
//!
//! Why a state struct: the check runs in the connection's task between polls of its future,
//! and everything it compares from one check to the next (the quiet time's start, the last
//! counts, the stall rules' clocks) is carried here, so the loop in `watch` reads as wait,
//! check, act.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::{Ended, Progress, Snapshot, Timeouts};

/// What a check decided.
pub(super) enum Check<T> {
    /// Nothing to close: check again at this instant.
    Again(Instant),
    /// An idle HTTP/2 connection: asked to close gracefully, then run to its end.
    CloseGracefully,
    /// The connection is dropped, ending so.
    Cut(Ended<T>),
}

/// What [`watch`](super::watch) carries from one check to the next.
#[derive(Debug)]
pub(super) struct Checks {
    /// How often the connection is checked ([`Timeouts::period`]).
    period: Duration,
    /// Since when nothing has happened on the connection.
    pub(super) quiet_from: Instant,
    /// The counts at the last check.
    seen: Snapshot,
    /// Writes and body polls seen at the last check, and since when something the client has
    /// not taken has waited with neither.
    sent: Stall<(u64, u64)>,
    /// Request body frames, for a body waiting on the client.
    uploaded: Stall<u64>,
    /// Response body frames, for a body waiting on its upstream.
    answered: Stall<u64>,
}

impl Checks {
    /// The state of a connection's checks as it starts, now.
    pub(super) fn new(progress: &Progress, limits: &Timeouts) -> Self {
        Checks {
            period: limits.period(),
            quiet_from: Instant::now(),
            seen: progress.snapshot(),
            sent: Stall::new(progress.sending()),
            uploaded: Stall::new(progress.body_frames.load(Relaxed)),
            answered: Stall::new(progress.upstream_frames.load(Relaxed)),
        }
    }

    /// The first check's instant.
    pub(super) fn first(&self) -> Instant {
        self.quiet_from + self.period
    }

    /// One check, now; `cut` and `overloaded` as [`super::watch`] takes them.
    pub(super) fn check<T>(
        &mut self,
        progress: &Progress,
        limits: &Timeouts,
        slots: &Semaphore,
        cut: &impl Fn(u64),
        overloaded: &impl Fn(Instant) -> bool,
    ) -> Check<T> {
        let now = Instant::now();
        let state = progress.snapshot();
        if let Some(ended) = self.stalled(progress, limits, now, state.active, cut) {
            return Check::Cut(ended);
        }
        // Between requests: a head was served and no next one is under way.
        let between = state.heads > 0 && !state.reading;
        let limit = if !between {
            limits.header
        } else if state.active == 0 && !progress.h2.load(Relaxed) {
            let open = limits
                .idle_pressure
                .cap
                .saturating_sub(slots.available_permits());
            limits
                .idle_pressure
                .idle_limit(limits.idle, open, overloaded(self.quiet_from))
        } else {
            limits.idle
        };
        if state.active > 0 || state != self.seen {
            // Busy, or something happened since the last check (at most one period ago): a
            // head, a response's end, or the first bytes of the next head, whose own time
            // starts here.
            self.quiet_from = now;
            self.seen = state;
        } else if now.saturating_duration_since(self.quiet_from) >= limit
            || (between && slots.available_permits() == 0)
        {
            if between && progress.h2.load(Relaxed) {
                // Idle HTTP/2: closed gracefully rather than dropped, so that a stream the
                // client opens just now is served or cleanly refused (GOAWAY names the last
                // one taken), never lost with the socket.
                return Check::CloseGracefully;
            }
            return Check::Cut(Ended::TimedOut { counted: !between });
        }
        Check::Again((now + self.period).min(self.quiet_from + limit))
    }

    /// The stall rules, at `now` with `active` requests in progress: a response the client
    /// takes nothing of, a request body it sends nothing more of, a response body its upstream
    /// sends nothing more of. HTTP/2 responses stalled alone are cut here and counted by `cut`.
    fn stalled<T>(
        &mut self,
        progress: &Progress,
        limits: &Timeouts,
        now: Instant,
        active: u64,
        cut: &impl Fn(u64),
    ) -> Option<Ended<T>> {
        let waiting_on = |n: &AtomicU64| active > 0 && n.load(Relaxed) > 0;
        let waiting = active > 0 && progress.waiting_on_client();
        if self
            .sent
            .stalled(now, progress.sending(), waiting, limits.send)
        {
            return Some(Ended::SendStalled);
        }
        match progress.cut_stalled_streams(now, limits.send) {
            0 => {}
            n => cut(n),
        }
        let frames = progress.body_frames.load(Relaxed);
        let waiting = waiting_on(&progress.body_waiting);
        if self.uploaded.stalled(now, frames, waiting, limits.body) {
            return Some(Ended::BodyStalled);
        }
        let frames = progress.upstream_frames.load(Relaxed);
        let waiting = waiting_on(&progress.upstream_waiting);
        if self
            .answered
            .stalled(now, frames, waiting, limits.upstream_body)
        {
            progress.upstream_stalled.store(true, Relaxed);
            return Some(Ended::UpstreamStalled);
        }
        None
    }
}

/// One of [`watch`](super::watch)'s stall rules: something waits on the peer, and the count that shows the
/// peer moving has not changed, for a limit.
#[derive(Debug)]
pub(super) struct Stall<T> {
    /// The count at the last check.
    last: T,
    /// Since when (the first check that saw it) the wait has gone without a change.
    from: Option<Instant>,
}

impl<T: PartialEq> Stall<T> {
    pub(super) fn new(count: T) -> Self {
        Stall {
            last: count,
            from: None,
        }
    }

    /// Whether, at `now`, the wait has lasted `limit` with `count` unchanged.
    pub(super) fn stalled(
        &mut self,
        now: Instant,
        count: T,
        waiting: bool,
        limit: Duration,
    ) -> bool {
        let still = waiting && count == self.last;
        self.last = count;
        if !still {
            self.from = None;
            return false;
        }
        let from = *self.from.get_or_insert(now);
        now.saturating_duration_since(from) >= limit
    }
}
