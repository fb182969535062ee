//! [`ResponseFuture`]: waits in the admission queue if told to, then serves with the request's
//! context set and its CPU measured, and hands the permit to the response body.

use std::any::Any;
use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use http::{Request, Response};
use http_body::Body;
use spillway_core::controller::{
    Admission, AdmissionRequest, NoAnswer, Outcome, Permit, QueuedAdmission, Refusal,
};
use tokio::task::futures::TaskLocalFuture;
use tokio::time::Sleep;
use tower_service::Service;

use super::body::{Guard, SpillwayBody};
use super::classify::Classified;
use super::cpu::Measured;
use super::drain::drain_behind;
use super::layer::Shared;
use super::reject;
use crate::context::{self, RequestContext};
use crate::metrics::{self, RequestLabels};
use crate::wire::{self, OrcaReport, OverloadGiveUp, Protocol};

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<S, ReqB, F, ResB> {
        Queued {
            queued: Option<QueuedAdmission>,
            #[pin]
            timer: Sleep,
            pending: Option<(S, Request<ReqB>, RequestContext, RequestLabels)>,
        },
        Serving {
            #[pin]
            fut: Measured<TaskLocalFuture<RequestContext, F>>,
            guard: Option<Guard>,
        },
        Ready {
            response: Option<Response<SpillwayBody<ResB>>>,
        },
    }
}

pin_project_lite::pin_project! {
    /// Response future of [`Spillway`](super::Spillway).
    pub struct ResponseFuture<S, ReqB, ResB>
    where
        S: Service<Request<ReqB>>,
    {
        #[pin]
        state: State<S, ReqB, S::Future, ResB>,
        shared: Arc<Shared>,
        protocol: Protocol,
    }
}

impl<S, ReqB, ResB> ResponseFuture<S, ReqB, ResB>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    ReqB: Body + Send + 'static,
    ReqB::Data: Send,
    ReqB::Error: Send,
    ResB: Body<Data = bytes::Bytes>,
{
    /// Classifies and asks the controller — synchronously, inside `call`, so a refusal costs
    /// no task wake-up. A refused request's body is read behind the answer ([`drain_refused`]).
    pub(crate) fn start(shared: Arc<Shared>, svc: S, req: Request<ReqB>) -> Self {
        let now = shared.controller.now();
        let protocol = wire::Protocol::of(req.headers());
        let classified = shared.classifier.classify(
            req.method(),
            req.uri(),
            req.headers(),
            req.extensions(),
            now,
        );
        let c: Classified = match classified {
            Ok(c) => c,
            Err(e) => {
                drain_refused(req);
                return ResponseFuture::ready(shared, protocol, reject::bad_header(&e, protocol));
            }
        };
        let admission = shared.controller.admit(&AdmissionRequest {
            customer: &c.customer,
            criticality: c.criticality,
            operation: &c.operation,
            deadline: c.deadline,
            attempt: c.attempt,
            estimated_cost: c.estimated_cost,
            health_check: c.health_check,
            continuation: false,
        });
        shared.maybe_snapshot();
        // Customers and operations past the caps are counted as `other` (metrics::labels).
        let labels = if shared.metrics {
            shared
                .labels
                .request_shared(&c.customer, &c.operation, c.criticality)
        } else {
            RequestLabels {
                customer: Arc::clone(&c.customer),
                operation: c.operation.clone(),
                criticality: c.criticality,
            }
        };
        let ctx = RequestContext {
            criticality: c.criticality,
            deadline: c.deadline,
            customer: c.customer,
            attempt: c.attempt,
        };
        let state = match admission {
            Admission::Admitted(permit) => serve(&shared, svc, req, permit, ctx, labels),
            Admission::Queued(q) => State::Queued {
                timer: tokio::time::sleep_until(tokio::time::Instant::from_std(q.give_up_at())),
                queued: Some(q),
                pending: Some((svc, req, ctx, labels)),
            },
            Admission::Refused(r) => {
                drain_refused(req);
                State::Ready {
                    response: Some(refuse(&shared, &r, protocol, &labels)),
                }
            }
        };
        ResponseFuture {
            state,
            shared,
            protocol,
        }
    }

    fn ready(shared: Arc<Shared>, protocol: Protocol, res: Response<SpillwayBody<ResB>>) -> Self {
        ResponseFuture {
            state: State::Ready {
                response: Some(res),
            },
            shared,
            protocol,
        }
    }
}

/// A refused request's body, read behind the answer over HTTP/1.x ([`drain_behind`]). Over
/// HTTP/2 a dropped body resets only its own stream, after the response (RFC 9113 §8.1: a
/// server may answer before the request is complete and then ask the client to stop), so
/// reading it would only spend the refusal's budget on bytes nobody needs.
fn drain_refused<B>(req: Request<B>)
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Send,
{
    if req.version() <= http::Version::HTTP_11 {
        drain_behind(req.into_body());
    }
}

fn refuse<B>(
    shared: &Shared,
    r: &Refusal,
    protocol: Protocol,
    labels: &RequestLabels,
) -> Response<SpillwayBody<B>> {
    if shared.metrics {
        metrics::shed(labels, r.reason.as_str());
    }
    reject::refusal(r, protocol, shared.default_retry_after)
}

fn serve<S, ReqB, ResB>(
    shared: &Shared,
    mut svc: S,
    req: Request<ReqB>,
    mut permit: Permit,
    ctx: RequestContext,
    labels: RequestLabels,
) -> State<S, ReqB, S::Future, ResB>
where
    S: Service<Request<ReqB>>,
{
    // Until the request ends one way or another, an early drop means the caller went away.
    permit.set_outcome(NoAnswer::CallerGone.outcome());
    if shared.metrics {
        metrics::admitted(&labels, permit.queue_time());
    }
    let admitted_at = shared.controller.now();
    let guard = Guard::new(
        permit,
        shared.controller.clone(),
        labels,
        admitted_at,
        shared.measure_cpu,
        shared.metrics,
    );
    // The handler runs inside the request's context; `call` itself too, as some services do
    // their work eagerly there.
    let call = context::sync_scope(ctx.clone(), || svc.call(req));
    State::Serving {
        fut: Measured::new(context::scope(ctx, call), shared.measure_cpu),
        guard: Some(guard),
    }
}

/// Whether an inner error is (or wraps, via a `BoxError`'s source chain) [`OverloadGiveUp`].
fn is_give_up<E: 'static>(e: &E) -> bool {
    let any = e as &dyn Any;
    if any.is::<OverloadGiveUp>() {
        return true;
    }
    let boxed: Option<&(dyn StdError + 'static)> = any
        .downcast_ref::<Box<dyn StdError + Send + Sync>>()
        .map(|b| &**b as &(dyn StdError + 'static))
        .or_else(|| {
            any.downcast_ref::<Box<dyn StdError>>()
                .map(|b| &**b as &(dyn StdError + 'static))
        });
    let mut cur = boxed;
    while let Some(e) = cur {
        if e.is::<OverloadGiveUp>() {
            return true;
        }
        cur = e.source();
    }
    false
}

impl<S, ReqB, ResB> ResponseFuture<S, ReqB, ResB>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    S::Error: 'static,
    ResB: Body<Data = bytes::Bytes>,
{
    /// The served response: note its outcome, normalise don't-retry markers, add the optional
    /// headers, and move the permit into the body.
    fn finish_response(
        shared: &Shared,
        protocol: Protocol,
        mut res: Response<ResB>,
        mut guard: Guard,
    ) -> Response<SpillwayBody<ResB>> {
        if res.extensions().get::<OverloadGiveUp>().is_some() {
            guard.failed = true;
            guard.finish(Outcome::Dropped);
            return reject::give_up(protocol, shared.default_retry_after);
        }
        let grpc = wire::grpc_status(res.headers());
        if res.status().is_server_error()
            || matches!(
                grpc,
                Some(wire::GRPC_UNAVAILABLE | wire::GRPC_RESOURCE_EXHAUSTED)
            )
        {
            guard.failed = true;
        }
        let h = res.headers_mut();
        if wire::is_dont_retry(h) {
            // A handler that passed on a downstream's "don't retry" (or marked its own): say it
            // in both dialects so whichever client is above understands it.
            reject::mark_dont_retry(h);
        }
        if shared.cost_headers {
            let now = shared.controller.now();
            let cost = if guard.cpu.enabled() {
                guard.cpu.spent().as_secs_f64()
            } else {
                shared.classifier.estimated_cost
            };
            h.insert(wire::COST, wire::format_cost(cost));
            h.insert(wire::QUEUE_MS, wire::format_millis(guard.queue_time()));
            h.insert(
                wire::SERVICE_MS,
                wire::format_millis(now.saturating_duration_since(guard.admitted_at())),
            );
        }
        if shared.orca {
            let report = OrcaReport {
                application_utilization: Some(shared.utilisation()),
                ..OrcaReport::default()
            };
            h.insert(wire::ENDPOINT_LOAD_METRICS, wire::format_orca(&report));
        }
        guard.answered = true;
        res.map(|body| SpillwayBody::served(body, guard))
    }
}

impl<S, ReqB, ResB> Future for ResponseFuture<S, ReqB, ResB>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    S::Error: 'static,
    ReqB: Body + Send + 'static,
    ReqB::Data: Send,
    ReqB::Error: Send,
    ResB: Body<Data = bytes::Bytes>,
{
    type Output = Result<Response<SpillwayBody<ResB>>, S::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let mut this = self.as_mut().project();
            let next = match this.state.as_mut().project() {
                StateProj::Ready { response } => {
                    return match response.take() {
                        Some(r) => Poll::Ready(Ok(r)),
                        None => panic!("ResponseFuture polled after completion"),
                    };
                }
                StateProj::Queued {
                    queued,
                    mut timer,
                    pending,
                } => {
                    let Some(q) = queued.as_mut() else {
                        panic!("ResponseFuture polled after completion");
                    };
                    let result = match Pin::new(&mut *q).poll(cx) {
                        Poll::Ready(r) => r,
                        Poll::Pending => {
                            // Brought forward while it waits (`QueuedAdmission::give_up_at`).
                            let at = tokio::time::Instant::from_std(q.give_up_at());
                            if at < timer.deadline() {
                                timer.as_mut().reset(at);
                            }
                            ready!(timer.poll(cx));
                            // The timer fired first: count it as a queue timeout / deadline.
                            match queued.take() {
                                Some(q) => Err(q.expire()),
                                None => panic!("ResponseFuture polled after completion"),
                            }
                        }
                    };
                    queued.take();
                    let Some((svc, req, ctx, labels)) = pending.take() else {
                        panic!("ResponseFuture polled after completion");
                    };
                    match result {
                        Ok(permit) => serve(this.shared, svc, req, permit, ctx, labels),
                        Err(refusal) => {
                            drain_refused(req);
                            State::Ready {
                                response: Some(refuse(
                                    this.shared,
                                    &refusal,
                                    *this.protocol,
                                    &labels,
                                )),
                            }
                        }
                    }
                }
                StateProj::Serving { fut, guard } => {
                    let (result, meter) = ready!(fut.poll(cx));
                    let Some(mut g) = guard.take() else {
                        panic!("ResponseFuture polled after completion");
                    };
                    g.cpu = meter;
                    let response = match result {
                        Ok(res) => Self::finish_response(this.shared, *this.protocol, res, g),
                        Err(e) if is_give_up(&e) => {
                            g.failed = true;
                            g.finish(Outcome::Dropped);
                            reject::give_up(*this.protocol, this.shared.default_retry_after)
                        }
                        Err(e) => {
                            g.finish(Outcome::Dropped);
                            return Poll::Ready(Err(e));
                        }
                    };
                    State::Ready {
                        response: Some(response),
                    }
                }
            };
            this.state.set(next);
        }
    }
}
