//! A periodic wake-up for an HTTP/2 request while it waits, as an HTTP/1.1 request gets one.
//!
//! Why: a request that waits for its upstream lets go of the buffers that wait with it (its
//! upstream connection's read and write buffers) at its second wake-up without an answer
//! (`upstream::conn::http1`'s `Exchange`), so that requests held in a stall cost little
//! (issue 29; `bench/stall-memory.py`). An HTTP/1.1 request runs in its connection's task, which
//! the connection's timer ([`crate::progress::watch`]) wakes every quarter of the shortest client
//! timeout; but hyper runs each HTTP/2 stream's request in a task of its own, which nothing
//! wakes until the upstream answers, so its buffers stayed for the whole stall. [`Nudged`]
//! wakes such a request at the same period once it has waited: a timer armed at its first
//! wait (a request answered within the period only registers and cancels it) and re-armed each
//! time it fires.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

pin_project_lite::pin_project! {
    /// `inner`, polled again every `every` while it waits (never with `None`).
    pub(super) struct Nudged<F> {
        #[pin]
        inner: F,
        #[pin]
        timer: Option<Sleep>,
        every: Option<Duration>,
    }
}

impl<F> Nudged<F> {
    /// `inner`, woken every `every` while it waits; `None` leaves it as it is.
    pub(super) fn new(inner: F, every: Option<Duration>) -> Self {
        Nudged {
            inner,
            timer: None,
            every,
        }
    }
}

impl<F: Future> Future for Nudged<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let mut this = self.project();
        if let Poll::Ready(out) = this.inner.poll(cx) {
            return Poll::Ready(out);
        }
        let Some(every) = *this.every else {
            return Poll::Pending;
        };
        match this.timer.as_mut().as_pin_mut() {
            None => this
                .timer
                .set(Some(tokio::time::sleep_until(Instant::now() + every))),
            Some(mut t) => {
                if t.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                // Fired: `inner` has just been polled by this wake-up; the next one in a period.
                t.reset(Instant::now() + every);
            }
        }
        // Registers the (new) deadline with this task's waker.
        if let Some(t) = this.timer.as_pin_mut() {
            let _ = t.poll(cx);
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests;
