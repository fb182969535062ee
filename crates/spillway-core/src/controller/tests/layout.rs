//! The controller's memory layout: the fast path's fields come first.

use std::mem::offset_of;

use super::{Inner, HOT_BYTES};

/// The fields every admission and release reads end within the first [`HOT_BYTES`] of the
/// `Arc` allocation (16 bytes of counts, then `Inner`): the layout note's promise.
#[test]
fn the_fast_path_fields_share_the_first_cache_lines() {
    const ARC_COUNTS: usize = 16;
    let ends = [
        ("clock", offset_of!(Inner, clock) + 16),
        (
            "limiter",
            offset_of!(Inner, limiter) + std::mem::size_of::<crate::limiter::Limiter>(),
        ),
        ("queued", offset_of!(Inner, queued) + 8),
        ("queue_next", offset_of!(Inner, queue_next) + 16),
        ("queue_data", offset_of!(Inner, queue_data) + 2),
        ("service", offset_of!(Inner, service) + 8),
        (
            "random",
            offset_of!(Inner, random)
                + std::mem::size_of::<
                    std::sync::OnceLock<std::sync::Arc<dyn crate::random::RandomSource>>,
                >(),
        ),
        ("has_signals", offset_of!(Inner, has_signals) + 1),
        ("shed", offset_of!(Inner, shed) + 32),
        ("quota", offset_of!(Inner, quota) + 32),
        ("counters.admitted", offset_of!(Inner, counters) + 32),
    ];
    for (name, end) in ends {
        assert!(
            ARC_COUNTS + end <= HOT_BYTES,
            "{name} ends at {}",
            ARC_COUNTS + end
        );
    }
}

/// The prefetch hints (cargo feature `hints`): where a queue or an enqueue will read.
#[cfg(feature = "hints")]
mod hints {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::clock::ManualClock;
    use crate::controller::{Admission, AdmissionConfig, AdmissionController, AdmissionRequest};
    use crate::limit::{FixedConfig, LimitConfig};
    use crate::queue::{AdmissionQueue, QueueConfig};
    use crate::Criticality;

    /// The queue hints name nothing while nobody waits; with someone queued, the lock word's line,
    /// the queue's head lines and the waiting class's deque and front entry — and nothing again
    /// once the waiter has been served.
    #[test]
    fn queue_hints_follow_the_queue() {
        let ctl = one_slot_and_a_queue();
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

    /// The enqueue hints name nothing while a slot is free; once the only slot is taken, the
    /// queue's configuration, its lock word, head and the class deque a first attempt of that
    /// criticality joins (all inside the queue), and that criticality's `enqueued` counter.
    #[test]
    fn enqueue_hints_name_what_joining_the_queue_reads_when_no_slot_is_free() {
        let ctl = one_slot_and_a_queue();
        let c = Criticality::Critical;
        let hints = || {
            let mut v = Vec::new();
            ctl.enqueue_hints(c, |p| v.push(p as usize));
            v
        };
        assert!(hints().is_empty(), "a slot is free");
        let Admission::Admitted(permit) = ctl.admit(&AdmissionRequest::new("", c)) else {
            panic!("the first request takes the only slot")
        };
        let named = hints();
        let inner = &*ctl.inner;
        let queue = &inner.queue as *const _ as usize;
        let end = queue + size_of_val(&inner.queue);
        let head_lines = AdmissionQueue::<()>::HEAD_BYTES.div_ceil(64);
        let config = &inner.queue_cfg as *const _ as usize;
        let counter = &inner.counters.enqueued[c.index()] as *const _ as usize;
        assert_eq!(named.first(), Some(&config), "{named:?}");
        assert_eq!(named.last(), Some(&counter), "{named:?}");
        let in_queue = &named[1..named.len() - 1];
        // The lock word, the head's lines (one more when it starts mid-line), the deque.
        assert!(
            (2 + head_lines..=3 + head_lines).contains(&in_queue.len()),
            "{named:?}"
        );
        assert!(
            in_queue.iter().all(|a| (queue..end).contains(a)),
            "{named:?}"
        );
        // The last queue address is the class deque, past the head.
        let data = queue + usize::from(inner.queue_data);
        assert_eq!(
            in_queue.last(),
            Some(&(data + AdmissionQueue::<()>::class_offset(c))),
            "{named:?}"
        );
        drop(permit);
        assert!(hints().is_empty(), "the slot is free again");
    }

    /// A controller with one slot (a fixed limit of 1) and a queue of 4.
    fn one_slot_and_a_queue() -> AdmissionController {
        let cfg = AdmissionConfig {
            limit: LimitConfig::Fixed(FixedConfig { limit: 1 }),
            queue: QueueConfig {
                max_len: Some(4),
                max_wait: Duration::from_secs(1),
                ..QueueConfig::default()
            },
            ..AdmissionConfig::default()
        };
        AdmissionController::new(cfg, Arc::new(ManualClock::new())).expect("valid")
    }
}
