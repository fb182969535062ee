//! The calculator's whole question, from what an operator knows to a shedding plan and the family
//! of knee curves around it.
//!
//! Why one place: `spillway calc` and the proxy dashboard's calculator page ask the same question
//! ("my work takes this long, I have this many workers or this capacity, this much arrives — where
//! is the knee and what does shedding buy?"). Each used to turn its inputs into a plan on its own,
//! so defaults (the knee target), conversions (capacity → workers by Little's law) and which input
//! an error blames could drift apart. Here they are decided once; the front ends only parse their
//! own syntax (flags or query parameters) and print.

#[cfg(test)]
mod tests;

use super::{
    knee_utilisation, plan_shedding, square_root_rule_knee, workers_for_capacity, ErlangError,
    Latency, MmcQueue, ShedInput, ShedPlan, WaitTarget,
};

/// How the operator gives the service's parallelism.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Workers {
    /// Requests served in parallel.
    Count(u32),
    /// Completions per second; converted to `round(capacity × service time)` workers.
    Capacity(f64),
}

/// How the operator gives the offered load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrivals {
    /// Requests per second (may exceed capacity).
    Rate(f64),
    /// A fraction of capacity, `>= 0` (above 1 is overload).
    Utilisation(f64),
}

/// The input a refusal blames, so each front end can name its own flag or parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// The mean service time.
    ServiceTime,
    /// [`Workers::Count`].
    Workers,
    /// [`Workers::Capacity`].
    Capacity,
    /// [`Arrivals::Rate`].
    ArrivalRate,
    /// [`Arrivals::Utilisation`].
    Utilisation,
    /// The sheddable share.
    SheddableShare,
    /// The latency target's wait (or its quantile).
    TargetWait,
}

/// A refused question: the input at fault and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{error}")]
pub struct QuestionError {
    /// The input to blame.
    pub field: Field,
    /// What was wrong and what is accepted.
    pub error: ErlangError,
}

/// Everything the calculator is asked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KneeQuestion {
    /// Mean work per request, seconds, `> 0`.
    pub service_time_secs: f64,
    /// The service's parallelism.
    pub workers: Workers,
    /// The offered load.
    pub arrivals: Arrivals,
    /// The share of arrivals that may be refused, `0..=1`.
    pub sheddable_share: f64,
    /// The latency to protect; `None` means the knee ([`WaitTarget::knee`]).
    pub target: Option<WaitTarget>,
}

/// The calculator's answer for one [`KneeQuestion`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KneeAnswer {
    /// Workers, as given or converted from capacity.
    pub servers: u32,
    /// [`Field::Workers`] or [`Field::Capacity`]: which input gave `servers`.
    pub servers_from: Field,
    /// `servers / service time`, requests per second.
    pub capacity_rps: f64,
    /// The knee of `servers` workers (mean wait = 10% of the service time).
    pub knee_utilisation: f64,
    /// The target in effect.
    pub target: WaitTarget,
    /// Whether `target` is the default (the knee) rather than the operator's.
    pub target_is_default_knee: bool,
    /// When to refuse, and what shedding buys.
    pub plan: ShedPlan,
}

/// One curve of the knee family: how queueing grows with utilisation for `servers` workers.
#[derive(Debug, Clone, PartialEq)]
pub struct KneeCurve {
    /// Workers.
    pub servers: u32,
    /// Where mean queueing delay reaches 10% of the service time.
    pub knee_utilisation: f64,
    /// The `1 − 1/√c` rule of thumb, for comparison.
    pub square_root_rule_knee: f64,
    /// The latency at each utilisation asked for.
    pub points: Vec<Latency>,
}

fn blame(field: Field) -> impl Fn(ErlangError) -> QuestionError {
    move |error| QuestionError { field, error }
}

/// Answers `q`. Arrivals above capacity are not an error: the unshed latency is then `None`.
pub fn answer(q: &KneeQuestion) -> Result<KneeAnswer, QuestionError> {
    let s = q.service_time_secs;
    let (servers, servers_from) = match q.workers {
        Workers::Count(c) => (c, Field::Workers),
        Workers::Capacity(rate) => (
            workers_for_capacity(rate, s).map_err(|e| {
                let field = match e {
                    ErlangError::InvalidArgument {
                        argument: "service_time",
                        ..
                    } => Field::ServiceTime,
                    _ => Field::Capacity,
                };
                QuestionError { field, error: e }
            })?,
            Field::Capacity,
        ),
    };
    let capacity_rps = f64::from(servers) / s;
    if !(capacity_rps.is_finite() && capacity_rps > 0.0) {
        return Err(QuestionError {
            field: Field::ServiceTime,
            error: ErlangError::InvalidArgument {
                argument: "service_time",
                value: s.to_string(),
                expected: "a finite number of seconds > 0 (at least a nanosecond)",
            },
        });
    }
    let (arrival_rate, arrivals_field) = match q.arrivals {
        Arrivals::Rate(r) => (r, Field::ArrivalRate),
        Arrivals::Utilisation(u) if u.is_finite() && u >= 0.0 => {
            (u * capacity_rps, Field::Utilisation)
        }
        Arrivals::Utilisation(u) => {
            return Err(QuestionError {
                field: Field::Utilisation,
                error: ErlangError::InvalidArgument {
                    argument: "utilisation",
                    value: u.to_string(),
                    expected: "a fraction of capacity >= 0 such as 0.9 (above 1 is overload)",
                },
            })
        }
    };
    let target = match q.target {
        Some(t) => t,
        None => WaitTarget::knee(s).map_err(blame(Field::ServiceTime))?,
    };
    let plan = plan_shedding(&ShedInput {
        servers,
        service_time_secs: s,
        arrival_rate,
        sheddable_share: q.sheddable_share,
        target,
    })
    .map_err(|e| {
        let field = match &e {
            ErlangError::InvalidArgument { argument, .. } => match *argument {
                "arrival_rate" => arrivals_field,
                "sheddable_share" => Field::SheddableShare,
                "target_wait" | "target_quantile" => Field::TargetWait,
                "servers" => servers_from,
                _ => Field::ServiceTime,
            },
            _ => Field::ServiceTime,
        };
        QuestionError { field, error: e }
    })?;
    Ok(KneeAnswer {
        servers,
        servers_from,
        capacity_rps,
        knee_utilisation: knee_utilisation(servers).map_err(blame(servers_from))?,
        target,
        target_is_default_knee: q.target.is_none(),
        plan,
    })
}

/// The family of curves shown around an answer: one per worker count in `family`, plus `own`
/// (the operator's) when it is not among them, in increasing order, each evaluated at
/// `utilisations` (each in `[0, 1)`).
pub fn knee_family(
    family: &[u32],
    own: u32,
    service_time_secs: f64,
    utilisations: &[f64],
) -> Result<Vec<KneeCurve>, ErlangError> {
    let mut servers: Vec<u32> = family.to_vec();
    if !servers.contains(&own) {
        servers.push(own);
    }
    servers.sort_unstable();
    servers.dedup();
    servers
        .into_iter()
        .map(|c| {
            let points = utilisations
                .iter()
                .map(|&u| MmcQueue::at_utilisation(c, service_time_secs, u).map(|q| q.latency()))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(KneeCurve {
                servers: c,
                knee_utilisation: knee_utilisation(c)?,
                square_root_rule_knee: square_root_rule_knee(c)?,
                points,
            })
        })
        .collect()
}
