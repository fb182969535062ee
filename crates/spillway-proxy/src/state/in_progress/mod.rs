//! The budget of requests the proxy holds at once, across every connection and thread
//! (`listen.max_requests_in_progress`).
//!
//! Why a bound of its own: each request read and not yet answered holds memory — its head and
//! header map, its future, and while it waits upstream a connection there — about 8 kB of RSS
//! in a release build once the buffers that sit idle while it waits are let go of
//! (bench/results/hardening-issue29.md). Admission bounds what is admitted, but not what a
//! configuration that admits a lot (a fixed limit far above the upstream's, or health checks,
//! which are never refused) lets pile up while the upstream stalls, nor the heads HTTP/2
//! multiplexes over one connection; `listen.max_connections` bounds connections, not requests.
//! Past the budget a request is answered **503** at once, before classification, so a refusal
//! costs no more than its head: it is not buffered, queued or sent.
//!
//! Why it ends at the answer's head, and a response body the client reads slowly is not
//! counted: what the budget bounds is work the proxy piles up while the *upstream* is slow;
//! once the head is answered, the body is streamed, not buffered, so a slow reader holds what
//! its connection holds — the body's next chunk and the connection's buffers — not the whole
//! response, and a client that takes nothing is cut at `listen.send_timeout_ms`
//! (`progress::watch`; its test
//! `a_response_the_client_takes_nothing_of_is_cut_at_the_send_timeout`). Those are bounded by
//! `listen.max_connections`, as idle connections are. Counting the body
//! too would make slow readers, which the client controls, use up the budget that protects
//! against a stalled upstream, and refuse other clients' new requests 503 while they read.
//! Not measured: over HTTP/2 each stream may have data queued in hyper's send buffer up to its
//! flow-control window, so a connection of many slowly read streams can hold more than an
//! HTTP/1.1 connection does.
//!
//! One shared atomic: a compare-and-swap when a request starts and a subtraction when it ends,
//! the price of an exact bound across threads (the admission controller's in-flight count pays
//! the same).

use std::sync::atomic::{AtomicUsize, Ordering};

/// Requests held now, and the most that may be.
#[derive(Debug)]
pub struct InProgress {
    limit: usize,
    held: AtomicUsize,
}

impl InProgress {
    /// A budget of `limit` requests.
    pub fn new(limit: usize) -> Self {
        InProgress {
            limit,
            held: AtomicUsize::new(0),
        }
    }

    /// One more request, held until the guard is dropped; `None` at the limit.
    pub fn begin(&self) -> Option<Holding<'_>> {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .ok()?;
        Some(Holding(self))
    }

    /// Requests held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// The most that may be held.
    pub fn limit(&self) -> usize {
        self.limit
    }
}

/// One request's place in an [`InProgress`] budget, given back when dropped.
#[derive(Debug)]
pub struct Holding<'a>(&'a InProgress);

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests;
