//! The queue wait's timer, on tokio's paused clock and a manual controller clock.

use std::sync::Arc;
use std::time::Duration;

use spillway_core::controller::{
    Admission, AdmissionConfig, AdmissionController, AdmissionRequest, RefusalReason,
};
use spillway_core::limit::{FixedConfig, LimitConfig};
use spillway_core::{Criticality, ManualClock, PerCriticality};

const MS: Duration = Duration::from_millis(1);

/// One slot, no shedding; a FIFO queue with a 1 s max wait.
fn controller() -> (AdmissionController, ManualClock) {
    let mut cfg = AdmissionConfig {
        limit: LimitConfig::Fixed(FixedConfig { limit: 1 }),
        headroom: PerCriticality([1.0; 4]),
        shed: spillway_core::shed::ShedConfig {
            thresholds: PerCriticality([None; 4]),
            ramp: 0.1,
        },
        ..AdmissionConfig::default()
    };
    cfg.queue.max_len = Some(8);
    cfg.queue.max_wait = Duration::from_secs(1);
    let clock = ManualClock::new();
    let ctl = AdmissionController::new(cfg, Arc::new(clock.clone())).expect("valid config");
    (ctl, clock)
}

/// A waiter queued before any service time is known has its timer at its deadline. The first
/// answer shows the service takes 50 ms: the controller brings its give-up time forward to the
/// deadline less that, and the wait ends there, not at the timer first armed.
#[tokio::test(start_paused = true)]
async fn the_wait_ends_at_a_give_up_time_brought_forward() {
    let (ctl, clock) = controller();
    let req = |c| AdmissionRequest::new("alice", c);
    let Admission::Admitted(running) = ctl.admit(&req(Criticality::Critical)) else {
        panic!("the first request takes the slot");
    };
    // Served first when the slot frees, so the waiter below stays queued.
    let Admission::Queued(first) = ctl.admit(&req(Criticality::CriticalPlus)) else {
        panic!("queued behind the first");
    };
    let deadline = ctl.now() + 200 * MS;
    let Admission::Queued(q) = ctl.admit(&AdmissionRequest {
        deadline: Some(deadline),
        ..req(Criticality::Critical)
    }) else {
        panic!("queued");
    };
    assert_eq!(q.give_up_at(), deadline, "no service time known yet");
    let waiting = tokio::spawn(super::wait_in_queue(q));
    tokio::task::yield_now().await;

    clock.advance(50 * MS);
    drop(running);
    let _served = first.await.expect("granted the freed slot");
    // Past the deadline less 50 ms, before the deadline itself.
    tokio::time::advance(160 * MS).await;
    let refused = tokio::time::timeout(10 * MS, waiting)
        .await
        .expect("the wait ended at the brought-forward time, not at the deadline")
        .expect("the task did not panic")
        .expect_err("refused");
    assert_eq!(refused.reason, RefusalReason::DeadlineExceeded);
}
