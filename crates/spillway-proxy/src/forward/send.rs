//! Sending an admitted request upstream: read its body (buffered for replay when small), then
//! attempt after attempt (`attempt.rs`: pick, throttle, slot, send), each outcome judged
//! (`verdict.rs`: answer, retry elsewhere, give up, tunnel) until one is the answer.
//!
//! Why the loop is this short: each step is one function with a name, so the order a request
//! meets them in — the SRE book's (ch. 21) client-side throttle before the send, the retry
//! policy after a refusal — is read here, and each rule where it is decided.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header;
use http::{Response, StatusCode, Version};
use metrics::SharedString;
use spillway_core::controller::{NoAnswer, Outcome, Permit};
use spillway_tower::client::overload_refusal;
use spillway_tower::metrics::{self as tower_metrics, RequestLabels};
use spillway_tower::wire::{self, OverloadGiveUp, Protocol};

use super::attempt::{attempt, Attempt, Sent, Tries};
use super::body::{read_body, ReadError, ReqBody};
use super::retry::RetryAsk;
use super::verdict::{classify, Ended, Next, TaskMark, Verdict};
use super::UnreadRequestBody;
use crate::body::{empty_body, Guard, GuardedResponseBody, ResponseBody, TunnelHold};
use crate::config::UpstreamProtocol;
use crate::http1::{strip_hop_by_hop, AddedHeaders};
use crate::metrics::Fault;
use crate::progress::ActiveRequest;
use crate::request_body::BodyBreak;
use crate::respond;
use crate::route::Classified;
use crate::state::{ProxyState, Runtime};
use crate::upstream::{Pool, Task, Tried, UpstreamBody};

/// gRPC `CANCELLED`: the client's side of the stream failed.
const GRPC_CANCELLED: u16 = 1;

/// An admitted request on its way upstream: what every step of its forwarding reads.
pub(super) struct Forward<'a> {
    /// The proxy's state (faults, controls, body budget).
    pub(super) state: &'a Arc<ProxyState>,
    /// The configuration in force (pool, listener timeouts).
    pub(super) rt: &'a Arc<Runtime>,
    /// The request's head, borrowed from `handle`'s future, which holds it anyway.
    pub(super) parts: &'a mut http::request::Parts,
    /// The fields written beside the map (`http1::AddedHeaders`), moved into the last
    /// attempt's exchange as the headers are.
    pub(super) added: AddedHeaders,
    /// HTTP or gRPC, for the proxy's own answers.
    pub(super) protocol: Protocol,
    /// Its classification: criticality, deadline, attempt.
    pub(super) class: &'a Classified,
    /// Its metric labels, held by the response body's guard.
    pub(super) labels: RequestLabels,
    /// The connection's record of it, held until the response body ends.
    pub(super) busy: Option<ActiveRequest>,
    /// The listener passes the response's own fields on as bytes (`http1::RawFields`).
    pub(super) raw_fields: bool,
}

/// An upstream's 101: its side of the tunnel, and what the tunnel holds until it closes.
pub(super) struct Upgrade {
    pub(super) upstream: hyper::upgrade::OnUpgrade,
    pub(super) hold: TunnelHold,
}

/// The answer to `fw`'s request with `body`, admitted with `permit`; and, for a 101, the
/// upstream's side of the tunnel.
#[allow(clippy::manual_async_fn)] // on purpose: see the body's first comment
pub(super) fn forward<'a>(
    mut fw: Forward<'a>,
    body: UnreadRequestBody,
    mut permit: Permit,
) -> impl Future<Output = (Response<ResponseBody>, Option<Upgrade>)> + 'a {
    // An `async` block, not an `async fn`: its arguments are not moved once more when first
    // polled (`upstream::Connections::send`).
    async move {
        // Until the task answers, a future dropped here (the caller went away: its gRPC deadline
        // fired in the client, which reset the stream, or it cancelled) says nothing about the
        // task: its wait is no service time and no limit sample. Every path below that ends the
        // request sets the outcome it means; the answered one sets `Success`.
        permit.set_outcome(NoAnswer::CallerGone.outcome());
        let body_was_empty = http_body::Body::is_end_stream(&body);
        let read = if body_was_empty {
            // No body (most GETs): no reading future to build, move and poll.
            Ok(ReqBody::Buffered(bytes::Bytes::new(), None))
        } else {
            let budget = fw.state.body_budget();
            let limit = fw.rt.pool.cfg.retry_buffer_bytes;
            read_body(body, limit, budget, fw.read_timeout()).await
        };
        let mut tries = match read {
            Ok(body) => fw.tries(body),
            Err(e) => {
                // Nothing was sent upstream: the admission slot taught nothing about capacity.
                permit.set_outcome(Outcome::Ignore);
                return (fw.unread(e), None);
            }
        };
        // Without a body to wait for, the grant's time is now to within microseconds: one clock
        // read fewer per request (two on the first attempt).
        let start = if body_was_empty {
            permit.started_at()
        } else {
            Instant::now()
        };
        fw.rt.pool.retry_policy().record_request(start);
        // The first attempt starts at `start`; each retry reads the clock.
        let mut first_attempt = Some(start);
        loop {
            let now = first_attempt.take().unwrap_or_else(Instant::now);
            let (ended, sent) = match attempt(&mut fw, &mut tries, &mut permit, now).await {
                Attempt::NotSent(res, outcome) => {
                    permit.set_outcome(outcome);
                    return (res, None);
                }
                Attempt::Throttled(task) => match fw.throttled(&task, &mut tries, now) {
                    Ok(()) => continue,
                    Err((res, outcome)) => {
                        permit.set_outcome(outcome);
                        return (res, None);
                    }
                },
                Attempt::Sent(sent) => (how_it_ended(&sent, tries.broke.as_ref()), sent),
            };
            let now = Instant::now();
            let v = fw.judge(ended, &sent.task, &tries, now);
            match v.next {
                Next::RetryElsewhere(why) => {
                    if let Some(why) = why {
                        tower_metrics::retried(&fw.labels, dest(&sent.task), why);
                    }
                    tries.number += 1;
                }
                Next::GiveUp(outcome) => {
                    permit.set_outcome(outcome);
                    return (fw.fault_answer(sent, tries.broke.as_ref()), None);
                }
                Next::Answer(outcome) | Next::Tunnel(outcome) => {
                    permit.set_outcome(outcome);
                    return fw.pass(sent, permit, v.dont_retry_marker, now);
                }
            }
        }
    }
}

impl Forward<'_> {
    /// How long a body to be buffered may take to arrive.
    fn read_timeout(&self) -> Duration {
        Duration::from_millis(self.rt.config.listen.header_read_timeout_ms)
    }

    /// The answer to a request whose body could not be read: too slow (408) or broken (400).
    fn unread(&self, e: ReadError) -> Response<ResponseBody> {
        match e {
            ReadError::Timeout => {
                self.state.faults.count(Fault::BodyTimeout);
                let why = format!(
                    "the request body did not arrive within {} ms",
                    self.read_timeout().as_millis()
                );
                let status = StatusCode::REQUEST_TIMEOUT;
                respond::error(self.protocol, status, GRPC_CANCELLED, "body_timeout", why)
            }
            ReadError::Broken(why) => bad_body(self.state, self.protocol, &why),
        }
    }

    /// The request's attempts, about to begin, with `body` read.
    fn tries(&self, body: ReqBody) -> Tries {
        let cfg = &self.rt.pool.cfg;
        let upgrade = wire::find(&self.parts.headers, &header::UPGRADE).is_some();
        let wants_http2 = match cfg.protocol {
            UpstreamProtocol::Http1 => false,
            UpstreamProtocol::Http2 => true,
            UpstreamProtocol::Auto => self.parts.version == Version::HTTP_2,
        } && !upgrade;
        Tries {
            body,
            tried: Tried::default(),
            number: self.class.attempt.max(1),
            broke: None,
            upgrade,
            wants_http2,
            // `auto` asks each task once whether it speaks h2c (gRPC needs HTTP/2 whatever it
            // says).
            ask_h2c: wants_http2
                && cfg.protocol == UpstreamProtocol::Auto
                && self.protocol != Protocol::Grpc,
        }
    }

    /// An attempt that `task`'s client throttle refused locally (SRE ch. 21): `Ok` to try
    /// another task, or the answer giving up and the admission slot's outcome.
    #[allow(clippy::result_large_err)] // the answer is returned at once; a box would allocate
    fn throttled(
        &self,
        task: &Task,
        tries: &mut Tries,
        now: Instant,
    ) -> Result<(), (Response<ResponseBody>, Outcome)> {
        tower_metrics::throttled(&self.labels, dest(task));
        let v = self.judge(Ended::Throttled, task, tries, now);
        let Next::GiveUp(outcome) = v.next else {
            tries.number += 1;
            return Ok(());
        };
        let why = OverloadGiveUp {
            attempts: tries.number,
            reason: "throttled",
        };
        Err((respond::give_up(&why, self.protocol), outcome))
    }

    /// The verdict on an attempt to `task` that `ended` so, with what it records: the retry
    /// policy's ring, the fault, the task's failure or success, the throttle's accept.
    fn judge(&self, ended: Ended, task: &Task, tries: &Tries, now: Instant) -> Verdict {
        let pool = &*self.rt.pool;
        if let Some(refused) = ended.refused() {
            pool.retry_policy().record_outcome(now, task.id, refused);
        }
        let mut ask = RetryAsk {
            state: self.state,
            pool,
            tried: &tries.tried,
            now,
            attempt: tries.number,
            replayable: tries.replayable(),
        };
        let v = classify(ended, &mut ask);
        if let Some(f) = v.fault {
            self.state.faults.count(f);
        }
        let throttle = || task.throttle(self.class.criticality);
        match v.task {
            TaskMark::Unmarked => {}
            TaskMark::Failed => pool.record_failure(task, now),
            TaskMark::Accepted => throttle().record_accept(now),
            TaskMark::Succeeded => {
                throttle().record_accept(now);
                pool.record_success(task);
            }
            TaskMark::FailedAnswer => {
                throttle().record_accept(now);
                pool.record_failure(task, now);
            }
        }
        v
    }

    /// The proxy's own answer to an attempt that failed: a timeout (504), the client's broken
    /// upload (400), or the task's fault (502).
    fn fault_answer(&self, sent: Sent, broke: Option<&BodyBreak>) -> Response<ResponseBody> {
        let (protocol, addr) = (self.protocol, &sent.task.addr);
        let e = match sent.result {
            Ok(Err(e)) => e,
            Err(_) => {
                let whose = if sent.bound == NoAnswer::CallersDeadline {
                    " (what was left of the request's deadline)"
                } else {
                    ""
                };
                let ms = sent.timeout.as_millis();
                let why = format!("upstream {addr} sent no response head within {ms} ms{whose}");
                return respond::timeout(protocol, why);
            }
            Ok(Ok(_)) => return respond::internal(protocol, "an answer judged a fault".into()),
        };
        if e.is_connect() {
            let why = format!("upstream {addr} refused the connection: {}", cause(&e));
            return respond::bad_gateway(protocol, "upstream_connect", why);
        }
        if client_body_broke(&e, broke) {
            let why = match broke.and_then(|b| b.get()) {
                Some(why) => why.to_string(),
                None => std::error::Error::source(&e).map_or_else(|| cause(&e), cause),
            };
            return bad_body(self.state, protocol, &why);
        }
        // An invalid response is named by what was wrong with it (the error's own level would
        // only repeat "invalid response").
        let (fault, what, why) = match std::error::Error::source(&e) {
            Some(s) if e.is_invalid_response() => {
                (Fault::UpstreamInvalid, "sent an invalid response", cause(s))
            }
            _ => (Fault::UpstreamReset, "broke the connection", cause(&e)),
        };
        let why = format!("upstream {addr} {what}: {why}");
        respond::bad_gateway(protocol, fault.as_str(), why)
    }

    /// Passes the task's response on: its reports read, a 101 turned into a tunnel holding the
    /// permit, else its body guarded so the permit ends with it.
    fn pass(
        self,
        sent: Sent,
        mut permit: Permit,
        dont_retry_marker: bool,
        now: Instant,
    ) -> (Response<ResponseBody>, Option<Upgrade>) {
        let Sent {
            task,
            inflight: Some(inflight),
            result: Ok(Ok(mut res)),
            ..
        } = sent
        else {
            let res = respond::internal(self.protocol, "a fault judged an answer".into());
            return (res, None);
        };
        if dont_retry_marker {
            // The proxy gave up: the caller must not retry either (SRE ch. 21).
            for (k, v) in OverloadGiveUp::marker_headers() {
                res.headers_mut().insert(k, v);
            }
        }
        let pool = &self.rt.pool;
        read_reports(pool, &task, &res, &mut permit, now);
        if res.status() == StatusCode::SWITCHING_PROTOCOLS {
            // The 101 ends the HTTP exchange but not the work: the permit, in-flight count and
            // slot move to the tunnel and are held until it closes.
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
        // Answer in the client's dialect: an HTTP/1.0 upstream must not turn the client's
        // keep-alive HTTP/1.1 connection into 1.0 (hyper's h2 server ignores it).
        p.version = Version::HTTP_11;
        let grpc = self.protocol == Protocol::Grpc;
        let body = GuardedResponseBody {
            inner: b,
            guard: Some(Guard {
                permit,
                labels: self.labels,
                _inflight: inflight,
                _busy: self.busy,
                report: !grpc,
                waiting: false,
                trailer_reports: grpc.then(|| Arc::clone(pool)),
            }),
        };
        (Response::from_parts(p, ResponseBody::upstream(body)), None)
    }
}

/// How a sent attempt ended, for [`classify`].
fn how_it_ended(sent: &Sent, broke: Option<&BodyBreak>) -> Ended {
    match &sent.result {
        Err(_) => Ended::TimedOut { bound: sent.bound },
        Ok(Err(e)) if e.is_connect() => Ended::ConnectFailed,
        Ok(Err(e)) if client_body_broke(e, broke) => Ended::ClientBodyBroke,
        Ok(Err(e)) => Ended::UpstreamFailed(match std::error::Error::source(e) {
            Some(_) if e.is_invalid_response() => Fault::UpstreamInvalid,
            _ => Fault::UpstreamReset,
        }),
        Ok(Ok(res)) => Ended::Responded {
            // The same reading as spillway-tower's client layers (one classification).
            overload: overload_refusal(res).map(|o| o.dont_retry),
            server_error: res.status().is_server_error(),
            switching: res.status() == StatusCode::SWITCHING_PROTOCOLS,
        },
    }
}

/// Whether the client's upload broke (cut short, invalid chunked coding): nothing about the
/// task. An HTTP/1.1 upstream connection says so itself; hyper's HTTP/2 client only resets the
/// stream, so the body's own record tells.
fn client_body_broke(e: &crate::upstream::UpstreamError, broke: Option<&BodyBreak>) -> bool {
    e.is_client_body() || broke.is_some_and(|b| b.get().is_some())
}

fn dest(task: &Task) -> SharedString {
    SharedString::from(Arc::clone(&task.addr))
}

/// The client's request body could not be read (400 / `CANCELLED`), counted `bad_request`.
fn bad_body(state: &ProxyState, protocol: Protocol, why: &str) -> Response<ResponseBody> {
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
