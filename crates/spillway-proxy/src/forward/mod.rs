//! One request's path through the proxy: its path made normal and look-alike header fields
//! dropped → classify → incident controls → degrade → admit → forward (balance, throttle,
//! retry) → hold the permit until the response body ends.
//!
//! Why this order (SRE book ch. 21; the whole path, file by file, is in docs/architecture.md):
//! classification decides everything after it; the operator's incident levers come before any
//! work; a degraded static answer is cheaper than admission; admission (spillway-core's
//! controller: quota, shed, limit, queue) happens before the body is read, so a refused request
//! costs no body buffering; the permit is held until the response body ends, so a streamed
//! response counts as in flight for as long as it really occupies the upstream — and an upgraded
//! tunnel until both its directions close.

mod body;
mod headers;
mod host;
mod send;
mod underscores;

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use http::header::HeaderValue;
use http::{Request, Response};
use hyper::body::Incoming;
use spillway_core::controller::{Admission, AdmissionRequest};
use spillway_tower::context::RequestContext;
use spillway_tower::metrics as tower_metrics;
use spillway_tower::wire::Protocol;

use crate::access::Decision;
use crate::body::{ProxyBody, UnreadRequestBody};
use crate::degrade::{self, Mode};
use crate::http1::AddedHeaders;
use crate::metrics::Fault;
use crate::respond;
use crate::state::ThreadSnapshot;

use crate::http1::strip_hop_by_hop;
use headers::is_upgrade;
pub use headers::Peer;

/// Handles one client request with `cur`, its thread's snapshot of the state
/// (`ProxyState::current`). Never fails: every outcome is a response; the `Result` is the
/// one hyper's service returns, so the listener hands this future over as it is instead of
/// wrapping it in another (each wrapping level copies the whole future once more per request).
///
/// `client_upgrade` is the client connection's side of an upgrade the request asks for
/// ([`upgrade_of`]); the body is read behind the answer if it is not forwarded, or not to its
/// end (a refusal keeps the client's connection).
#[allow(clippy::manual_async_fn)] // on purpose: see the body's first comment
pub fn handle(
    cur: Arc<ThreadSnapshot>,
    mut peer: Option<Peer>,
    mut parts: http::request::Parts,
    body: UnreadRequestBody,
    client_upgrade: Option<hyper::upgrade::OnUpgrade>,
) -> impl Future<Output = Result<Response<ProxyBody>, Infallible>> {
    // An `async` block that takes its arguments where they stand, not an `async fn`, which moves
    // them once more into its body's locals when first polled (`upstream::Connections::send`);
    // the request's parts and body come apart for the same reason (a `Request` taken apart
    // here would be copied into the future's locals).
    async move {
        let now = Instant::now();
        // Held until the response body ends when forwarded, else until the answer is returned.
        let busy = peer.as_mut().and_then(|p| p.busy.take());
        let (state, rt) = (&cur.state, &cur.rt);
        let protocol = Protocol::of(&parts.headers);
        // What the access log needs after the answer is made (`crate::access`): set on the way,
        // read only when the log is on.
        let mut seen = None;
        let mut granted: Option<(Instant, std::time::Duration)> = None;
        // Held until the answer's head is made (`in_progress`).
        let holding;
        let (res, decision) = 'answer: {
            holding = state.in_progress.begin();
            if holding.is_none() {
                state.faults.count(Fault::RequestsInProgress);
                let res = respond::unavailable(
                    protocol,
                    "requests_in_progress",
                    "this proxy holds listen.max_requests_in_progress requests: send to another \
                     task or later"
                        .into(),
                );
                break 'answer (res, Decision::Refused);
            }
            if parts.method == http::Method::CONNECT {
                // Before hyper's server would take a 2xx for an open tunnel and hold the connection.
                state.faults.count(Fault::BadRequest);
                break 'answer (respond::connect_unsupported(protocol), Decision::Invalid);
            }
            if let Err(e) = host::check(&mut parts) {
                state.faults.count(Fault::BadRequest);
                break 'answer (respond::bad_host(&e, protocol), Decision::Invalid);
            }
            // Routes are matched on the normal path and the upstream is sent the same one, so the
            // route chosen is the path served (`crate::path`); look-alike fields go before anyone
            // reads them (`underscores`).
            if let Err(e) = rt.router.path_policy().apply(&mut parts) {
                state.faults.count(Fault::BadRequest);
                break 'answer (respond::bad_path(&e, protocol), Decision::Invalid);
            }
            if let Err(name) = underscores::apply(&mut parts.headers, rt.router.underscores()) {
                state.faults.count(Fault::BadRequest);
                break 'answer (
                    respond::underscore_header(&name, protocol),
                    Decision::Invalid,
                );
            }
            let class: &crate::route::Classified =
                match rt
                    .router
                    .classify(&parts, peer.as_ref().map(|p| p.addr), now)
                {
                    Ok(c) => seen.insert(c),
                    Err(e) => {
                        state.faults.count(Fault::BadRequest);
                        break 'answer (respond::bad_header(&e, protocol), Decision::Invalid);
                    }
                };
            // Offered demand is what clients ask of the service; health checks are the proxy's and
            // the load balancers' probes, not demand (they are never refused either).
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
                break 'answer (res, Decision::Refused);
            }
            // Capped: a caller's customer names must not grow the metrics without bound.
            let labels =
                state
                    .labels()
                    .request(&class.customer, &class.operation, class.criticality);
            // Refreshes the cached utilisation (and the gauges) at most every 10 ms.
            let utilisation = rt.utilisation(now);

            let controls = state.controls();
            if !class.health_check {
                // The local and fleet layers with one draw: the stricter wins (controls/fleet.rs).
                let draw = fastrand::f64();
                let refusal = controls.check(now, class.criticality, draw).or_else(|| {
                    state
                        .fleet_controls()
                        .layer()
                        .check(now, class.criticality, draw)
                });
                if let Some(refusal) = refusal {
                    tower_metrics::shed(&labels, refusal.reason());
                    break 'answer (
                        respond::control_refusal(&refusal, protocol),
                        Decision::Refused,
                    );
                }
            }

            // Graceful degradation (never for health checks).
            let mut degraded_path = false;
            if let (Some(route), false) = (&class.route, class.health_check) {
                if let Some(d) = &route.degrade {
                    let exercised = controls.exercise_degraded(fastrand::f64());
                    let engaged = exercised || utilisation >= d.threshold;
                    if engaged {
                        let counters = state.degrade_counters(&route.name);
                        if !state.degradation_enabled(&route.name) {
                            counters.suppressed();
                        } else {
                            let mode = degrade::mode(d);
                            counters.count(&route.name, mode, exercised);
                            match mode {
                                Mode::Static => {
                                    break 'answer (degrade::static_response(d), Decision::Degraded)
                                }
                                Mode::UpstreamPath => {
                                    if let Some(p) = d.upstream_path.as_deref() {
                                        if let Some(u) = degrade::rewrite_path(&parts.uri, p) {
                                            parts.uri = u;
                                            degraded_path = true;
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }

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
            // At the arrival's clock reading: the controller's clock is the system's (`state.rs`).
            let permit = match rt.controller.admit_at(&admission, now) {
                Admission::Admitted(p) => p,
                Admission::Refused(r) => {
                    tower_metrics::shed(&labels, r.reason.as_str());
                    note_overload(state, &r, now);
                    break 'answer (respond::refusal(&r, protocol), Decision::Refused);
                }
                Admission::Queued(q) => {
                    let give_up = tokio::time::Instant::from_std(q.give_up_at());
                    let mut q = q;
                    let res = tokio::select! {
                        r = &mut q => r,
                        _ = tokio::time::sleep_until(give_up) => Err(q.expire()),
                    };
                    match res {
                        Ok(p) => p,
                        Err(r) => {
                            tower_metrics::shed(&labels, r.reason.as_str());
                            note_overload(state, &r, std::time::Instant::now());
                            break 'answer (respond::refusal(&r, protocol), Decision::Refused);
                        }
                    }
                }
            };
            tower_metrics::admitted(&labels, permit.queue_time());
            granted = Some((permit.started_at(), permit.queue_time()));

            // Forwarded headers: hop-by-hop removed, the effective context written (so an upstream
            // using spillway-tower sees the criticality and customer the proxy decided, and the time
            // left after queueing), the peer appended to x-forwarded-for.
            let upgrade = client_upgrade.is_some();
            strip_hop_by_hop(&mut parts.headers, upgrade);
            let ctx = RequestContext {
                criticality: class.criticality,
                deadline: class.deadline,
                customer: Arc::clone(&class.customer),
                attempt: class.attempt,
            };
            // Criticality, customer (the configured default's value made once) and forwarded-for
            // travel beside the map (`added`); the time left as of the grant (the controller read the
            // clock then; queueing is included), rather than one more clock read per request.
            let customer = rt.router.customer_value(&class.customer);
            let forwarded_for = peer
                .as_ref()
                .and_then(|p| headers::forwarded_for_value(&parts.headers, p));
            let added = AddedHeaders::new(&mut parts.headers, &ctx, customer, forwarded_for);
            ctx.write_deadline(&mut parts.headers, permit.started_at(), protocol);
            if degraded_path {
                parts
                    .headers
                    .insert(degrade::DEGRADED_HEADER, HeaderValue::from_static("1"));
            }

            let raw_fields = peer.as_ref().is_some_and(|p| p.raw_fields);
            let (res, upstream_upgrade) = send::forward(
                state, rt, &mut parts, &added, body, protocol, class, permit, labels, busy,
                raw_fields,
            )
            .await;
            // Without the client's side (it did not ask to upgrade) the hold is dropped here, which
            // releases the permit at once.
            if let (Some(on_client), Some(up)) = (client_upgrade, upstream_upgrade) {
                tokio::spawn(tunnel(on_client, up));
            }
            (res, Decision::Admitted)
        };
        drop(holding);
        if let Some(log) = &rt.access {
            if log.sampled() {
                access(log, &res, decision, seen.as_ref(), granted);
            }
        }
        Ok(res)
    }
}

/// Writes `res`'s access log line (`crate::access`); only called when the log is on and the
/// request is in the sample.
fn access(
    log: &crate::access::AccessLog,
    res: &Response<ProxyBody>,
    decision: Decision,
    class: Option<&crate::route::Classified>,
    granted: Option<(Instant, std::time::Duration)>,
) {
    let reason = res
        .headers()
        .get(spillway_tower::server::reject::REASON)
        .and_then(|v| v.to_str().ok());
    log.record(&crate::access::Entry {
        time: std::time::SystemTime::now(),
        route: class.and_then(|c| c.route.as_ref()).map(|r| &*r.name),
        criticality: class.map(|c| c.criticality),
        customer: class.map(|c| &*c.customer),
        decision,
        reason,
        queue: granted.map(|g| g.1),
        upstream: granted.map(|g| g.0.elapsed()),
        status: res.status().as_u16(),
        attempt: class.map(|c| c.attempt),
    });
}

/// Tells the listener the proxy refused `r` for its own overload — a refusal another task with
/// room could serve (shed, no slot, queue full or timed out), not a customer's quota or a
/// deadline — so idle HTTP/1.1 client connections close sooner (`listener::pressure`).
fn note_overload(
    state: &crate::state::ProxyState,
    r: &spillway_core::controller::Refusal,
    now: Instant,
) {
    if r.reason.retry_elsewhere_can_help() {
        state.overload_refused(now);
    }
}

/// A request from hyper's server made ready for [`handle`]: its body guarded ([`UnreadRequestBody`]) and,
/// when it asks to upgrade the connection, the client's side of the upgrade taken.
pub fn upgrade_of(
    mut req: Request<Incoming>,
) -> (
    Request<UnreadRequestBody>,
    Option<hyper::upgrade::OnUpgrade>,
) {
    let upgrade = is_upgrade(&req).then(|| hyper::upgrade::on(&mut req));
    let version = req.version();
    (req.map(|b| UnreadRequestBody::new(b, version)), upgrade)
}

/// Copies bytes both ways until both directions have closed (or either fails), holding the
/// admission permit, the task's in-flight count and its slot until then (`send::Upgrade`).
async fn tunnel(client: hyper::upgrade::OnUpgrade, up: send::Upgrade) {
    let send::Upgrade { upstream, hold } = up;
    let (Ok(c), Ok(u)) = (client.await, upstream.await) else {
        return;
    };
    let mut c = hyper_util::rt::TokioIo::new(c);
    let mut u = hyper_util::rt::TokioIo::new(u);
    let _ = tokio::io::copy_bidirectional(&mut c, &mut u).await;
    drop(hold);
}

#[cfg(test)]
mod tests {
    /// The size of the future `f` returns, without calling it.
    fn future_size<A, B, C, D, E, F: std::future::Future>(_: impl Fn(A, B, C, D, E) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// A request's future is built, then moved into hyper's slot for it, and its inner
    /// futures into it: each move copies the whole size, per request (memmove was 3% of the
    /// proxy's CPU with this future at 5,472 bytes; perf, bench/results/proxy-forwarding.md
    /// "Fourth round"). The upstream connect path, which runs once per connection, is boxed
    /// (4,400 bytes with it); this fails if a rarely taken path makes the common one large
    /// again. (Raised from 4,600 to 4,700 for the added fields carried beside the map,
    /// `added`; lowered to 3,200 when `handle`, `send::forward` and `Connections::send` became
    /// `async` blocks that keep their arguments where they stand, and `handle` took the
    /// request's parts and body apart: 4,656 → 3,136 bytes; 2,920 with `send::forward`
    /// borrowing the parts.)
    #[test]
    fn the_per_request_future_stays_small() {
        let handle = future_size(super::handle);
        eprintln!("handle future: {handle} bytes");
        assert!(
            handle <= 3_200,
            "handle's future is {handle} bytes (was 5,472 before)"
        );
    }

    /// The body type moves with every response (and the request sent upstream) several times
    /// per request; past 256 bytes glibc's memmove takes its slower path for each move
    /// (cachegrind: +250 instructions per request at 264 bytes; bench/results/proxy-forwarding.md,
    /// sixth round).
    #[test]
    fn the_body_type_stays_within_256_bytes() {
        let size = std::mem::size_of::<crate::body::ProxyBody>();
        eprintln!("ProxyBody: {size} bytes");
        assert!(size <= 256, "ProxyBody is {size} bytes");
    }
}
