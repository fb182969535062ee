//! The calculator's question: given the traffic, what does shedding the sheddable share buy?
//!
//! Why it is shaped like this: the reference text's default case is a service asked for more than
//! it completes (1,150 req/s at a capacity of 1,000). Without shedding there is no latency number
//! at all — the queue never drains — so "unbounded" is an answer here, not an error. With
//! shedding, the plan refuses only as much of the sheddable traffic as it takes to bring arrivals
//! down to the rate where queueing alone meets the target ([`super::max_arrival_rate`]), because
//! shedding more than that refuses work the service could have done well. If the whole
//! sheddable share is not enough, the plan says so ([`ShedPlan::shortfall_rate`]): "sometimes
//! the answer really is more capacity".

use super::{
    check_rate, check_servers, check_service_time, invalid, max_arrival_rate, ErlangError, Latency,
    MmcQueue, WaitTarget,
};

/// The calculator's inputs.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ShedInput {
    /// Workers (requests served in parallel), `1..=MAX_SERVERS`.
    pub servers: u32,
    /// Mean work per request, seconds, `> 0`.
    pub service_time_secs: f64,
    /// Offered load, requests per second, `>= 0`; may exceed capacity.
    pub arrival_rate: f64,
    /// The share of arrivals that may be refused (criticality SHEDDABLE and the like), `0..=1`.
    pub sheddable_share: f64,
    /// The latency to protect; [`WaitTarget::knee`] when the user gives none.
    pub target: WaitTarget,
}

/// The calculator's answer. Every number is finite; `None` latency means unbounded.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ShedPlan {
    /// The inputs this answers.
    pub input: ShedInput,
    /// `servers / service_time`, requests per second.
    pub capacity: f64,
    /// `arrival_rate / capacity`; above 1 the queue grows without bound.
    pub offered_utilisation: f64,
    /// Start refusing above this arrival rate: past it, queueing alone breaks the target.
    pub refuse_above_rate: f64,
    /// `refuse_above_rate / capacity`.
    pub refuse_above_utilisation: f64,
    /// Latency with every arrival admitted; `None` when arrivals >= capacity (the queue never
    /// drains).
    pub without_shedding: Option<Latency>,
    /// `arrival_rate × sheddable_share`: the most that may be refused.
    pub sheddable_rate: f64,
    /// Refused by the plan: `min(sheddable_rate, max(0, arrival_rate − refuse_above_rate))`.
    pub shed_rate: f64,
    /// `arrival_rate − shed_rate`: what the workers see.
    pub served_rate: f64,
    /// Latency of the served traffic after shedding; `None` if still at or above capacity.
    pub with_shedding: Option<Latency>,
    /// Whether the served traffic meets the target.
    pub meets_target: bool,
    /// Arrivals above `refuse_above_rate` that the sheddable share cannot cover: this much must
    /// come from more capacity or from refusing more important traffic. 0 when shedding suffices.
    pub shortfall_rate: f64,
}

/// Answers the calculator's question for `input`; errors name the bad field. Arrivals above
/// capacity are not an error: the unshed latency is then `None` (unbounded).
pub fn plan_shedding(input: &ShedInput) -> Result<ShedPlan, ErlangError> {
    let c = check_servers(input.servers)?;
    let s = check_service_time(input.service_time_secs)?;
    let lambda = check_rate("arrival_rate", input.arrival_rate)?;
    let share = input.sheddable_share;
    if !(share.is_finite() && (0.0..=1.0).contains(&share)) {
        return Err(invalid(
            "sheddable_share",
            share,
            "a fraction of arrivals from 0 to 1",
        ));
    }
    let refuse_above_rate = max_arrival_rate(input.servers, s, input.target)?;
    let capacity = c / s; // finite: max_arrival_rate checked it.

    let without_shedding = latency_or_unbounded(input.servers, s, lambda)?;
    let sheddable_rate = lambda * share;
    let excess = (lambda - refuse_above_rate).max(0.0);
    let shed_rate = sheddable_rate.min(excess);
    let served_rate = (lambda - shed_rate).max(0.0);
    let with_shedding = latency_or_unbounded(input.servers, s, served_rate)?;
    let meets_target = match with_shedding {
        None => false,
        Some(l) => meets(&l, input.target, s, input.servers, served_rate)?,
    };
    Ok(ShedPlan {
        input: *input,
        capacity,
        offered_utilisation: lambda / capacity,
        refuse_above_rate,
        refuse_above_utilisation: refuse_above_rate / capacity,
        without_shedding,
        sheddable_rate,
        shed_rate,
        served_rate,
        with_shedding,
        meets_target,
        shortfall_rate: (excess - shed_rate).max(0.0),
    })
}

fn latency_or_unbounded(
    servers: u32,
    service_time_secs: f64,
    arrival_rate: f64,
) -> Result<Option<Latency>, ErlangError> {
    match MmcQueue::new(servers, service_time_secs, arrival_rate) {
        Ok(q) => Ok(Some(q.latency())),
        Err(ErlangError::Saturated { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

fn meets(
    latency: &Latency,
    target: WaitTarget,
    service_time_secs: f64,
    servers: u32,
    served_rate: f64,
) -> Result<bool, ErlangError> {
    let wait = match target {
        WaitTarget::Mean { .. } => latency.mean_wait_secs,
        WaitTarget::Quantile { quantile, .. } => {
            MmcQueue::new(servers, service_time_secs, served_rate)?.wait_quantile_secs(quantile)?
        }
    };
    // Shedding lands on the bisection's boundary; allow its last-bit rounding.
    Ok(wait <= target.wait_secs() * (1.0 + 1e-9) + f64::MIN_POSITIVE)
}
