//! Sending an admitted request upstream: pick a task (power of two choices), pass its client
//! throttle, take a request slot, send with a timeout, and on an overload refusal or a
//! connection failure ask the retry policy whether to try another task.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode, Version};
use metrics::SharedString;
use spillway_core::controller::{NoAnswer, Outcome, Permit};
use spillway_core::retry::{Failure, RetryDecision, RetryGate};
use spillway_core::throttle::AdaptiveThrottle;
use spillway_tower::client::overload_refusal;
use spillway_tower::metrics::{self as tower_metrics, RequestLabels};
use spillway_tower::wire::{self, OverloadGiveUp, Protocol};

use super::body::{read_body, ReadError, ReqBody};
use super::UnreadRequestBody;
use crate::body::{Guard, GuardedResponseBody, TunnelHold};
use crate::http1::AddedHeaders;

/// gRPC `CANCELLED`: the client's side of the stream failed.
const GRPC_CANCELLED: u16 = 1;
use crate::body::{empty_body, full_body, ProxyBody};
use crate::config::UpstreamProtocol;
use crate::http1::strip_hop_by_hop;
use crate::listener::head::ActiveRequest;
use crate::metrics::Fault;
use crate::respond;
use crate::state::{ProxyState, Runtime};
use crate::upstream::{Pool, Task, Tried, UpstreamBody};

/// A request the task's client throttle counted as sent, not yet answered. Dropped unsettled
/// — the request's future dropped because its caller went away before the task answered — it
/// records an accept: the task refused nothing, and callers' short deadlines must not raise
/// the throttle on a healthy task (issue 28).
struct Unanswered<'a>(Option<&'a AdaptiveThrottle>);

impl Unanswered<'_> {
    /// The outcome is known (and recorded, or deliberately not, by the caller).
    fn settled(&mut self) {
        self.0 = None;
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.0 {
            t.record_accept(Instant::now());
        }
    }
}

/// An upstream's 101: its side of the tunnel, and what the tunnel holds until it closes.
pub(super) struct Upgrade {
    pub(super) upstream: hyper::upgrade::OnUpgrade,
    pub(super) hold: TunnelHold,
}

#[allow(clippy::too_many_arguments)]
#[allow(clippy::manual_async_fn)] // on purpose: see the body's first comment
pub(super) fn forward<'a>(
    state: &'a Arc<ProxyState>,
    rt: &'a Arc<Runtime>,
    parts: &'a mut http::request::Parts,
    added: &'a AddedHeaders,
    body: UnreadRequestBody,
    protocol: Protocol,
    class: &'a crate::route::Classified,
    mut permit: Permit,
    labels: RequestLabels,
    busy: Option<ActiveRequest>,
    raw_fields: bool,
) -> impl Future<Output = (Response<ProxyBody>, Option<Upgrade>)> + 'a {
    // An `async` block, not an `async fn`: its arguments are not moved once more when first
    // polled (`upstream::Connections::send`). The parts are borrowed from `handle`'s future,
    // which holds them anyway, rather than copied into this one.
    async move {
        // Until the task answers, a future dropped here (the caller went away: its gRPC deadline
        // fired in the client, which reset the stream, or it cancelled) says nothing about the
        // task: its wait is no service time and no limit sample. Every path below that ends the
        // request sets the outcome it means; the answered one sets `Success`.
        permit.set_outcome(NoAnswer::CallerGone.outcome());
        let pool = &rt.pool;
        let cfg = &pool.cfg;
        let read_timeout = Duration::from_millis(rt.config.listen.header_read_timeout_ms);
        let body_was_empty = http_body::Body::is_end_stream(&body);
        let read = if body_was_empty {
            // No body (most GETs): no reading future to build, move and poll.
            Ok(ReqBody::Buffered(bytes::Bytes::new(), None))
        } else {
            read_body(
                body,
                cfg.retry_buffer_bytes,
                state.body_budget(),
                read_timeout,
            )
            .await
        };
        let mut body = match read {
            Ok(b) => b,
            Err(e) => {
                // Nothing was sent upstream: the admission slot taught nothing about capacity.
                permit.set_outcome(Outcome::Ignore);
                let res = match e {
                    ReadError::Timeout => {
                        state.faults.count(Fault::BodyTimeout);
                        respond::error(
                            protocol,
                            StatusCode::REQUEST_TIMEOUT,
                            GRPC_CANCELLED,
                            "body_timeout",
                            format!(
                                "the request body did not arrive within {} ms",
                                read_timeout.as_millis()
                            ),
                        )
                    }
                    ReadError::Broken(why) => bad_body(state, protocol, &why),
                };
                return (res, None);
            }
        };
        let upgrade = wire::find(&parts.headers, &header::UPGRADE).is_some();
        let wants_http2 = match cfg.protocol {
            UpstreamProtocol::Http1 => false,
            UpstreamProtocol::Http2 => true,
            UpstreamProtocol::Auto => parts.version == Version::HTTP_2,
        } && !upgrade;
        // `auto` asks each task once whether it speaks h2c (gRPC needs HTTP/2 whatever it says).
        let ask_h2c =
            wants_http2 && cfg.protocol == UpstreamProtocol::Auto && protocol != Protocol::Grpc;
        // Without a body to wait for, the grant's time is now to within microseconds: one clock
        // read fewer per request (two on the first attempt).
        let start = if body_was_empty {
            permit.started_at()
        } else {
            Instant::now()
        };
        let retry = pool.retry_policy();
        retry.record_request(start);
        let mut tried = Tried::default();
        let mut attempt = class.attempt.max(1);
        // A streamed body's failure, seen by whichever upstream connection read it.
        let mut broke = None;
        // The first attempt starts at `start`; each retry reads the clock.
        let mut first_attempt = Some(start);
        loop {
            let now = first_attempt.take().unwrap_or_else(Instant::now);
            if class.deadline.is_some_and(|d| d <= now) {
                // The caller's deadline ran out before this attempt could go (its body was slow, or
                // an earlier attempt used the time): sending it would time out at once and count
                // as the task's failure. Answered as the controller answers a deadline it sees.
                permit.set_outcome(Outcome::Ignore);
                return (respond::deadline_passed(class.criticality, protocol), None);
            }
            let Some(task) = pool.pick(&tried, now) else {
                state.faults.count(Fault::UpstreamUnavailable);
                permit.set_outcome(Outcome::Ignore);
                return (
                    respond::unavailable(
                        protocol,
                        "no_upstream",
                        "no upstream task left to try (all tried or ejected)".into(),
                    ),
                    None,
                );
            };
            tried.add(task.id);
            let replayable = matches!(body, ReqBody::Buffered(..)) && !upgrade;

            // Client-side throttle (SRE ch. 21): refused locally, counted as that task refusing.
            let throttle = task.throttle(class.criticality);
            if throttle.try_acquire(now).is_err() {
                tower_metrics::throttled(&labels, dest(&task));
                retry.record_outcome(now, task.id, true);
                match decide(state, pool, &tried, now, attempt, false, replayable) {
                    RetryDecision::Retry => {
                        attempt += 1;
                        continue;
                    }
                    _ => {
                        permit.set_outcome(Outcome::Dropped);
                        return (
                            respond::give_up(
                                &OverloadGiveUp {
                                    attempts: attempt,
                                    reason: "throttled",
                                },
                                protocol,
                            ),
                            None,
                        );
                    }
                }
            }

            // Counted as sent to the task: answered or not, from here on.
            let mut unanswered = Unanswered(Some(throttle));

            let wait = Duration::from_millis(cfg.pool_wait_timeout_ms);
            // A free slot is taken at once; only a wait needs the timer.
            let free = Arc::clone(&task.slots).try_acquire_owned().ok();
            let slot = match free {
                Some(s) => Ok(Ok(s)),
                None => tokio::time::timeout(wait, Arc::clone(&task.slots).acquire_owned()).await,
            };
            let slot = match slot {
                Ok(Ok(s)) => s,
                _ => {
                    state.faults.count(Fault::UpstreamUnavailable);
                    permit.set_outcome(Outcome::Dropped);
                    unanswered.settled();
                    return (
                        respond::unavailable(
                            protocol,
                            "upstream_pool_full",
                            format!(
                                "all {} request slots to upstream {} stayed busy for {} ms",
                                cfg.max_requests_per_task, task.addr, cfg.pool_wait_timeout_ms
                            ),
                        ),
                        None,
                    );
                }
            };
            let inflight = task.start_in_slot(now, slot);

            let send_body = match &mut body {
                ReqBody::Buffered(b, _) => full_body(b.clone()),
                ReqBody::Streamed(b) => match b.take() {
                    Some(mut b) => {
                        broke = Some(b.watch());
                        ProxyBody::streamed(b)
                    }
                    None => {
                        // Cannot happen (streamed bodies are never retried); answer rather than panic.
                        permit.set_outcome(Outcome::Ignore);
                        unanswered.settled();
                        return (
                            respond::internal(protocol, "request body already sent".into()),
                            None,
                        );
                    }
                },
            };
            let task_index = usize::try_from(task.id).unwrap_or(usize::MAX);
            let http2 = wants_http2
                && (!ask_h2c
                    || match pool.conns.h2c_known(task_index) {
                        Some(known) => known,
                        // Boxed: asked once per task, while this future is built per request.
                        None => Box::pin(pool.conns.probe_h2c(task_index)).await,
                    });
            // With one task there is never a second attempt (retries go to *another* task), so the
            // headers can move into the upstream request instead of being copied for a retry.
            let last = pool.tasks().len() <= 1;
            let req =
                match upstream_request(parts, last, &task, send_body, http2, attempt, protocol) {
                    Ok(r) => r,
                    Err(e) => {
                        permit.set_outcome(Outcome::Ignore);
                        unanswered.settled();
                        return (
                            respond::internal(
                                protocol,
                                format!("cannot build the upstream request: {e}"),
                            ),
                            None,
                        );
                    }
                };
            // The configured timeout or, when shorter, what is left of the caller's deadline; and
            // what its firing means (one decision with the sweep's model of the proxy, `sim::sweep`).
            let (timeout, bound) = NoAnswer::wait_bound(
                Duration::from_millis(cfg.request_timeout_ms),
                class.deadline.map(|d| d.saturating_duration_since(now)),
            );
            let callers_deadline = bound == NoAnswer::CallersDeadline;
            let result = tokio::time::timeout(
                timeout,
                pool.conns.send(task_index, req, http2, raw_fields, added),
            )
            .await;
            unanswered.settled();
            let now = Instant::now();
            match result {
                Err(_) => {
                    state.faults.count(Fault::UpstreamTimeout);
                    retry.record_outcome(now, task.id, false);
                    if callers_deadline {
                        // The caller's deadline ran out, not the task: a 20 ms budget says
                        // nothing about a healthy task (five such calls ejected an idle one).
                        // No failure for ejection or balancing, no rejection for the throttle
                        // (the task refused nothing), no congestion sample for the limit (the
                        // latency is only known to exceed what the caller allowed).
                        throttle.record_accept(now);
                    } else {
                        pool.record_failure(&task, now);
                    }
                    permit.set_outcome(bound.outcome());
                    return (
                        respond::timeout(
                            protocol,
                            format!(
                                "upstream {} sent no response head within {} ms{}",
                                task.addr,
                                timeout.as_millis(),
                                // (`cfg` read again: a value kept across the wait would
                                // grow every request's future.)
                                if callers_deadline {
                                    " (what was left of the request's deadline)"
                                } else {
                                    ""
                                }
                            ),
                        ),
                        None,
                    );
                }
                Ok(Err(e)) if e.is_connect() => {
                    state.faults.count(Fault::UpstreamConnect);
                    pool.record_failure(&task, now);
                    retry.record_outcome(now, task.id, false);
                    // The request never reached the task: safe to send elsewhere if we still have
                    // the body, retries are on, and attempts remain.
                    if replayable
                        && state.retries_enabled()
                        && attempt < retry.max_attempts()
                        && more_tasks(pool, &tried, now)
                    {
                        tower_metrics::retried(&labels, dest(&task), "connect");
                        attempt += 1;
                        continue;
                    }
                    if !replayable && more_tasks(pool, &tried, now) {
                        state.faults.count(Fault::NotRetriedLargeBody);
                    }
                    permit.set_outcome(Outcome::Ignore);
                    return (
                        respond::bad_gateway(
                            protocol,
                            "upstream_connect",
                            format!(
                                "upstream {} refused the connection: {}",
                                task.addr,
                                cause(&e)
                            ),
                        ),
                        None,
                    );
                }
                Ok(Err(e))
                    if e.is_client_body() || broke.as_ref().is_some_and(|b| b.get().is_some()) =>
                {
                    // The client's upload broke (cut short, invalid chunked coding): nothing about
                    // the task, which must not be marked failing for it. An HTTP/1.1 upstream
                    // connection says so itself; hyper's HTTP/2 client only resets the stream, so
                    // the body's own record tells.
                    permit.set_outcome(Outcome::Ignore);
                    let why = match broke.as_ref().and_then(|b| b.get()) {
                        Some(why) => why.to_string(),
                        None => std::error::Error::source(&e).map_or_else(|| cause(&e), cause),
                    };
                    return (bad_body(state, protocol, &why), None);
                }
                Ok(Err(e)) => {
                    // An invalid response is named by what was wrong with it (the error's own
                    // level would only repeat "invalid response").
                    let (fault, what, why) = match std::error::Error::source(&e) {
                        Some(s) if e.is_invalid_response() => {
                            (Fault::UpstreamInvalid, "sent an invalid response", cause(s))
                        }
                        _ => (Fault::UpstreamReset, "broke the connection", cause(&e)),
                    };
                    state.faults.count(fault);
                    pool.record_failure(&task, now);
                    retry.record_outcome(now, task.id, false);
                    permit.set_outcome(Outcome::Ignore);
                    return (
                        respond::bad_gateway(
                            protocol,
                            fault.as_str(),
                            format!("upstream {} {what}: {why}", task.addr),
                        ),
                        None,
                    );
                }
                Ok(Ok(mut res)) => {
                    // The same reading as spillway-tower's client layers (one classification).
                    let overload = overload_refusal(&res).map(|o| o.dont_retry);
                    retry.record_outcome(now, task.id, overload.is_some());
                    if let Some(dont_retry) = overload {
                        pool.record_failure(&task, now);
                        let decision =
                            decide(state, pool, &tried, now, attempt, dont_retry, replayable);
                        if decision.is_retry() {
                            tower_metrics::retried(&labels, dest(&task), "overloaded");
                            attempt += 1;
                            continue;
                        }
                        if let RetryDecision::GiveUp(
                            RetryGate::Widespread | RetryGate::Budget | RetryGate::AttemptLimit,
                        ) = decision
                        {
                            // The proxy gave up: the caller must not retry either (SRE ch. 21).
                            for (k, v) in OverloadGiveUp::marker_headers() {
                                res.headers_mut().insert(k, v);
                            }
                        }
                        permit.set_outcome(Outcome::Dropped);
                    } else {
                        throttle.record_accept(now);
                        permit.set_outcome(Outcome::Success);
                        if res.status().is_server_error() {
                            pool.record_failure(&task, now);
                        } else {
                            pool.record_success(&task);
                        }
                    }
                    read_reports(pool, &task, &res, &mut permit, now);
                    if res.status() == StatusCode::SWITCHING_PROTOCOLS {
                        // The 101 ends the HTTP exchange but not the work: the permit, in-flight
                        // count and slot move to the tunnel and are held until it closes.
                        let upgrade = Upgrade {
                            upstream: hyper::upgrade::on(&mut res),
                            hold: TunnelHold::new(permit, inflight),
                        };
                        let (mut p, _) = res.into_parts();
                        p.version = Version::HTTP_11;
                        return (Response::from_parts(p, empty_body()), Some(upgrade));
                    }
                    strip_hop_by_hop(res.headers_mut(), false);
                    let (mut p, b) = res.into_parts();
                    // Answer in the client's dialect: an HTTP/1.0 upstream must not turn the
                    // client's keep-alive HTTP/1.1 connection into 1.0 (hyper's h2 server ignores it).
                    p.version = Version::HTTP_11;
                    let body = GuardedResponseBody {
                        inner: b,
                        guard: Some(Guard {
                            permit,
                            labels,
                            _inflight: inflight,
                            _busy: busy,
                            report: protocol != Protocol::Grpc,
                            waiting: false,
                            trailer_reports: (protocol == Protocol::Grpc).then(|| Arc::clone(pool)),
                        }),
                    };
                    return (Response::from_parts(p, ProxyBody::upstream(body)), None);
                }
            }
        }
    }
}

/// Whether an overload refusal may be retried on another task. The budget is charged only when
/// another task exists (a sidecar with one task never spends it); with no task left, a
/// widespread overload is still reported as such so the caller is told not to retry.
/// Every give-up is counted by its gate, so an alert can tell a spent budget from a widespread
/// overload.
#[allow(clippy::too_many_arguments)]
fn decide(
    state: &ProxyState,
    pool: &Pool,
    tried: &Tried,
    now: Instant,
    attempt: u32,
    dont_retry: bool,
    replayable: bool,
) -> RetryDecision {
    let retry = pool.retry_policy();
    let d = 'gate: {
        if !state.retries_enabled() {
            break 'gate RetryDecision::GiveUp(RetryGate::NotRetryable);
        }
        if !more_tasks(pool, tried, now) {
            break 'gate RetryDecision::GiveUp(if retry.is_widespread() {
                RetryGate::Widespread
            } else {
                RetryGate::NotRetryable
            });
        }
        if !replayable {
            state.faults.count(Fault::NotRetriedLargeBody);
            break 'gate RetryDecision::GiveUp(RetryGate::NotRetryable);
        }
        let f = if dont_retry {
            Failure::overloaded_dont_retry(attempt)
        } else {
            Failure::overloaded(attempt)
        };
        retry.decide(now, &f)
    };
    if let RetryDecision::GiveUp(g) = d {
        crate::metrics::retry_gave_up(g);
    }
    d
}

fn dest(task: &Task) -> SharedString {
    SharedString::from(Arc::clone(&task.addr))
}

fn more_tasks(pool: &Pool, tried: &Tried, now: Instant) -> bool {
    pool.pick(tried, now).is_some()
}

/// The client's request body could not be read (400 / `CANCELLED`), counted `bad_request`.
fn bad_body(state: &ProxyState, protocol: Protocol, why: &str) -> Response<ProxyBody> {
    state.faults.count(Fault::BadRequest);
    respond::error(
        protocol,
        StatusCode::BAD_REQUEST,
        GRPC_CANCELLED,
        "bad_body",
        format!("the request body could not be read: {why}"),
    )
}

fn cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// The service's own reports: actual cost (quota accounting) and ORCA utilisation.
/// (From the fields passed through as bytes when the head's are there: `RawFields`.)
fn read_reports(
    pool: &Pool,
    task: &Task,
    res: &Response<UpstreamBody>,
    permit: &mut Permit,
    now: Instant,
) {
    let raw = res.body().raw_fields();
    if pool.cost_header {
        let cost = match raw {
            Some(r) => r.cost(),
            None => wire::find(res.headers(), &wire::COST),
        };
        if let Some(c) = cost.and_then(wire::parse_cost) {
            permit.set_actual_cost(c);
        }
    }
    if !pool.wants_orca(task, now) {
        // Not even looked up (`upstream::orca::read_every`).
        return;
    }
    let (text, bin) = match raw {
        Some(r) => (r.load_metrics(), r.load_metrics_bin()),
        None => match wire::find(res.headers(), &wire::ENDPOINT_LOAD_METRICS) {
            // The text form is read first: no second lookup when it is there.
            Some(t) => (Some(t), None),
            None => (
                None,
                wire::find(res.headers(), &wire::ENDPOINT_LOAD_METRICS_BIN),
            ),
        },
    };
    pool.read_orca(task, text, bin, now);
}

fn upstream_request(
    parts: &mut http::request::Parts,
    last: bool,
    task: &Task,
    body: ProxyBody,
    http2: bool,
    attempt: u32,
    protocol: Protocol,
) -> Result<Request<ProxyBody>, http::Error> {
    // A clone of the parsed path (shared bytes), not a re-parse of its text.
    let pq = parts
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));
    let uri = if http2 {
        // HTTP/2 needs :scheme and :authority, which hyper takes from an absolute URI. The
        // authority the client asked for (its checked `host`, or its own :authority), as an
        // HTTP/1.1 upstream gets it in `host`; the task's when the client named none.
        let asked = wire::find(&parts.headers, &header::HOST)
            .filter(|h| !h.is_empty())
            .and_then(|h| http::uri::Authority::try_from(h.as_bytes()).ok())
            .or_else(|| parts.uri.authority().cloned());
        http::Uri::builder()
            .scheme(task.scheme.clone())
            .authority(asked.unwrap_or_else(|| task.authority.clone()))
            .path_and_query(pq)
            .build()?
    } else {
        // HTTP/1.1 to an origin server: origin form (RFC 9112 §3.2.1), the authority in Host.
        http::Uri::from(pq)
    };
    let mut req = Request::new(body);
    *req.method_mut() = parts.method.clone();
    *req.uri_mut() = uri;
    *req.headers_mut() = if last {
        std::mem::take(&mut parts.headers)
    } else {
        parts.headers.clone()
    };
    if http2 {
        *req.version_mut() = Version::HTTP_2;
        req.headers_mut().remove(header::HOST);
    } else {
        *req.version_mut() = Version::HTTP_11;
        if parts.version >= Version::HTTP_2 {
            super::headers::join_cookies(req.headers_mut());
        }
        if wire::find(req.headers(), &header::HOST).is_none() {
            // The client's authority (an HTTP/2 client's :authority), else the task's.
            let host = parts
                .uri
                .authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
                .unwrap_or_else(|| task.host.clone());
            req.headers_mut().insert(header::HOST, host);
        }
    }
    if attempt > 1 {
        wire::set_attempt(req.headers_mut(), attempt, protocol);
    }
    Ok(req)
}
