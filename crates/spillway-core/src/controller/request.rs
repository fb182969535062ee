//! What a request tells the controller, and what it gets back.

use std::time::Instant;

use crate::criticality::Criticality;

use super::permit::{Permit, QueuedAdmission};
use super::refusal::Refusal;

/// One request asking to be admitted. Borrowed strings: building it allocates nothing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdmissionRequest<'a> {
    /// Who pays (quota account); unknown customers share the default account.
    pub customer: &'a str,
    /// How important it is.
    pub criticality: Criticality,
    /// What it does (for the caller's metrics; the controller does not look at it).
    pub operation: &'a str,
    /// When its caller gives up, if known (propagated deadline).
    pub deadline: Option<Instant>,
    /// 1 for the first attempt, 2 for the first retry, …
    pub attempt: u32,
    /// Expected cost in quota units (e.g. CPU-seconds); corrected on release via
    /// [`Permit::set_actual_cost`].
    pub estimated_cost: f64,
    /// A load-balancer health check: never refused, never counted against the limit (AWS
    /// Builders' Library: a task that fails health checks is removed just when the fleet is short).
    pub health_check: bool,
    /// Finishes work already started (the next page, the commit): served before new work.
    pub continuation: bool,
}

impl<'a> AdmissionRequest<'a> {
    /// A first attempt of `customer` at `criticality`, cost 1, no deadline.
    pub fn new(customer: &'a str, criticality: Criticality) -> Self {
        AdmissionRequest {
            customer,
            criticality,
            operation: "",
            deadline: None,
            attempt: 1,
            estimated_cost: 1.0,
            health_check: false,
            continuation: false,
        }
    }

    /// A health check (never refused).
    pub fn health_check() -> Self {
        AdmissionRequest {
            health_check: true,
            ..AdmissionRequest::new("", Criticality::CriticalPlus)
        }
    }
}

impl Default for AdmissionRequest<'_> {
    fn default() -> Self {
        AdmissionRequest::new("", Criticality::default())
    }
}

/// The controller's answer.
#[derive(Debug)]
#[must_use = "an admitted permit must be held until the response is complete"]
pub enum Admission {
    /// Run it now; hold the permit until the response is complete.
    Admitted(Permit),
    /// Wait: await the future (with a timer at [`QueuedAdmission::give_up_at`], re-read after
    /// each `Pending` poll: it can move earlier).
    Queued(QueuedAdmission),
    /// Refused, with the reason.
    Refused(Refusal),
}

impl Admission {
    /// The refusal, if refused.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            Admission::Refused(r) => Some(r),
            _ => None,
        }
    }

    /// Whether admitted at once.
    pub fn is_admitted(&self) -> bool {
        matches!(self, Admission::Admitted(_))
    }

    /// Whether queued.
    pub fn is_queued(&self) -> bool {
        matches!(self, Admission::Queued(_))
    }
}
