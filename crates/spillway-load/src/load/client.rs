//! One logical request from intended send time to outcome, under one of three client
//! behaviours.
//!
//! Why the policies are called here rather than through `spillway-tower`'s client layers: the
//! generator must see every attempt (to count what was sent, throttled, rejected and timed out
//! per logical request), which a tower stack deliberately hides inside one call. The decisions
//! themselves are spillway-core's — [`RetryPolicy`] (the three retry gates, SRE book ch. 21
//! "Deciding to Retry") and [`AdaptiveThrottle`] (ch. 21 "Client-side throttling") — called in
//! the same order as the tower layers call them: the throttle sees every attempt, retries
//! included, and a local throttle refusal is an overload the request gives up on.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use spillway_core::retry::{Failure, RetryPolicy};
use spillway_core::throttle::AdaptiveThrottle;
use spillway_core::PerCriticality;
use spillway_tower::wire;

use super::connect::HttpClient;
use super::mix::TrafficClass;
use super::Live;
use crate::report::Outcome;

/// How the simulated clients react to failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Behaviour {
    /// Per-attempt timeout and immediate retries on *any* failure, up to the attempt limit,
    /// ignoring don't-retry markers: the retry storm of SRE book ch. 21.
    #[default]
    Naive,
    /// Retries only through spillway-core's retry gates (retryable failure, no don't-retry
    /// marker, attempt limit, widespread overload, 10% budget).
    Budgeted,
    /// spillway-core's adaptive throttle before every attempt, plus the budgeted retries. One
    /// throttle per criticality: a server sheds the lowest criticality first (SRE book ch. 21,
    /// "Criticality"), so its refusals of SHEDDABLE traffic must not make the client refuse its
    /// own CRITICAL requests — with a single throttle they would, undoing the server's order.
    Throttled,
}

impl Behaviour {
    /// The spelling used on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Behaviour::Naive => "naive",
            Behaviour::Budgeted => "budgeted",
            Behaviour::Throttled => "throttled",
        }
    }
}

/// The policies one run's clients share.
pub(crate) struct Policies {
    pub behaviour: Behaviour,
    pub max_attempts: u32,
    pub retry: RetryPolicy,
    /// One adaptive throttle per criticality (indexed by `Criticality::index`).
    pub throttles: PerCriticality<AdaptiveThrottle>,
    /// Id of the (single) target task for the widespread-overload ring.
    pub task: u64,
}

/// What happened to one logical request.
pub(crate) struct Finished {
    pub outcome: Outcome,
    pub attempts: u32,
    pub latency: Option<Duration>,
    pub queue_ms: Option<f64>,
    pub service_ms: Option<f64>,
    /// First attempt's actual send time minus the intended time (None if never sent).
    pub send_lag: Option<Duration>,
}

fn header_ms(h: &http::HeaderMap, name: http::HeaderName) -> Option<f64> {
    h.get(name)?.to_str().ok()?.trim().parse().ok()
}

/// Runs one logical request intended at `intended`, giving up at `intended + timeout`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn execute(
    client: &HttpClient,
    policies: &Policies,
    live: &Arc<Live>,
    uri: &http::Uri,
    class: &TrafficClass,
    intended: Instant,
    timeout: Duration,
    attempt_timeout: Duration,
) -> Finished {
    let deadline = intended + timeout;
    let mut done = Finished {
        outcome: Outcome::TimedOut,
        attempts: 0,
        latency: None,
        queue_ms: None,
        service_ms: None,
        send_lag: None,
    };
    let gated = policies.behaviour != Behaviour::Naive;
    if gated {
        policies.retry.record_request(Instant::now());
    }
    let throttle = &policies.throttles.0[class.criticality.index()];
    let criticality = wire::format_criticality(class.criticality);
    let customer = HeaderValue::from_str(&class.customer).ok();
    loop {
        let now = Instant::now();
        if now >= deadline {
            return done;
        }
        if policies.behaviour == Behaviour::Throttled && throttle.try_acquire(now).is_err() {
            done.outcome = Outcome::Throttled;
            return done;
        }
        // Let through: outstanding in the throttle until this attempt ends (after its accept).
        let _outstanding =
            Outstanding((policies.behaviour == Behaviour::Throttled).then_some(throttle));
        done.attempts += 1;
        live.sent.fetch_add(1, Ordering::Relaxed);
        let allowed = attempt_timeout.min(deadline - now);
        let mut req = Request::get(uri.clone());
        if let Some(h) = req.headers_mut() {
            h.insert(wire::CRITICALITY, criticality.clone());
            if let Some(c) = &customer {
                h.insert(wire::CUSTOMER, c.clone());
            }
            h.insert(wire::DEADLINE_MS, wire::format_deadline_ms(allowed));
            wire::set_attempt(h, done.attempts, wire::Protocol::Http);
        }
        let Ok(req) = req.body(Empty::new()) else {
            done.outcome = Outcome::Error;
            return done;
        };
        if done.attempts == 1 {
            done.send_lag = Some(Instant::now().saturating_duration_since(intended));
        }
        let answer = tokio::time::timeout(allowed, async {
            let resp = client.request(req).await?;
            let (parts, body) = resp.into_parts();
            body.collect().await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(parts)
        })
        .await;
        let now = Instant::now();
        let failure = match answer {
            Ok(Ok(parts)) if parts.status.is_success() => {
                if gated {
                    throttle.record_accept(now);
                    policies.retry.record_outcome(now, policies.task, false);
                }
                // The attempt's timer bounds it, but a starved runtime can notice the answer
                // late: goodput is success *within* the timeout, checked against the clock.
                if now > deadline {
                    done.outcome = Outcome::TimedOut;
                    return done;
                }
                done.outcome = Outcome::Success;
                done.latency = Some(now.saturating_duration_since(intended));
                done.queue_ms = header_ms(&parts.headers, wire::QUEUE_MS);
                done.service_ms = header_ms(&parts.headers, wire::SERVICE_MS);
                return done;
            }
            Ok(Ok(parts))
                if matches!(
                    parts.status,
                    StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS
                ) =>
            {
                // An overload refusal: not an accept for the throttle.
                if gated {
                    policies.retry.record_outcome(now, policies.task, true);
                }
                done.outcome = Outcome::Rejected;
                Failure {
                    attempts_made: done.attempts,
                    dont_retry: wire::is_dont_retry(&parts.headers),
                    retryable: true,
                }
            }
            // A proxy's 504 (`spillway proxy`: `upstream_timeout`) comes when the deadline this
            // attempt sent, or the proxy's own request timeout, passed before the upstream
            // answered: no answer within the timeout, as when this attempt's own timer fires.
            Ok(Ok(parts)) if parts.status == StatusCode::GATEWAY_TIMEOUT => {
                done.outcome = Outcome::TimedOut;
                Failure::overloaded(done.attempts)
            }
            Ok(Ok(_other_status)) => {
                if gated {
                    throttle.record_accept(now);
                    policies.retry.record_outcome(now, policies.task, false);
                }
                done.outcome = Outcome::Error;
                Failure::not_retryable(done.attempts)
            }
            // Connection-level failure: the request was not processed; retryable.
            Ok(Err(e)) => {
                // The first one is kept for the report: with a refused connection or a
                // certificate that does not verify, every request fails the same way.
                if live.first_error.get().is_none() {
                    let _ = live.first_error.set(error_chain(e.as_ref()));
                }
                done.outcome = Outcome::Error;
                Failure {
                    attempts_made: done.attempts,
                    dont_retry: false,
                    retryable: true,
                }
            }
            // The attempt timed out: the server is too slow — treated as overload.
            Err(_) => {
                done.outcome = Outcome::TimedOut;
                Failure::overloaded(done.attempts)
            }
        };
        let retry = match policies.behaviour {
            Behaviour::Naive => done.attempts < policies.max_attempts,
            Behaviour::Budgeted | Behaviour::Throttled => {
                policies.retry.decide(now, &failure).is_retry()
            }
        };
        if !retry {
            return done;
        }
    }
}

/// A request the throttle let through: settled there when the attempt ends, however it ends
/// (dropped after the accept, if any, is recorded).
struct Outstanding<'a>(Option<&'a AdaptiveThrottle>);

impl Drop for Outstanding<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.0 {
            t.settle();
        }
    }
}

/// `e` and its sources, `: `-separated (hyper's own message alone says only "client error
/// (Connect)"; the reason, such as the certificate check's, is further down).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        next = cause.source();
    }
    text
}
