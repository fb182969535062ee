//! The steps a request passes before it is sent, in `handle`'s order: its head checked and
//! classified, offered demand counted (or a drain answered), the incident controls, graceful
//! degradation, admission, and the headers it is forwarded with.
//!
//! Why each is a function that returns the answer to give instead of going on: `handle` then
//! reads as the list of steps (SRE ch. 21's order: classification decides everything after
//! it, the operator's levers come before any work, a degraded answer is cheaper than
//! admission, admission before the body is read), and each step's refusal is next to its rule.

// The `Err` of each step is the answer itself, returned once to `handle`: boxing it would add an
// allocation to every refusal, the path an overloaded proxy takes most (tests/refusal_allocs.rs).
#![allow(clippy::result_large_err)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

use http::header::HeaderValue;
use http::Response;
use spillway_core::controller::{Admission, AdmissionRequest, Permit, QueuedAdmission, Refusal};
use spillway_tower::context::RequestContext;
use spillway_tower::metrics::{self as tower_metrics, RequestLabels};
use spillway_tower::wire::Protocol;

use super::{headers, host, underscores, Peer};
use crate::access::Decision;
use crate::body::ResponseBody;
use crate::degrade::{self, Mode};
use crate::http1::AddedHeaders;
use crate::metrics::Fault;
use crate::respond;
use crate::route::Classified;
use crate::state::{ProxyState, Runtime, ThreadSnapshot};

/// The answer a step gives instead of letting the request go on, and how the access log
/// names it.
pub(super) type Answered = (Response<ResponseBody>, Decision);

/// The request's head checked — not CONNECT, its `host`, its path made normal, look-alike
/// fields dropped — and classified.
pub(super) fn screen(
    state: &ProxyState,
    rt: &Runtime,
    parts: &mut http::request::Parts,
    peer: Option<&Peer>,
    protocol: Protocol,
    now: Instant,
) -> Result<Classified, Answered> {
    let invalid = |res| {
        state.faults.count(Fault::BadRequest);
        (res, Decision::Invalid)
    };
    if parts.method == http::Method::CONNECT {
        // Before hyper's server would take a 2xx for an open tunnel and hold the connection.
        return Err(invalid(respond::connect_unsupported(protocol)));
    }
    if let Err(e) = host::check(parts) {
        return Err(invalid(respond::bad_host(&e, protocol)));
    }
    // Routes are matched on the normal path and the upstream is sent the same one, so the
    // route chosen is the path served (`crate::path`); look-alike fields go before anyone
    // reads them (`underscores`).
    if let Err(e) = rt.router.path_policy().apply(parts) {
        return Err(invalid(respond::bad_path(&e, protocol)));
    }
    if let Err(name) = underscores::apply(&mut parts.headers, rt.router.underscores()) {
        return Err(invalid(respond::underscore_header(&name, protocol)));
    }
    rt.router
        .classify(parts, peer.map(|p| p.addr), now)
        .map_err(|e| invalid(respond::bad_header(&e, protocol)))
}

/// Counts the request as offered demand — what clients ask of the service; health checks are
/// the proxy's and the load balancers' probes, not demand (they are never refused either) —
/// or answers a health check while draining.
pub(super) fn offered(
    state: &ProxyState,
    class: &Classified,
    protocol: Protocol,
) -> Result<(), Answered> {
    if !class.health_check {
        crate::metrics::record_offered(class.criticality, class.cost);
    } else if state.is_draining() {
        // A load balancer probing through the data port hears what `/ready` says: during
        // `[shutdown] drain_delay_ms` it takes this task out before the listener closes.
        let res = respond::unavailable(
            protocol,
            "draining",
            "this proxy is shutting down (SIGTERM): send to another task".into(),
        );
        return Err((res, Decision::Refused));
    }
    Ok(())
}

/// The operator's incident levers, local and fleet, with one draw: the stricter wins
/// (controls/fleet.rs). Never for health checks.
pub(super) fn controls(
    state: &ProxyState,
    class: &Classified,
    labels: &RequestLabels,
    protocol: Protocol,
    now: Instant,
) -> Result<(), Answered> {
    if class.health_check {
        return Ok(());
    }
    let draw = fastrand::f64();
    let refusal = state
        .controls()
        .check(now, class.criticality, draw)
        .or_else(|| {
            state
                .fleet_controls()
                .layer()
                .check(now, class.criticality, draw)
        });
    match refusal {
        Some(refusal) => {
            tower_metrics::shed(labels, refusal.reason());
            let res = respond::control_refusal(&refusal, protocol);
            Err((res, Decision::Refused))
        }
        None => Ok(()),
    }
}

/// Graceful degradation of the request's route, when engaged (utilisation past its threshold,
/// or exercised): a static answer, or `true` when its path was rewritten to the degraded one.
/// Never for health checks.
pub(super) fn degrade(
    state: &ProxyState,
    class: &Classified,
    parts: &mut http::request::Parts,
    utilisation: f64,
) -> Result<bool, Answered> {
    let Some(route) = class.route.as_ref().filter(|_| !class.health_check) else {
        return Ok(false);
    };
    let Some(d) = &route.degrade else {
        return Ok(false);
    };
    let exercised = state.controls().exercise_degraded(fastrand::f64());
    if !(exercised || utilisation >= d.threshold) {
        return Ok(false);
    }
    let counters = state.degrade_counters(&route.name);
    if !state.degradation_enabled(&route.name) {
        counters.suppressed();
        return Ok(false);
    }
    let mode = degrade::mode(d);
    counters.count(&route.name, mode, exercised);
    match mode {
        Mode::Static => Err((degrade::static_response(d), Decision::Degraded)),
        Mode::UpstreamPath => {
            let rewritten = d
                .upstream_path
                .as_deref()
                .and_then(|p| degrade::rewrite_path(&parts.uri, p));
            Ok(match rewritten {
                Some(u) => {
                    parts.uri = u;
                    true
                }
                None => false,
            })
        }
    }
}

/// The steps before admission, in their order — [`screen`], [`offered`], [`controls`],
/// [`degrade`] — all synchronous, with `seen` set to the request's classification: the
/// classification, its metric labels and whether the path was rewritten for a degraded
/// mode; or the answer one of them gave.
#[inline(always)]
pub(super) fn pre_admit<'c>(
    cur: &ThreadSnapshot,
    parts: &mut http::request::Parts,
    peer: Option<&Peer>,
    protocol: Protocol,
    now: Instant,
    seen: &'c mut Option<Classified>,
) -> Result<(&'c Classified, RequestLabels, bool), Answered> {
    let (state, rt) = (&*cur.state, &*cur.rt);
    let class: &Classified = seen.insert(screen(state, rt, parts, peer, protocol, now)?);
    offered(state, class, protocol)?;
    // Capped: a caller's customer names must not grow the metrics without bound.
    let labels = state
        .labels()
        .request(&class.customer, &class.operation, class.criticality);
    // Refreshes the cached utilisation (and the gauges) at most every 10 ms.
    let utilisation = rt.utilisation(now);
    controls(state, class, &labels, protocol, now)?;
    let degraded_path = degrade(state, class, parts, utilisation)?;
    Ok((class, labels, degraded_path))
}

/// Admission by spillway-core's controller (quota, shed, limit, queue) at the arrival's clock
/// reading — the controller's clock is the system's (`state.rs`) — waiting in its queue up to
/// the time it gives.
pub(super) async fn admit(
    rt: &Runtime,
    state: &ProxyState,
    class: &Classified,
    labels: &RequestLabels,
    protocol: Protocol,
    now: Instant,
) -> Result<Permit, Answered> {
    let admission = AdmissionRequest {
        customer: &class.customer,
        criticality: class.criticality,
        operation: &class.operation,
        deadline: class.deadline,
        attempt: class.attempt,
        estimated_cost: class.cost,
        health_check: class.health_check,
        continuation: false,
    };
    let refused = |r: Refusal, now| {
        tower_metrics::shed(labels, r.reason.as_str());
        note_overload(state, &r, now);
        (respond::refusal(&r, protocol), Decision::Refused)
    };
    match rt.controller.admit_at(&admission, now) {
        Admission::Admitted(p) => Ok(p),
        Admission::Refused(r) => Err(refused(r, now)),
        Admission::Queued(q) => wait_in_queue(q)
            .await
            .map_err(|r| refused(r, Instant::now())),
    }
}

/// Waits for a queued admission, or until its give-up time — re-read after every wake, since
/// the controller brings it forward when the expected service time grows
/// ([`QueuedAdmission::give_up_at`]).
async fn wait_in_queue(mut q: QueuedAdmission) -> Result<Permit, Refusal> {
    let mut armed = q.give_up_at();
    let timer = tokio::time::sleep_until(tokio::time::Instant::from_std(armed));
    tokio::pin!(timer);
    let expired = std::future::poll_fn(|cx| {
        if let Poll::Ready(r) = Pin::new(&mut q).poll(cx) {
            return Poll::Ready(Some(r));
        }
        let at = q.give_up_at();
        if at < armed {
            armed = at;
            timer.as_mut().reset(tokio::time::Instant::from_std(at));
        }
        timer.as_mut().poll(cx).map(|()| None)
    })
    .await;
    match expired {
        Some(r) => r,
        None => Err(q.expire()),
    }
}

/// Tells the listener the proxy refused `r` for its own overload — a refusal another task with
/// room could serve (shed, no slot, queue full or timed out), not a customer's quota or a
/// deadline — so idle HTTP/1.1 client connections close sooner (`progress::pressure`).
fn note_overload(state: &ProxyState, r: &Refusal, now: Instant) {
    if r.reason.retry_elsewhere_can_help() {
        state.overload_refused(now);
    }
}

/// The headers the request is forwarded with (after hop-by-hop fields are removed): the
/// effective context written — so an upstream using spillway-tower sees the criticality and
/// customer the proxy decided, and the time left after queueing — and the peer appended to
/// x-forwarded-for; marked degraded when its path was rewritten for that.
///
/// Criticality, customer (the configured default's value made once) and forwarded-for travel
/// beside the map (the returned fields); the time left is as of the grant (the controller
/// read the clock then; queueing is included), rather than one more clock read per request.
pub(super) fn forwarded_headers(
    rt: &Runtime,
    parts: &mut http::request::Parts,
    class: &Classified,
    peer: Option<&Peer>,
    permit: &Permit,
    protocol: Protocol,
    degraded_path: bool,
) -> AddedHeaders {
    let ctx = RequestContext {
        criticality: class.criticality,
        deadline: class.deadline,
        customer: Arc::clone(&class.customer),
        attempt: class.attempt,
    };
    let customer = rt.router.customer_value(&class.customer);
    let forwarded_for = peer.and_then(|p| headers::forwarded_for_value(&parts.headers, p));
    let added = AddedHeaders::new(&mut parts.headers, &ctx, customer, forwarded_for);
    ctx.write_deadline(&mut parts.headers, permit.started_at(), protocol);
    if degraded_path {
        parts
            .headers
            .insert(degrade::DEGRADED_HEADER, HeaderValue::from_static("1"));
    }
    added
}

#[cfg(test)]
mod tests;
