//! [`ControllerSnapshot`]: the controller's state and counters, for status pages.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::criticality::PerCriticality;

use super::refusal::Counters;
use super::{AdmissionController, RefusalCounts};

/// The controller's state, for status pages.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ControllerSnapshot {
    /// The limit algorithm's name.
    pub algorithm: &'static str,
    /// Current concurrency limit.
    pub limit: usize,
    /// Requests holding a slot.
    pub in_flight: usize,
    /// Requests waiting in the queue.
    pub queued: usize,
    /// Current queue bound.
    pub queue_capacity: usize,
    /// Current utilisation (max of signals and in-flight / limit).
    pub utilisation: f64,
    /// Whether the task counts as overloaded.
    pub overloaded: bool,
    /// Expected service time (EWMA).
    pub expected_service_time: Duration,
    /// Requests holding a slot, per criticality.
    pub in_flight_by_criticality: PerCriticality<usize>,
    /// Requests waiting, per criticality.
    pub queued_by_criticality: PerCriticality<usize>,
    /// Health checks being served (they hold no slot).
    pub health_checks_in_flight: usize,
    /// Requests admitted so far (at once or from the queue), per criticality.
    pub admitted: PerCriticality<u64>,
    /// Requests that entered the queue so far, per criticality.
    pub enqueued: PerCriticality<u64>,
    /// Queued requests abandoned by their caller, per criticality.
    pub cancelled: PerCriticality<u64>,
    /// Refusals so far, by reason × criticality.
    pub refused: RefusalCounts,
    /// Health checks served so far.
    pub health_checks: u64,
    /// Each configured signal's name and current reading.
    pub signals: Vec<(String, f64)>,
    /// Signals ignored because [`MAX_SIGNALS`](super::MAX_SIGNALS) were already configured.
    pub signals_ignored: u64,
}

impl AdmissionController {
    /// Current state and counters.
    pub fn snapshot(&self) -> ControllerSnapshot {
        let inner = &self.inner;
        let now = inner.clock.now();
        let (queued, by_c) = {
            let q = inner.lock_queue();
            (q.len(), q.len_by_criticality())
        };
        let utilisation = inner.utilisation(now);
        let limit = inner.limiter.limit();
        let counters = &inner.counters;
        ControllerSnapshot {
            algorithm: inner.limiter.algorithm_name(),
            limit,
            in_flight: inner.limiter.in_flight(),
            queued,
            queue_capacity: inner.queue_cfg.capacity(limit),
            utilisation,
            overloaded: inner.overloaded(utilisation, queued),
            expected_service_time: inner.service.get(),
            in_flight_by_criticality: PerCriticality::from_fn(|c| inner.limiter.in_flight_of(c)),
            queued_by_criticality: PerCriticality(by_c),
            health_checks_in_flight: counters.health_in_flight.load(Ordering::Relaxed),
            admitted: Counters::read(&counters.admitted),
            enqueued: Counters::read(&counters.enqueued),
            cancelled: Counters::read(&counters.cancelled),
            refused: counters.refusal_counts(),
            health_checks: counters.health_checks.load(Ordering::Relaxed),
            signals: inner
                .signals
                .iter()
                .map_while(|s| s.get())
                .map(|s| (s.name().to_owned(), s.utilisation(now)))
                .collect(),
            signals_ignored: inner.signals_ignored.load(Ordering::Relaxed),
        }
    }
}
