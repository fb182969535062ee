//! [`Retry`]: the attempt loop.

use std::hash::{Hash, Hasher};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::{HeaderMap, Method, Request, Response, Uri, Version};
use http_body::Body;
use spillway_core::random::{RandomSource, ThreadRandom};
use spillway_core::retry::{Failure, RetryDecision, RetryPolicy};
use tower::ServiceExt;
use tower_service::Service;

use super::body::{prepare, Prepared, Replay, RetryBody};
use super::error::GiveUpReason;
use super::future::ResponseFuture;
use super::layer::{RetryLayer, RetryMode, Settings};
use crate::client::classify::{is_connection_error, overload_refusal};
use crate::client::{BoxError, Throttled};
use crate::context;
use crate::wire::{self, OverloadGiveUp, Protocol};

/// Retry middleware; built by [`super::RetryLayer`].
#[derive(Clone)]
pub struct Retry<S> {
    pub(crate) inner: S,
    pub(crate) layer: RetryLayer,
}

impl<S: std::fmt::Debug> std::fmt::Debug for Retry<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retry")
            .field("inner", &self.inner)
            .field("layer", &self.layer)
            .finish()
    }
}

impl<S, B, RB> Service<Request<B>> for Retry<S>
where
    S: Service<Request<RetryBody<B>>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    RB: Send + 'static,
{
    type Response = Response<RB>;
    type Error = BoxError;
    type Future = ResponseFuture<RB>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // The readied service goes to this call; the clone waits for the next `poll_ready`.
        let clone = self.inner.clone();
        let svc = std::mem::replace(&mut self.inner, clone);
        // Read the task-local now: `call` runs in the handler's task, the future may not.
        let (carried, deadline) =
            context::with_current(|c| (c.attempt.max(1), c.deadline)).unwrap_or((1, None));
        let carried = if self.layer.settings.count_incoming_attempts {
            carried
        } else {
            1
        };
        let layer = self.layer.clone();
        ResponseFuture {
            inner: Box::pin(run(svc, layer, req, carried, deadline)),
        }
    }
}

/// Everything of a request but its body, kept to rebuild one request per attempt
/// (`http::request::Parts` is not `Clone`).
struct Head {
    method: Method,
    uri: Uri,
    version: Version,
    headers: HeaderMap,
    extensions: http::Extensions,
}

impl Head {
    fn request<B>(
        &self,
        body: RetryBody<B>,
        attempt: u32,
        protocol: Protocol,
    ) -> Request<RetryBody<B>> {
        let mut req = Request::new(body);
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.uri.clone();
        *req.version_mut() = self.version;
        *req.headers_mut() = self.headers.clone();
        *req.extensions_mut() = self.extensions.clone();
        wire::set_attempt(req.headers_mut(), attempt, protocol);
        req
    }
}

/// How one attempt ended, as far as retrying is concerned.
enum Outcome<RB> {
    Done(Result<Response<RB>, BoxError>),
    Overload {
        resp: Response<RB>,
        dont_retry: bool,
        pushback: Option<Duration>,
    },
    Connection(BoxError),
    Throttled(BoxError),
}

fn judge<RB>(result: Result<Response<RB>, BoxError>) -> Outcome<RB> {
    match result {
        Ok(resp) => match overload_refusal(&resp) {
            Some(r) => Outcome::Overload {
                resp,
                dont_retry: r.dont_retry,
                pushback: r.retry_after,
            },
            None => Outcome::Done(Ok(resp)),
        },
        Err(e) if e.downcast_ref::<Throttled>().is_some() => Outcome::Throttled(e),
        Err(e) if is_connection_error(e.as_ref()) => Outcome::Connection(e),
        Err(e) => Outcome::Done(Err(e)),
    }
}

/// Identifies the destination for the core's "local or widespread?" judgement: requests behind
/// one authority are one "task" as far as this client can tell.
fn task_id(uri: &Uri) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    uri.authority()
        .map(|a| a.as_str())
        .unwrap_or("")
        .hash(&mut h);
    h.finish()
}

/// Full-jitter exponential backoff, at least the server's pushback, at most `backoff_max`.
fn delay(s: &Settings, retry: u32, pushback: Option<Duration>) -> Duration {
    let shift = retry.saturating_sub(1).min(20);
    let cap = s.backoff_base.saturating_mul(1 << shift).min(s.backoff_max);
    let jittered = cap.mul_f64(ThreadRandom.uniform());
    jittered
        .max(pushback.unwrap_or(Duration::ZERO))
        .min(s.backoff_max)
}

/// Gives up on an overload. A gRPC refusal is returned as the response itself, marked
/// (`grpc-retry-pushback-ms: -1`, `x-spillway-dont-retry: 1`, and the [`OverloadGiveUp`]
/// extension), because a gRPC client can only surface a status it can decode from a response:
/// the `tonic::Status` the caller gets keeps its code and carries the marker in its metadata,
/// which a tonic handler returning it passes on. Anything else becomes the error
/// [`OverloadGiveUp`], which this service's server layer answers with the marker.
fn give_up<RB>(
    layer: &RetryLayer,
    reason: GiveUpReason,
    attempts: u32,
    refusal: Option<Response<RB>>,
) -> Result<Response<RB>, BoxError> {
    layer.metrics.gave_up[reason.index()].increment(1);
    let marker = OverloadGiveUp {
        attempts,
        reason: reason.as_str(),
    };
    match refusal {
        Some(mut resp) if Protocol::of(resp.headers()) == Protocol::Grpc => {
            for (name, value) in OverloadGiveUp::marker_headers() {
                resp.headers_mut().insert(name, value);
            }
            resp.extensions_mut().insert(marker);
            Ok(resp)
        }
        _ => Err(Box::new(marker)),
    }
}

async fn run<S, B, RB>(
    mut svc: S,
    layer: RetryLayer,
    req: Request<B>,
    carried: u32,
    deadline: Option<Instant>,
) -> Result<Response<RB>, BoxError>
where
    S: Service<Request<RetryBody<B>>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    RB: Send + 'static,
{
    let (parts, body) = req.into_parts();
    let head = Head {
        method: parts.method,
        uri: parts.uri,
        version: parts.version,
        headers: parts.headers,
        extensions: parts.extensions,
    };
    let protocol = Protocol::of(&head.headers);
    let s = layer.settings;
    let policy: Option<&RetryPolicy> = match &layer.mode {
        RetryMode::Gated(p) => Some(p),
        RetryMode::Naive { .. } => None,
    };
    let task = task_id(&head.uri);
    if let Some(p) = policy {
        p.record_request(layer.clock.now());
    }

    let prepared = prepare(body, s.max_body_bytes, s.buffer_unknown_length)
        .await
        .map_err(Into::into)?;
    let replay: Replay = match prepared {
        Prepared::Replayable(r) => r,
        Prepared::PassThrough(body) => {
            // Sent once. An overload refusal still goes up marked, so the layer above does not
            // multiply what this layer could not retry.
            let result = svc
                .call(head.request(body, 1, protocol))
                .await
                .map_err(Into::into);
            if let Some(p) = policy {
                let outcome = judge(result);
                let refused = matches!(outcome, Outcome::Overload { .. } | Outcome::Throttled(_));
                p.record_outcome(layer.clock.now(), task, refused);
                return match outcome {
                    Outcome::Overload { resp, .. } => {
                        give_up(&layer, GiveUpReason::NotReplayable, carried, Some(resp))
                    }
                    Outcome::Throttled(_) => {
                        give_up(&layer, GiveUpReason::Throttled, carried, None)
                    }
                    Outcome::Done(r) => r,
                    Outcome::Connection(e) => {
                        layer.metrics.gave_up[GiveUpReason::NotReplayable.index()].increment(1);
                        Err(e)
                    }
                };
            }
            return result;
        }
    };

    let mut local: u32 = 1;
    let mut first = true;
    loop {
        if !first {
            svc.ready().await.map_err(Into::into)?;
        }
        first = false;
        let result = svc
            .call(head.request(replay.body(), local, protocol))
            .await
            .map_err(Into::into);
        let outcome = judge(result);
        let now = layer.clock.now();

        let Some(policy) = policy else {
            // Naive: retry whatever looks retryable until the attempts run out; return the last
            // answer unchanged (no marker, no budget — the behaviour that multiplies).
            let max = match layer.mode {
                RetryMode::Naive { max_attempts } => max_attempts,
                RetryMode::Gated(_) => 1,
            };
            let (retryable, last) = match outcome {
                Outcome::Done(r) => (false, r),
                Outcome::Overload { resp, .. } => (true, Ok(resp)),
                Outcome::Connection(e) | Outcome::Throttled(e) => (true, Err(e)),
            };
            if !retryable {
                return last;
            }
            if local >= max {
                layer.metrics.gave_up[GiveUpReason::NaiveLimit.index()].increment(1);
                return last;
            }
            layer.metrics.retried_overload.increment(1);
            local += 1;
            continue;
        };

        let attempts = carried.saturating_sub(1).saturating_add(local);
        // `last`: Ok(connection error) or Err(overload response) — what goes up if we stop here.
        let (failure, pushback, last) = match outcome {
            Outcome::Done(r) => {
                policy.record_outcome(now, task, false);
                return r;
            }
            Outcome::Throttled(_) => {
                policy.record_outcome(now, task, true);
                return give_up(&layer, GiveUpReason::Throttled, attempts, None);
            }
            Outcome::Overload {
                resp,
                dont_retry,
                pushback,
            } => {
                policy.record_outcome(now, task, true);
                let f = Failure {
                    attempts_made: attempts,
                    dont_retry,
                    retryable: true,
                };
                (f, pushback, Err(resp))
            }
            Outcome::Connection(e) => {
                // The task did not refuse for overload; it could not be reached.
                policy.record_outcome(now, task, false);
                (Failure::overloaded(attempts), None, Ok(e))
            }
        };

        let wait = delay(&s, local, pushback);
        if deadline.is_some_and(|d| now + wait >= d) {
            return match last {
                Ok(e) => {
                    layer.metrics.gave_up[GiveUpReason::Deadline.index()].increment(1);
                    Err(e)
                }
                Err(resp) => give_up(&layer, GiveUpReason::Deadline, attempts, Some(resp)),
            };
        }
        match policy.decide(now, &failure) {
            RetryDecision::Retry => {}
            RetryDecision::GiveUp(gate) => {
                return match last {
                    // Not an overload: the caller gets the transport error itself.
                    Ok(e) => {
                        layer.metrics.gave_up[GiveUpReason::Gate(gate).index()].increment(1);
                        Err(e)
                    }
                    Err(resp) => give_up(&layer, GiveUpReason::Gate(gate), attempts, Some(resp)),
                };
            }
        }
        if last.is_ok() {
            layer.metrics.retried_connection.increment(1);
        } else {
            layer.metrics.retried_overload.increment(1);
        }
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        local += 1;
    }
}
