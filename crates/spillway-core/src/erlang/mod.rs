//! M/M/c (Erlang C) arithmetic: where the utilisation knee is, and when to start refusing work.
//!
//! Why this exists: "keep utilisation under 70%" is quoted without the one number that decides
//! whether it is true — how many requests the service handles in parallel. At 90% utilisation a
//! 40 ms request waits 360 ms behind one worker and about 4 ms behind forty. `spillway calc`
//! prints that family of curves and answers the operational question: at what arrival rate does
//! queueing alone break the latency target, and what does shedding the sheddable share buy?
//!
//! The model is M/M/c: Poisson arrivals at rate λ, exponential service with mean `s = 1/μ`, `c`
//! identical workers, an unbounded FIFO queue. `A = λ·s` is the offered load in Erlangs and
//! `ρ = A/c` the utilisation. It is wrong about any real service's details (real arrivals are
//! burstier, capacity sags under load), so read every figure here as a floor on queueing cost,
//! not a forecast.
//!
//! Formulas (Gross & Harris, *Fundamentals of Queueing Theory*, §2.3 M/M/c; the Erlang B
//! recursion and the C-from-B identity are the standard ones in ITU-D/ITC *Teletraffic Engineering
//! Handbook* (Iversen, 2005), ch. 7 (Erlang B) and ch. 12 (Erlang C)):
//!
//! - Erlang B by recursion, `B(0) = 1`, `B(k) = A·B(k−1) / (k + A·B(k−1))`. Every term is in
//!   `[0, 1]`, so there are no factorials or powers to overflow: stable for `c` in the millions.
//! - Erlang C (probability an arrival waits) from B: `C = c·B / (c − A·(1 − B))`, valid for `A < c`.
//! - Waiting time: `P(W > t) = C·e^(−(cμ−λ)t)`, so the mean wait is `W_q = C/(cμ − λ)` and the
//!   p-quantile is `max(0, ln(C/(1−p)) / (cμ − λ))`. Mean response time is `W_q + s`.
//!
//! **The knee**, precisely: the utilisation at which the mean queueing delay reaches
//! [`KNEE_WAIT_FRACTION`] (10%) of the service time — the point where queueing starts adding more
//! than a tenth to the mean response time. Because `W_q/s = C/(c(1−ρ))` depends only on `c` and
//! `ρ`, the knee depends only on the number of workers; it is found by bisection. The 10% comes
//! from the reference text's own calibration: forty workers at 90% "costs about 10% extra
//! latency" and is called comfortable (this definition puts that knee at 89.9%). The text's rule of
//! thumb, square-root staffing's `1 − 1/√c` ([`square_root_rule_knee`]), has the same direction
//! (more workers, higher knee) but sits lower, and says 0 for a single worker, so it is shown
//! alongside rather than used.

use std::fmt;

#[cfg(test)]
mod tests;

/// The largest worker count accepted. Each Erlang evaluation is O(c) and the bisections run
/// ~60 of them, so this bounds one calculation to well under a second.
pub const MAX_SERVERS: u32 = 1_000_000;

/// The knee: the utilisation at which mean queueing delay reaches this fraction of the service
/// time. 10% matches the reference text's "forty workers at 90% costs about 10% extra latency".
pub const KNEE_WAIT_FRACTION: f64 = 0.1;

/// The waiting-time quantile reported in [`Latency::p99_wait_secs`].
pub const REPORT_QUANTILE: f64 = 0.99;

/// A bad argument to one of this module's functions, or a question with no finite answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ErlangError {
    /// An argument outside what the function accepts; `argument` names it.
    #[error("invalid {argument} = {value}: expected {expected}")]
    InvalidArgument {
        /// The argument, e.g. `service_time`.
        argument: &'static str,
        /// The rejected value, rendered.
        value: String,
        /// What is accepted.
        expected: &'static str,
    },
    /// Arrivals at or above capacity where a finite answer was required: the queue never drains.
    #[error(
        "arrival rate {arrival_rate} req/s is at or above capacity {capacity} req/s: \
         the queue never drains, so waiting time is unbounded (expected arrival_rate < capacity)"
    )]
    Saturated {
        /// Arrivals, requests per second.
        arrival_rate: f64,
        /// `servers / service_time`, requests per second.
        capacity: f64,
    },
    /// The inputs are valid but the answer does not fit in an `f64` (e.g. an astronomically long
    /// service time a hair below saturation).
    #[error("{quantity} is too large to represent for these inputs")]
    Overflow {
        /// What overflowed, e.g. `mean_wait`.
        quantity: &'static str,
    },
}

fn invalid(
    argument: &'static str,
    value: impl fmt::Display,
    expected: &'static str,
) -> ErlangError {
    ErlangError::InvalidArgument {
        argument,
        value: value.to_string(),
        expected,
    }
}

fn check_servers(servers: u32) -> Result<f64, ErlangError> {
    if (1..=MAX_SERVERS).contains(&servers) {
        Ok(f64::from(servers))
    } else {
        Err(invalid(
            "servers",
            servers,
            "a whole number of workers from 1 to 1000000",
        ))
    }
}

fn check_service_time(secs: f64) -> Result<f64, ErlangError> {
    if secs.is_finite() && secs > 0.0 {
        Ok(secs)
    } else {
        Err(invalid(
            "service_time",
            secs,
            "a finite number of seconds > 0",
        ))
    }
}

fn check_rate(argument: &'static str, rate: f64) -> Result<f64, ErlangError> {
    if rate.is_finite() && rate >= 0.0 {
        Ok(rate)
    } else {
        Err(invalid(
            argument,
            rate,
            "a finite number of requests per second >= 0",
        ))
    }
}

fn check_finite(quantity: &'static str, value: f64) -> Result<f64, ErlangError> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(ErlangError::Overflow { quantity })
    }
}

/// Erlang B recursion; `c >= 1`, `a` finite and `>= 0` (callers check). Result in `[0, 1]`.
fn erlang_b_raw(c: u32, a: f64) -> f64 {
    let mut b = 1.0_f64;
    for k in 1..=c {
        let ab = a * b;
        // ab <= a is finite; k + ab cannot overflow; once b underflows to 0 it stays 0.
        b = ab / (f64::from(k) + ab);
    }
    b
}

/// Erlang C from Erlang B; requires `0 <= a < c` (callers check). Result clamped to `[0, 1]`
/// against rounding.
fn erlang_c_raw(c: u32, a: f64) -> f64 {
    let b = erlang_b_raw(c, a);
    let cf = f64::from(c);
    // c − A(1 − B) = (c − A) + A·B > 0 when A < c.
    let denom = (cf - a) + a * b;
    if denom <= 0.0 {
        return 1.0;
    }
    (cf * b / denom).clamp(0.0, 1.0)
}

/// Mean wait divided by the service time at utilisation `rho` in `[0, 1)`: `C / (c(1 − ρ))`.
fn mean_wait_ratio(c: u32, rho: f64) -> f64 {
    let cf = f64::from(c);
    let a = rho * cf;
    erlang_c_raw(c, a) / (cf * (1.0 - rho))
}

/// The Erlang B blocking probability: the share of arrivals refused by `servers` workers with
/// no queue, at `offered_load` Erlangs (`λ·s`). Any finite load `>= 0` is accepted.
pub fn erlang_b(servers: u32, offered_load: f64) -> Result<f64, ErlangError> {
    check_servers(servers)?;
    if !(offered_load.is_finite() && offered_load >= 0.0) {
        return Err(invalid(
            "offered_load",
            offered_load,
            "a finite load in Erlangs >= 0",
        ));
    }
    Ok(erlang_b_raw(servers, offered_load))
}

/// The Erlang C probability that an arrival has to wait, for `servers` workers at
/// `offered_load` Erlangs. Requires `offered_load < servers` (otherwise every arrival waits
/// forever and [`ErlangError::InvalidArgument`] names `offered_load`).
pub fn erlang_c(servers: u32, offered_load: f64) -> Result<f64, ErlangError> {
    let c = check_servers(servers)?;
    if !(offered_load.is_finite() && offered_load >= 0.0 && offered_load < c) {
        return Err(invalid(
            "offered_load",
            offered_load,
            "a load in Erlangs >= 0 and < servers",
        ));
    }
    Ok(erlang_c_raw(servers, offered_load))
}

/// `1 − 1/√c`: the square-root-staffing rule of thumb for the knee quoted by the reference text.
/// Directional only (it says 0 for one worker); see the module docs for the definition used.
pub fn square_root_rule_knee(servers: u32) -> Result<f64, ErlangError> {
    let c = check_servers(servers)?;
    Ok(1.0 - 1.0 / c.sqrt())
}

/// The knee for `servers` workers: the utilisation at which mean queueing delay reaches
/// [`KNEE_WAIT_FRACTION`] of the service time.
pub fn knee_utilisation(servers: u32) -> Result<f64, ErlangError> {
    knee_utilisation_for(servers, KNEE_WAIT_FRACTION)
}

/// The utilisation at which mean queueing delay reaches `wait_fraction` × the service time
/// (e.g. 1.0: the mean wait equals the work itself). `wait_fraction` must be finite and `>= 0`.
pub fn knee_utilisation_for(servers: u32, wait_fraction: f64) -> Result<f64, ErlangError> {
    check_servers(servers)?;
    if !(wait_fraction.is_finite() && wait_fraction >= 0.0) {
        return Err(invalid(
            "wait_fraction",
            wait_fraction,
            "a finite multiple of the service time >= 0",
        ));
    }
    Ok(bisect_utilisation(|rho| {
        mean_wait_ratio(servers, rho) <= wait_fraction
    }))
}

/// The largest utilisation in `[0, 1)` at which `ok` holds, for an `ok` that is true at 0 and
/// turns false once and for all as utilisation rises (every waiting-time measure here is
/// increasing in ρ). Bisection: ~50 halvings reach f64 resolution near 1.
fn bisect_utilisation(ok: impl Fn(f64) -> bool) -> f64 {
    let (mut lo, mut hi) = (0.0_f64, 1.0_f64);
    if !ok(lo) {
        return 0.0;
    }
    for _ in 0..200 {
        let mid = lo + (hi - lo) / 2.0;
        if mid <= lo || mid >= hi {
            break;
        }
        if ok(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The number of workers a measured capacity implies: `round(capacity × service_time)`, by
/// Little's law (busy workers = throughput × time each). Errors if that rounds to 0 or exceeds
/// [`MAX_SERVERS`], naming `capacity`.
pub fn workers_for_capacity(capacity: f64, service_time_secs: f64) -> Result<u32, ErlangError> {
    let s = check_service_time(service_time_secs)?;
    let cap = check_rate("capacity", capacity)?;
    let workers = (cap * s).round();
    if workers >= 1.0 && workers <= f64::from(MAX_SERVERS) {
        // In range by the check above, so the cast is exact.
        Ok(workers as u32)
    } else {
        Err(invalid(
            "capacity",
            capacity,
            "requests per second such that capacity × service time rounds to 1..=1000000 workers",
        ))
    }
}

/// A latency target that decides when to start refusing work.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(tag = "kind", rename_all = "snake_case")
)]
pub enum WaitTarget {
    /// The mean queueing delay must stay at or below `wait_secs`.
    Mean {
        /// Seconds.
        wait_secs: f64,
    },
    /// The `quantile` (in `(0, 1)`, e.g. 0.99) of queueing delay must stay at or below `wait_secs`.
    Quantile {
        /// E.g. 0.99 for p99.
        quantile: f64,
        /// Seconds.
        wait_secs: f64,
    },
}

impl WaitTarget {
    /// The default target: the mean wait at the knee, [`KNEE_WAIT_FRACTION`] × `service_time_secs`.
    pub fn knee(service_time_secs: f64) -> Result<Self, ErlangError> {
        let s = check_service_time(service_time_secs)?;
        Ok(WaitTarget::Mean {
            wait_secs: KNEE_WAIT_FRACTION * s,
        })
    }

    /// The waiting time the target allows, in seconds.
    pub fn wait_secs(&self) -> f64 {
        match *self {
            WaitTarget::Mean { wait_secs } | WaitTarget::Quantile { wait_secs, .. } => wait_secs,
        }
    }

    fn validate(&self) -> Result<(), ErlangError> {
        let w = self.wait_secs();
        if !(w.is_finite() && w >= 0.0) {
            return Err(invalid("target_wait", w, "a finite number of seconds >= 0"));
        }
        if let WaitTarget::Quantile { quantile, .. } = *self {
            check_quantile("target_quantile", quantile)?;
        }
        Ok(())
    }
}

fn check_quantile(argument: &'static str, p: f64) -> Result<f64, ErlangError> {
    if p.is_finite() && (0.0..1.0).contains(&p) {
        Ok(p)
    } else {
        Err(invalid(
            argument,
            p,
            "a probability >= 0 and < 1 (e.g. 0.99)",
        ))
    }
}

/// `max(0, ln(C/(1−p)))`: the p-quantile of waiting time in units of `1/(cμ − λ)`.
fn quantile_factor(prob_wait: f64, p: f64) -> f64 {
    if prob_wait <= 1.0 - p {
        0.0
    } else {
        (prob_wait / (1.0 - p)).ln().max(0.0)
    }
}

/// The arrival rate at which to start refusing: the highest rate at which `servers` workers
/// taking `service_time_secs` each still meet `target`. Above it, queueing alone breaks the
/// target, so that is where shedding should begin. Always below capacity.
pub fn max_arrival_rate(
    servers: u32,
    service_time_secs: f64,
    target: WaitTarget,
) -> Result<f64, ErlangError> {
    let c = check_servers(servers)?;
    let s = check_service_time(service_time_secs)?;
    target.validate()?;
    let capacity = check_finite("capacity", c / s)?;
    // Compare in units of the service time so the predicate sees only c and ρ.
    let rho = match target {
        WaitTarget::Mean { wait_secs } => {
            let limit = wait_secs / s;
            bisect_utilisation(|rho| mean_wait_ratio(servers, rho) <= limit)
        }
        WaitTarget::Quantile {
            quantile,
            wait_secs,
        } => {
            let limit = wait_secs / s;
            bisect_utilisation(|rho| {
                let cw = erlang_c_raw(servers, rho * c);
                quantile_factor(cw, quantile) / (c * (1.0 - rho)) <= limit
            })
        }
    };
    Ok(rho * capacity)
}

/// Queueing delay and response time of one stable M/M/c system. All times in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Latency {
    /// `λ / capacity`, in `[0, 1)`.
    pub utilisation: f64,
    /// Erlang C: the share of requests that wait at all.
    pub prob_wait: f64,
    /// Mean time in the queue before a worker picks the request up.
    pub mean_wait_secs: f64,
    /// The [`REPORT_QUANTILE`] (p99) of time in the queue.
    pub p99_wait_secs: f64,
    /// Mean wait plus mean service time.
    pub mean_response_secs: f64,
}

/// A validated, stable M/M/c system: `servers` workers, mean service time, arrival rate below
/// capacity. Constructing one is the only check; the methods then cannot fail or return NaN.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct MmcQueue {
    servers: u32,
    service_time_secs: f64,
    arrival_rate: f64,
    /// `C`, computed once (O(c)).
    prob_wait: f64,
    /// `cμ − λ`, the decay rate of the waiting-time tail, > 0.
    drain_rate: f64,
}

impl MmcQueue {
    /// `servers` workers, `service_time_secs` mean work per request, `arrival_rate` requests per
    /// second. Errors name the bad argument; arrivals at or above capacity are
    /// [`ErlangError::Saturated`].
    pub fn new(
        servers: u32,
        service_time_secs: f64,
        arrival_rate: f64,
    ) -> Result<Self, ErlangError> {
        let c = check_servers(servers)?;
        let s = check_service_time(service_time_secs)?;
        let lambda = check_rate("arrival_rate", arrival_rate)?;
        let capacity = check_finite("capacity", c / s)?;
        let a = lambda * s;
        if a >= c {
            return Err(ErlangError::Saturated {
                arrival_rate: lambda,
                capacity,
            });
        }
        let drain_rate = (c - a) / s;
        // 1/drain_rate bounds the mean wait; the p99 is at most ln(100) ≈ 4.6 times it.
        check_finite("mean_wait", s + 5.0 / drain_rate)?;
        Ok(MmcQueue {
            servers,
            service_time_secs: s,
            arrival_rate: lambda,
            prob_wait: erlang_c_raw(servers, a),
            drain_rate,
        })
    }

    /// The same system defined by utilisation `ρ = λ·s/c` in `[0, 1)` instead of arrival rate.
    pub fn at_utilisation(
        servers: u32,
        service_time_secs: f64,
        utilisation: f64,
    ) -> Result<Self, ErlangError> {
        let c = check_servers(servers)?;
        let s = check_service_time(service_time_secs)?;
        if !(utilisation.is_finite() && (0.0..1.0).contains(&utilisation)) {
            return Err(invalid(
                "utilisation",
                utilisation,
                "a fraction of capacity >= 0 and < 1",
            ));
        }
        let capacity = check_finite("capacity", c / s)?;
        Self::new(servers, s, utilisation * capacity)
    }

    /// Workers.
    pub fn servers(&self) -> u32 {
        self.servers
    }

    /// Mean service time, seconds.
    pub fn service_time_secs(&self) -> f64 {
        self.service_time_secs
    }

    /// Arrivals, requests per second.
    pub fn arrival_rate(&self) -> f64 {
        self.arrival_rate
    }

    /// `servers / service_time`: the most the system can complete, requests per second.
    pub fn capacity(&self) -> f64 {
        f64::from(self.servers) / self.service_time_secs
    }

    /// `A = λ·s`, Erlangs: the mean number of busy workers.
    pub fn offered_load(&self) -> f64 {
        self.arrival_rate * self.service_time_secs
    }

    /// `ρ = A/c`, in `[0, 1)`.
    pub fn utilisation(&self) -> f64 {
        self.offered_load() / f64::from(self.servers)
    }

    /// Erlang C: the probability that an arrival finds every worker busy and waits.
    pub fn prob_wait(&self) -> f64 {
        self.prob_wait
    }

    /// Mean queueing delay `W_q = C/(cμ − λ)`, seconds.
    pub fn mean_wait_secs(&self) -> f64 {
        self.prob_wait / self.drain_rate
    }

    /// Mean response time, `W_q + s`, seconds.
    pub fn mean_response_secs(&self) -> f64 {
        self.mean_wait_secs() + self.service_time_secs
    }

    /// `P(W > t) = C·e^(−(cμ−λ)t)` for a wait of `t_secs >= 0`.
    pub fn prob_wait_exceeds(&self, t_secs: f64) -> Result<f64, ErlangError> {
        if !(t_secs.is_finite() && t_secs >= 0.0) {
            return Err(invalid("t", t_secs, "a finite number of seconds >= 0"));
        }
        Ok(self.prob_wait * (-self.drain_rate * t_secs).exp())
    }

    /// The `p`-quantile of queueing delay, seconds: `max(0, ln(C/(1−p)) / (cμ − λ))`.
    /// `p` must be in `[0, 1)` (the 100th percentile of an exponential tail is unbounded).
    pub fn wait_quantile_secs(&self, p: f64) -> Result<f64, ErlangError> {
        let p = check_quantile("p", p)?;
        check_finite(
            "wait_quantile",
            quantile_factor(self.prob_wait, p) / self.drain_rate,
        )
    }

    /// Every latency figure at once.
    pub fn latency(&self) -> Latency {
        Latency {
            utilisation: self.utilisation(),
            prob_wait: self.prob_wait,
            mean_wait_secs: self.mean_wait_secs(),
            // ln(C/0.01) <= ln 100, and the constructor checked 5/drain_rate is finite.
            p99_wait_secs: quantile_factor(self.prob_wait, REPORT_QUANTILE) / self.drain_rate,
            mean_response_secs: self.mean_response_secs(),
        }
    }
}

mod plan;
pub use plan::{plan_shedding, ShedInput, ShedPlan};

pub mod question;
