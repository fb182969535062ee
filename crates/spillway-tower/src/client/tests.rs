//! Unit tests of the client layers with in-process services (the loopback tests are in
//! `tests/client_*.rs` and `tests/chain_*.rs`).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full};
use spillway_core::retry::RetryConfig;
use spillway_core::Criticality;
use tower::{Layer, Service, ServiceExt};

use super::classify::{is_connection_error, overload_refusal};
use super::retry::body::{prepare, Prepared};
use super::*;
use crate::context::{self, RequestContext};
use crate::wire::{self, OverloadGiveUp};

/// A body of unknown length delivered in chunks.
struct Chunks(VecDeque<Bytes>);

impl Body for Chunks {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(self.0.pop_front().map(|b| Ok(Frame::data(b))))
    }
}

fn chunks(n: usize, size: usize) -> Chunks {
    Chunks((0..n).map(|i| Bytes::from(vec![i as u8; size])).collect())
}

async fn collect<B: Body>(b: B) -> Bytes
where
    B::Error: std::fmt::Debug,
{
    b.collect().await.expect("body").to_bytes()
}

#[tokio::test]
async fn small_bodies_replay_identically_and_large_ones_pass_through_intact() {
    let small = Full::new(Bytes::from_static(b"hello"));
    let Ok(Prepared::Replayable(r)) = prepare(small, 64, false).await else {
        panic!("a 5-byte body under a 64-byte bound is replayable");
    };
    assert_eq!(collect(r.body::<Full<Bytes>>()).await, "hello");
    assert_eq!(
        collect(r.body::<Full<Bytes>>()).await,
        "hello",
        "second attempt"
    );

    let big = Full::new(Bytes::from(vec![7u8; 100]));
    let Ok(Prepared::PassThrough(b)) = prepare(big, 64, true).await else {
        panic!("a 100-byte body over a 64-byte bound is not buffered");
    };
    assert_eq!(collect(b).await, Bytes::from(vec![7u8; 100]));
}

#[tokio::test]
async fn unknown_length_bodies_are_buffered_only_on_opt_in_and_never_lose_bytes() {
    let expect: Vec<u8> = (0..10u8).flat_map(|i| vec![i; 10]).collect();
    let Ok(Prepared::PassThrough(b)) = prepare(chunks(10, 10), 1000, false).await else {
        panic!("unknown length without opt-in passes through");
    };
    assert_eq!(collect(b).await, expect);
    let Ok(Prepared::Replayable(r)) = prepare(chunks(10, 10), 1000, true).await else {
        panic!("unknown length, opted in, under the bound: replayable");
    };
    assert_eq!(collect(r.body::<Chunks>()).await, expect);
    // Over the bound after a few chunks: what was read is forwarded before the rest.
    let Ok(Prepared::PassThrough(b)) = prepare(chunks(10, 10), 35, true).await else {
        panic!("over the bound: passes through");
    };
    assert_eq!(collect(b).await, expect);
}

fn resp(status: u16, headers: &[(&str, &str)]) -> Response<()> {
    let mut r = Response::new(());
    *r.status_mut() = StatusCode::from_u16(status).expect("status");
    for (k, v) in headers {
        r.headers_mut().insert(
            http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
            HeaderValue::from_str(v).expect("value"),
        );
    }
    r
}

#[test]
fn overload_refusals_are_503_429_and_grpc_unavailable_or_resource_exhausted() {
    assert!(overload_refusal(&resp(503, &[])).is_some());
    assert!(overload_refusal(&resp(429, &[])).is_some());
    assert!(overload_refusal(&resp(500, &[])).is_none());
    assert!(overload_refusal(&resp(200, &[])).is_none());
    let grpc = |code: &str| {
        resp(
            200,
            &[("content-type", "application/grpc"), ("grpc-status", code)],
        )
    };
    assert!(overload_refusal(&grpc("14")).is_some());
    assert!(overload_refusal(&grpc("8")).is_some());
    assert!(overload_refusal(&grpc("13")).is_none());
    assert!(overload_refusal(&grpc("0")).is_none());

    let r = overload_refusal(&resp(503, &[("retry-after", "2")])).expect("refusal");
    assert_eq!(
        (r.dont_retry, r.retry_after),
        (false, Some(Duration::from_secs(2)))
    );
    let r = overload_refusal(&resp(503, &[("x-spillway-dont-retry", "1")])).expect("refusal");
    assert!(r.dont_retry);
    let mut g = grpc("14");
    g.headers_mut()
        .insert(wire::GRPC_RETRY_PUSHBACK_MS, HeaderValue::from_static("-1"));
    assert!(overload_refusal(&g).expect("refusal").dont_retry);
    g.headers_mut().insert(
        wire::GRPC_RETRY_PUSHBACK_MS,
        HeaderValue::from_static("150"),
    );
    let r = overload_refusal(&g).expect("refusal");
    assert_eq!(
        (r.dont_retry, r.retry_after),
        (false, Some(Duration::from_millis(150)))
    );
}

#[derive(Debug)]
struct Wrapper(std::io::Error);
impl std::fmt::Display for Wrapper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("client error")
    }
}
impl std::error::Error for Wrapper {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

#[test]
fn connection_errors_are_found_through_wrappers() {
    let refused = Wrapper(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
    assert!(is_connection_error(&refused));
    let other = Wrapper(std::io::Error::from(std::io::ErrorKind::InvalidData));
    assert!(!is_connection_error(&other));
    let e: BoxError = Box::new(refused);
    assert!(find_cause::<std::io::Error>(e.as_ref()).is_some());
}

/// A downstream answering from a script, recording the attempt header of each request.
#[derive(Clone)]
struct Scripted {
    answers: Arc<Mutex<VecDeque<Response<()>>>>,
    attempts: Arc<Mutex<Vec<String>>>,
    calls: Arc<AtomicU32>,
}

impl Scripted {
    fn new(answers: Vec<Response<()>>) -> Self {
        Scripted {
            answers: Arc::new(Mutex::new(answers.into())),
            attempts: Arc::default(),
            calls: Arc::default(),
        }
    }
}

impl<B> Service<Request<B>> for Scripted {
    type Response = Response<()>;
    type Error = BoxError;
    type Future = std::future::Ready<Result<Response<()>, BoxError>>;
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, req: Request<B>) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let a = req
            .headers()
            .get(wire::ATTEMPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_owned();
        self.attempts.lock().unwrap().push(a);
        let next = self.answers.lock().unwrap().pop_front();
        std::future::ready(Ok(next.unwrap_or_else(|| resp(503, &[]))))
    }
}

fn gated() -> RetryLayer {
    RetryLayer::new(RetryConfig::default())
        .and_then(|l| l.backoff(Duration::ZERO, Duration::ZERO))
        .expect("valid")
}

async fn send(
    svc: impl Service<Request<Full<Bytes>>, Response = Response<()>, Error = BoxError>,
) -> Result<Response<()>, BoxError> {
    svc.oneshot(Request::new(Full::new(Bytes::from_static(b"x"))))
        .await
}

#[tokio::test]
async fn retries_overload_with_attempt_headers_then_gives_up_marked() {
    let down = Scripted::new(vec![]);
    let err = send(gated().layer(down.clone()))
        .await
        .expect_err("gives up");
    let g = err
        .downcast_ref::<OverloadGiveUp>()
        .expect("OverloadGiveUp");
    assert_eq!((g.attempts, g.reason), (3, "attempt_limit"));
    assert_eq!(*down.attempts.lock().unwrap(), ["1", "2", "3"]);

    // Success on the second attempt is returned as is.
    let down = Scripted::new(vec![resp(503, &[]), resp(200, &[])]);
    let ok = send(gated().layer(down.clone())).await.expect("served");
    assert_eq!(ok.status(), 200);
    assert_eq!(down.calls.load(Ordering::SeqCst), 2);

    // A non-overload failure is not retried and goes up unchanged.
    let down = Scripted::new(vec![resp(500, &[])]);
    let r = send(gated().layer(down.clone())).await.expect("response");
    assert_eq!(
        (r.status().as_u16(), down.calls.load(Ordering::SeqCst)),
        (500, 1)
    );
}

#[tokio::test]
async fn dont_retry_marker_stops_at_once_and_naive_ignores_it() {
    let marked = || resp(503, &[("x-spillway-dont-retry", "1")]);
    let down = Scripted::new(vec![marked(), marked(), marked()]);
    let err = send(gated().layer(down.clone()))
        .await
        .expect_err("gives up");
    assert_eq!(
        err.downcast_ref::<OverloadGiveUp>().map(|g| g.reason),
        Some("dont_retry")
    );
    assert_eq!(down.calls.load(Ordering::SeqCst), 1);

    let naive = RetryLayer::naive(3)
        .and_then(|l| l.backoff(Duration::ZERO, Duration::ZERO))
        .expect("valid");
    let down = Scripted::new(vec![marked(), marked(), marked()]);
    let r = send(naive.layer(down.clone()))
        .await
        .expect("naive returns the last refusal");
    assert_eq!(r.status(), 503);
    assert_eq!(down.calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn attempts_carried_in_count_and_the_deadline_is_never_passed() {
    // Serving attempt 3 of 3: the downstream call gets one attempt and no retry.
    let down = Scripted::new(vec![]);
    let ctx = RequestContext {
        attempt: 3,
        ..RequestContext::default()
    };
    let err = context::scope(ctx, send(gated().layer(down.clone())))
        .await
        .expect_err("gives up");
    assert_eq!(
        err.downcast_ref::<OverloadGiveUp>().map(|g| g.reason),
        Some("attempt_limit")
    );
    assert_eq!(
        *down.attempts.lock().unwrap(),
        ["1"],
        "the wire attempt is the call's own"
    );

    // A deadline already at hand: no retry.
    let down = Scripted::new(vec![]);
    let ctx = RequestContext {
        criticality: Criticality::Critical,
        deadline: Some(Instant::now()),
        ..RequestContext::default()
    };
    let err = context::scope(ctx, send(gated().layer(down.clone())))
        .await
        .expect_err("gives up");
    assert_eq!(
        err.downcast_ref::<OverloadGiveUp>().map(|g| g.reason),
        Some("deadline")
    );
    assert_eq!(down.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn grpc_give_up_keeps_the_status_and_adds_the_marker() {
    let grpc = || {
        resp(
            200,
            &[("content-type", "application/grpc"), ("grpc-status", "14")],
        )
    };
    let down = Scripted::new(vec![grpc(), grpc(), grpc()]);
    let mut req = Request::new(Full::new(Bytes::new()));
    req.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    let r = gated()
        .layer(down.clone())
        .oneshot(req)
        .await
        .expect("marked response");
    assert_eq!(wire::grpc_status(r.headers()), Some(wire::GRPC_UNAVAILABLE));
    assert!(wire::is_dont_retry(r.headers()));
    assert!(r.extensions().get::<OverloadGiveUp>().is_some());
    assert_eq!(down.calls.load(Ordering::SeqCst), 3);
}

#[test]
fn config_errors_name_the_field() {
    let e = RetryLayer::naive(0).expect_err("0 attempts");
    assert!(e.to_string().contains("retry.max_attempts"), "{e}");
    let e = gated()
        .backoff(Duration::from_secs(2), Duration::from_secs(1))
        .expect_err("base > max");
    assert!(e.to_string().contains("retry.backoff_base"), "{e}");
    let e = ThrottleLayer::new(Default::default())
        .and_then(|l| {
            l.keying(ThrottleKeying::PerDestination {
                max_destinations: 0,
            })
        })
        .expect_err("0 destinations");
    assert!(e.to_string().contains("throttle.max_destinations"), "{e}");
}

#[test]
fn destinations_beyond_the_bound_share_the_overflow_throttle() {
    let layer = ThrottleLayer::new(Default::default())
        .and_then(|l| {
            l.keying(ThrottleKeying::PerDestination {
                max_destinations: 2,
            })
        })
        .expect("valid");
    let a: http::uri::Authority = "a:1".parse().unwrap();
    let b: http::uri::Authority = "b:1".parse().unwrap();
    let c: http::uri::Authority = "c:1".parse().unwrap();
    let d: http::uri::Authority = "d:1".parse().unwrap();
    let s = &layer.shared;
    assert!(Arc::ptr_eq(&s.lookup(Some(&a)), &s.lookup(Some(&a))));
    assert!(!Arc::ptr_eq(&s.lookup(Some(&a)), &s.lookup(Some(&b))));
    assert!(
        Arc::ptr_eq(&s.lookup(Some(&c)), &s.lookup(Some(&d))),
        "overflow shared"
    );
    assert_eq!(s.map.read().unwrap().len(), 2);
}

#[test]
fn client_error_sorts_the_boxed_causes() {
    use super::ClientError;
    let give_up = crate::wire::OverloadGiveUp {
        attempts: 3,
        reason: "budget",
    };
    let e = ClientError::from(BoxError::from(give_up.clone()));
    assert!(matches!(&e, ClientError::GaveUp(g) if *g == give_up));
    assert!(e.is_overload());
    let res = e.clone().to_response::<String>();
    assert_eq!(res.status(), 503);
    assert!(crate::wire::is_dont_retry(res.headers()));

    let throttled = super::Throttled {
        probability: 0.5,
        destination: None,
    };
    let e = ClientError::from(BoxError::from(throttled));
    assert!(matches!(e, ClientError::Throttled(_)));
    assert_eq!(e.to_response::<String>().status(), 503);

    let e = ClientError::from(BoxError::from("connection refused"));
    assert!(!e.is_overload());
    assert_eq!(e.to_string(), "connection refused");
    assert_eq!(e.to_response::<String>().status(), 502);
}

#[tokio::test]
async fn requests_in_flight_are_not_refusals_until_they_end_unanswered() {
    // A backend that answers only when the test lets it: a cold client's first requests are
    // all in flight at once.
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let g = Arc::clone(&gate);
    let backend = tower::service_fn(move |_req: Request<Full<Bytes>>| {
        let g = Arc::clone(&g);
        async move {
            let _answer = g.acquire().await?;
            Ok::<_, tokio::sync::AcquireError>(Response::new(Full::new(Bytes::new())))
        }
    });
    let layer = ThrottleLayer::new(spillway_core::throttle::ThrottleConfig::default())
        .expect("valid config");
    let mut svc = layer.layer(backend);
    let dest: http::uri::Authority = "backend.test".parse().expect("authority");
    let req = || {
        Request::get("http://backend.test/")
            .body(Full::new(Bytes::new()))
            .expect("request")
    };
    let mut in_flight = Vec::new();
    for _ in 0..50 {
        in_flight.push(svc.ready().await.expect("ready").call(req()));
    }
    // Counted as sent, none refused or accepted: no throttling (counted as refusals: 50/51).
    assert_eq!(layer.counts(Some(&dest)), (50, 0));
    assert_eq!(layer.probability(Some(&dest)), 0.0);
    // One is answered and accepted; the rest are dropped unanswered (their callers gave up):
    // from then on they count as not accepted, (50 − 2 · 1) / 51.
    gate.add_permits(1);
    let first = in_flight.remove(0);
    first.await.expect("answered");
    assert_eq!(layer.counts(Some(&dest)), (50, 1));
    assert_eq!(layer.probability(Some(&dest)), 0.0);
    drop(in_flight);
    let p = layer.probability(Some(&dest));
    assert!((p - 48.0 / 51.0).abs() < 1e-12, "{p}");
}
