//! One attempt to send an admitted request: pick a task (power of two choices), pass its client
//! throttle, take one of its request slots, and send with a timeout.
//!
//! Why its own step: an attempt ends in one of a few ways — not sent (the proxy answers),
//! refused by the local throttle, or sent with whatever came back — and the send loop
//! (`send.rs`) decides what each means (`verdict.rs`). Everything here that waits (a slot, the
//! h2c probe, the task's answer) keeps the throttle's count honest if the caller goes away
//! meanwhile ([`Unanswered`]).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::{self, HeaderValue};
use http::{Request, Response, Version};
use spillway_core::controller::{NoAnswer, Outcome, Permit};
use spillway_core::throttle::AdaptiveThrottle;
use spillway_tower::wire::{self, Protocol};

use super::abandoned::InExchange;
use super::body::ReqBody;
use super::send::Forward;
use crate::body::ResponseBody;
use crate::metrics::Fault;
use crate::request_body::{BodyBreak, RequestBody};
use crate::respond;
use crate::upstream::{InSlot, Task, Tried, UpstreamBody, UpstreamError};

/// What the task's connection gave back within the wait (`Err`: the wait ran out).
pub(super) type SendResult =
    Result<Result<Response<UpstreamBody>, UpstreamError>, tokio::time::error::Elapsed>;

/// A request the task's client throttle let through, outstanding there until its outcome is
/// known (while outstanding it is neither refused nor accepted: a cold start's requests in
/// flight read as refusals otherwise). Dropped unsettled — the request's future dropped
/// because its caller went away before the task answered — it records an accept: the task
/// refused nothing, and callers' short deadlines must not raise the throttle on a healthy task
/// (issue 28).
struct Unanswered<'a>(Option<&'a AdaptiveThrottle>);

impl Unanswered<'_> {
    /// The outcome is known (and its accept recorded, or deliberately not, by the caller).
    fn settled(&mut self) {
        if let Some(t) = self.0.take() {
            t.settle();
        }
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.0.take() {
            t.record_accept(Instant::now());
            t.settle();
        }
    }
}

/// The request's state across its attempts.
pub(super) struct Tries {
    /// The body, kept for replay when buffered.
    pub(super) body: ReqBody,
    /// The tasks tried so far.
    pub(super) tried: Tried,
    /// This attempt's number (the first is the caller's own `x-spillway-attempt`, at least 1).
    pub(super) number: u32,
    /// A streamed body's failure, seen by whichever upstream connection read it.
    pub(super) broke: Option<BodyBreak>,
    /// The request asks to upgrade the connection (never over HTTP/2, never replayed).
    pub(super) upgrade: bool,
    /// Sent over HTTP/2 (when the task speaks it, for `ask_h2c`).
    pub(super) wants_http2: bool,
    /// `auto`: each task is asked once whether it speaks h2c.
    pub(super) ask_h2c: bool,
}

impl Tries {
    /// Whether this attempt's request could be sent again elsewhere.
    pub(super) fn replayable(&self) -> bool {
        matches!(self.body, ReqBody::Buffered(..)) && !self.upgrade
    }
}

/// How an attempt ended.
pub(super) enum Attempt {
    /// Never sent: the proxy's own answer and the permit's outcome.
    NotSent(Response<ResponseBody>, Outcome),
    /// The task's client throttle refused it locally (SRE ch. 21).
    Throttled(Arc<Task>),
    /// Sent to the task.
    Sent(Sent),
}

/// An attempt sent to a task, and what came back.
pub(super) struct Sent {
    /// The task it went to.
    pub(super) task: Arc<Task>,
    /// Its in-flight count and request slot, held until the response body ends (`None`: the
    /// caller's deadline ran out, and the slot went on with the exchange, `abandoned`).
    pub(super) inflight: Option<InSlot>,
    /// The answer, a failure, or the wait's end.
    pub(super) result: SendResult,
    /// How long it waited for the response head.
    pub(super) timeout: Duration,
    /// Whose time that wait was.
    pub(super) bound: NoAnswer,
}

/// One attempt at `now`: to a task not tried yet, through its throttle and a request slot.
#[allow(clippy::manual_async_fn)] // an `async` block, as `Forward`'s callers: arguments stay put
pub(super) fn attempt<'a, 'f>(
    fw: &'a mut Forward<'f>,
    tries: &'a mut Tries,
    permit: &'a mut Permit,
    now: Instant,
) -> impl Future<Output = Attempt> + use<'a, 'f> {
    async move {
        let (protocol, pool) = (fw.protocol, &fw.rt.pool);
        let cfg = &pool.cfg;
        if fw.class.deadline.is_some_and(|d| d <= now) {
            // The caller's deadline ran out before this attempt could go (its body was slow, or
            // an earlier attempt used the time): sending it would time out at once and count
            // as the task's failure. Answered as the controller answers a deadline it sees.
            let res = respond::deadline_passed(fw.class.criticality, protocol);
            return Attempt::NotSent(res, Outcome::Ignore);
        }
        let Some(task) = pool.pick(&tries.tried, now) else {
            fw.state.faults.count(Fault::UpstreamUnavailable);
            let why = "no upstream task left to try (all tried or ejected)";
            let res = respond::unavailable(protocol, "no_upstream", why.into());
            return Attempt::NotSent(res, Outcome::Ignore);
        };
        tries.tried.add(task.id);
        let throttle = task.throttle(fw.class.criticality);
        if throttle.try_acquire(now).is_err() {
            return Attempt::Throttled(task);
        }
        // Counted as sent to the task: answered or not, from here on.
        let mut unanswered = Unanswered(Some(throttle));
        let wait = Duration::from_millis(cfg.pool_wait_timeout_ms);
        // A free slot is taken at once; only a wait needs the timer.
        let slot = match Arc::clone(&task.slots).try_acquire_owned().ok() {
            Some(s) => Ok(Ok(s)),
            None => tokio::time::timeout(wait, Arc::clone(&task.slots).acquire_owned()).await,
        };
        let Ok(Ok(slot)) = slot else {
            unanswered.settled();
            return Attempt::NotSent(pool_full(fw, &task), Outcome::Dropped);
        };
        let inflight = task.start_in_slot(now, slot);
        let task_index = usize::try_from(task.id).unwrap_or(usize::MAX);
        let http2 = tries.wants_http2
            && (!tries.ask_h2c
                || match pool.conns.h2c_known(task_index) {
                    Some(known) => known,
                    // Boxed: asked once per task, while this future is built per request.
                    None => Box::pin(pool.conns.probe_h2c(task_index)).await,
                });
        let req = match request_for_attempt(fw, tries, &task, http2) {
            Ok(req) => req,
            Err(res) => {
                unanswered.settled();
                return Attempt::NotSent(res, Outcome::Ignore);
            }
        };
        // The configured timeout or, when shorter, what is left of the caller's deadline; and
        // what its firing means (one decision with the sweep's model of the proxy, `sim::sweep`).
        let upstream_timeout = Duration::from_millis(cfg.request_timeout_ms);
        let (timeout, bound) = NoAnswer::wait_bound(
            upstream_timeout,
            fw.class.deadline.map(|d| d.saturating_duration_since(now)),
        );
        // Moved on the last attempt, as the headers are (`request_for_attempt`).
        let added = if pool.tasks().len() <= 1 {
            std::mem::take(&mut fw.added)
        } else {
            fw.added.clone()
        };
        let exchange =
            Arc::clone(&pool.conns).send_owned(task_index, req, http2, fw.raw_fields, added);
        let mut exchange = InExchange::new(
            Box::pin(exchange),
            inflight,
            permit,
            now,
            upstream_timeout,
            cfg.hold_abandoned,
        );
        let result = exchange.answer(timeout).await;
        unanswered.settled();
        drop(unanswered);
        let inflight = if result.is_err() && bound == NoAnswer::CallersDeadline {
            // The caller's time ran out, not the task's: it is still working on the request.
            exchange.abandon(bound.outcome());
            None
        } else {
            exchange.into_slot()
        };
        Attempt::Sent(Sent {
            task,
            inflight,
            result,
            timeout,
            bound,
        })
    }
}

/// The answer when every request slot to `task` stayed busy for the pool's wait.
fn pool_full(fw: &Forward<'_>, task: &Task) -> Response<ResponseBody> {
    let cfg = &fw.rt.pool.cfg;
    fw.state.faults.count(Fault::UpstreamUnavailable);
    let why = format!(
        "all {} request slots to upstream {} stayed busy for {} ms",
        cfg.max_requests_per_task, task.addr, cfg.pool_wait_timeout_ms
    );
    respond::unavailable(fw.protocol, "upstream_pool_full", why)
}

/// The request this attempt sends to `task`, or the proxy's answer when it cannot be made.
#[allow(clippy::result_large_err)] // either is moved on at once; a box would be one more allocation
fn request_for_attempt(
    fw: &mut Forward<'_>,
    tries: &mut Tries,
    task: &Task,
    http2: bool,
) -> Result<Request<RequestBody>, Response<ResponseBody>> {
    let Some(body) = body_for_attempt(tries) else {
        // Cannot happen (streamed bodies are never retried); answer rather than panic.
        return Err(respond::internal(
            fw.protocol,
            "request body already sent".into(),
        ));
    };
    // With one task there is never a second attempt (retries go to *another* task), so the
    // headers can move into the upstream request instead of being copied for a retry.
    let last = fw.rt.pool.tasks().len() <= 1;
    upstream_request(fw.parts, last, task, body, http2, tries.number, fw.protocol).map_err(|e| {
        let why = format!("cannot build the upstream request: {e}");
        respond::internal(fw.protocol, why)
    })
}

/// The body this attempt sends: the buffered bytes again, or the streamed body (once, watched
/// for the client's failure). `None` if a streamed body was sent already.
fn body_for_attempt(tries: &mut Tries) -> Option<RequestBody> {
    match &mut tries.body {
        ReqBody::Buffered(b, _) => Some(RequestBody::full(b.clone())),
        ReqBody::Streamed(b) => {
            let mut b = b.take()?;
            tries.broke = Some(b.watch());
            Some(RequestBody::streamed(b))
        }
    }
}

/// The request sent to `task`: its URI in the form the upstream protocol wants, the client's
/// headers (moved on the `last` attempt, else copied), `Host` or `:authority`, the attempt.
fn upstream_request(
    parts: &mut http::request::Parts,
    last: bool,
    task: &Task,
    body: RequestBody,
    http2: bool,
    attempt: u32,
    protocol: Protocol,
) -> Result<Request<RequestBody>, http::Error> {
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
