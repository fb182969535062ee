//! The budget for request bodies buffered for retries, shared by every request on every thread
//! (`upstream.retry_buffer_total_bytes`).
//!
//! Why a budget across requests and not only a size per request: `retry_buffer_bytes` bounds
//! one body, but not how many are buffered at once; 10,000 connections each uploading 64 KiB
//! held 640 MB. When the budget is spent, a body that would be buffered is streamed to the
//! upstream as it arrives instead: the request is served as a larger body would be, only not
//! retried on another task (counted as `not_retried_large_body` when a retry was wanted).
//! Streaming rather than refusing: a retry is an optimisation, the request itself is not; and
//! a streamed body is bounded by the connection's own read buffer, so it costs no more memory.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Bytes of request bodies buffered now, and the most that may be.
#[derive(Debug)]
pub struct BodyBudget {
    limit: AtomicUsize,
    used: AtomicUsize,
}

impl BodyBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(BodyBudget {
            limit: AtomicUsize::new(limit),
            used: AtomicUsize::new(0),
        })
    }

    /// A reload's new limit (bodies buffered under the old one keep their share until they are
    /// released; only new grants see it).
    pub fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// Bytes granted and not yet released.
    pub fn in_use(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// `n` bytes of the budget, held until the grant is dropped; `None` if that would take it
    /// past its limit.
    pub fn take(self: &Arc<Self>, n: usize) -> Option<BodyGrant> {
        let limit = self.limit.load(Ordering::Relaxed);
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |used| {
                used.checked_add(n).filter(|&after| after <= limit)
            })
            .ok()?;
        Some(BodyGrant {
            budget: Arc::clone(self),
            bytes: n,
        })
    }
}

/// A share of a [`BodyBudget`], given back when dropped.
#[derive(Debug)]
pub struct BodyGrant {
    budget: Arc<BodyBudget>,
    bytes: usize,
}

impl Drop for BodyGrant {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_stop_at_the_limit_and_come_back_when_dropped() {
        let b = BodyBudget::new(100);
        let a = b.take(60).expect("within");
        assert!(b.take(41).is_none(), "60 + 41 > 100");
        let c = b.take(40).expect("exactly to the limit");
        assert_eq!(b.in_use(), 100);
        assert!(b.take(1).is_none());
        drop(a);
        assert_eq!(b.in_use(), 40);
        let d = b.take(60).expect("room again");
        drop((c, d));
        assert_eq!(b.in_use(), 0);
        // A smaller limit after a reload: what is held stays held, new grants see the limit.
        let e = b.take(80).unwrap();
        b.set_limit(50);
        assert!(b.take(1).is_none());
        drop(e);
        assert!(b.take(50).is_some());
        assert!(b.take(usize::MAX).is_none(), "no overflow");
    }
}
