//! The controller's memory layout: the fast path's fields come first.

use std::mem::{offset_of, size_of};

use std::sync::Arc;
use std::time::Duration;

use super::{Admission, AdmissionConfig, AdmissionController, AdmissionRequest, Inner, HOT_BYTES};
use crate::clock::ManualClock;
use crate::limit::{FixedConfig, LimitConfig};
use crate::queue::{AdmissionQueue, QueueConfig};
use crate::Criticality;

/// The fields every admission and release reads end within the first [`HOT_BYTES`] of the
/// `Arc` allocation (16 bytes of counts, then `Inner`), and that span is 368 bytes: 6 or 7
/// cache lines depending on where the allocator puts it (16-byte aligned), not the 8–9 of the
/// 512 it was while cold configuration and counters sat among the hot fields. A field added
/// to the fast path, or a cold one moved into it, fails here.
#[test]
fn the_fast_path_fields_share_the_first_cache_lines() {
    const ARC_COUNTS: usize = 16;
    let ends = [
        ("clock", offset_of!(Inner, clock) + 16),
        ("queued", offset_of!(Inner, queued) + 8),
        ("queue_next", offset_of!(Inner, queue_next) + 16),
        ("service", offset_of!(Inner, service) + 8),
        ("overloaded_at", offset_of!(Inner, overloaded_at) + 8),
        (
            "random",
            offset_of!(Inner, random)
                + size_of::<std::sync::OnceLock<Arc<dyn crate::random::RandomSource>>>(),
        ),
        ("max_attempts", offset_of!(Inner, max_attempts) + 4),
        ("has_signals", offset_of!(Inner, has_signals) + 1),
        ("queue_data", offset_of!(Inner, queue_data) + 2),
        (
            "shed",
            offset_of!(Inner, shed) + size_of::<crate::shed::ShedPolicy>(),
        ),
        ("admitted", offset_of!(Inner, admitted) + 32),
        (
            "limiter",
            offset_of!(Inner, limiter) + size_of::<crate::limiter::Limiter>(),
        ),
        ("quota's free path", offset_of!(Inner, quota) + 32),
    ];
    for (name, end) in ends {
        assert!(
            ARC_COUNTS + end <= HOT_BYTES,
            "{name} ends at {}",
            ARC_COUNTS + end
        );
    }
    assert_eq!(
        size_of::<crate::shed::ShedPolicy>(),
        40,
        "thresholds and ramp only"
    );
    assert_eq!(HOT_BYTES, 368);
    // What follows the span is never read by an admitted request's admit and release.
    assert!(ARC_COUNTS + offset_of!(Inner, counters) >= HOT_BYTES);
    assert!(ARC_COUNTS + offset_of!(Inner, signals) >= HOT_BYTES);
    assert!(ARC_COUNTS + offset_of!(Inner, queue) >= HOT_BYTES);
}

/// The queue hints name nothing while nobody waits; with someone queued, the lock word's line,
/// the queue's head lines and the waiting class's deque and front entry — and nothing again
/// once the waiter has been served.
#[test]
fn queue_hints_follow_the_queue() {
    let cfg = AdmissionConfig {
        limit: LimitConfig::Fixed(FixedConfig { limit: 1 }),
        queue: QueueConfig {
            max_len: Some(4),
            max_wait: Duration::from_secs(1),
            ..QueueConfig::default()
        },
        ..AdmissionConfig::default()
    };
    let ctl = AdmissionController::new(cfg, Arc::new(ManualClock::new())).expect("valid");
    let hints = || {
        let mut v = Vec::new();
        ctl.queue_hints(|p| v.push(p as usize));
        v
    };
    let req = AdmissionRequest::new("", Criticality::Critical);
    assert!(hints().is_empty(), "empty queue");
    let Admission::Admitted(permit) = ctl.admit(&req) else {
        panic!("the first request takes the only slot")
    };
    let Admission::Queued(waiter) = ctl.admit(&req) else {
        panic!("the second request waits")
    };
    let named = hints();
    let head_lines = AdmissionQueue::<()>::HEAD_BYTES.div_ceil(64);
    assert!(
        (1 + head_lines + 2..=1 + head_lines + 3).contains(&named.len()),
        "{named:?}"
    );
    let queue = &ctl.inner.queue as *const _ as usize;
    let end = queue + size_of_val(&ctl.inner.queue);
    let inside = named.iter().filter(|&&a| (queue..end).contains(&a)).count();
    assert_eq!(
        inside,
        named.len() - 1,
        "all but the entry are in the queue itself"
    );
    drop(permit); // the waiter is granted: the queue is empty again
    assert!(hints().is_empty(), "{:?}", hints());
    drop(waiter);
}
