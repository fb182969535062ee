//! In-process tests of the server layer against a real `AdmissionController` (the loopback
//! socket tests are in `tests/server_*.rs`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::BodyExt;
use spillway_core::controller::{
    Admission, AdmissionConfig, AdmissionController, AdmissionRequest,
};
use spillway_core::limit::{FixedConfig, LimitConfig};
use spillway_core::quota::{CustomerQuota, QuotaConfig, QuotaEnforcement};
use spillway_core::signal::ManualSignal;
use spillway_core::{Criticality, FixedRandom, ManualClock, PerCriticality};
use tower::{service_fn, Layer, ServiceExt};

use super::{Spillway, SpillwayLayer};
use crate::context;
use crate::wire::{self, OverloadGiveUp};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn config(limit: usize, queue: Option<usize>) -> AdmissionConfig {
    // The core's shed ladder (0.8 / 0.9 / 1.0), not the default policy's SHEDDABLE-only 1.0:
    // these tests drive shedding per level with a manual signal.
    let mut cfg = AdmissionConfig {
        limit: LimitConfig::Fixed(FixedConfig { limit }),
        headroom: PerCriticality([1.0; 4]),
        shed: spillway_core::shed::ShedConfig::default(),
        ..AdmissionConfig::default()
    };
    cfg.queue.max_len = queue;
    cfg
}

fn controller(cfg: AdmissionConfig) -> (AdmissionController, Arc<ManualSignal>) {
    let signal = Arc::new(ManualSignal::new("test"));
    let c = AdmissionController::new(cfg, Arc::new(ManualClock::new()))
        .unwrap()
        .with_signal(signal.clone())
        .with_random(Arc::new(FixedRandom(0.0)));
    (c, signal)
}

/// A handler that echoes the task-local context as `criticality customer deadline?`.
fn echo() -> impl tower::Service<
    Request<Body>,
    Response = Response<Body>,
    Error = Infallible,
    Future = impl Send,
> + Clone {
    service_fn(|_req: Request<Body>| async {
        let ctx = context::current().expect("context set by the layer");
        let text = format!(
            "{} {} {}",
            ctx.criticality,
            ctx.customer,
            ctx.deadline.is_some()
        );
        Ok::<_, Infallible>(Response::new(Body::from(text)))
    })
}

fn req(path: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut b = Request::builder().uri(path);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Body::empty()).unwrap()
}

fn from(mut r: Request<Body>, peer: &str) -> Request<Body> {
    r.extensions_mut()
        .insert(peer.parse::<SocketAddr>().unwrap());
    r
}

async fn text<B: http_body::Body>(res: Response<B>) -> String
where
    B::Error: std::fmt::Debug,
{
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn layered<S: Clone>(layer: &SpillwayLayer, s: S) -> Spillway<S> {
    layer.layer(s)
}

#[tokio::test]
async fn sheddable_is_refused_before_critical() {
    let (c, signal) = controller(config(100, Some(0)));
    signal.set(0.95);
    let svc = layered(&SpillwayLayer::new(c).trust_all(true), echo());
    let shed = svc
        .clone()
        .oneshot(req("/", &[("x-spillway-criticality", "SHEDDABLE")]))
        .await
        .unwrap();
    assert_eq!(shed.status(), 503);
    assert_eq!(shed.headers()[wire::RETRY_AFTER], "1");
    assert_eq!(shed.headers()[super::reject::REASON], "shed");
    assert!(
        !wire::is_dont_retry(shed.headers()),
        "another task may have room"
    );
    let ok = svc
        .oneshot(req("/", &[("x-spillway-criticality", "CRITICAL")]))
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(text(ok).await, "CRITICAL default false");
}

#[tokio::test]
async fn customer_over_quota_gets_429_while_another_is_served() {
    let mut cfg = config(100, Some(0));
    cfg.quota = QuotaConfig {
        enforcement: QuotaEnforcement::Always,
        customers: vec![("greedy".into(), CustomerQuota::uniform(1.0))],
        ..QuotaConfig::default()
    };
    let (c, _) = controller(cfg);
    let svc = layered(&SpillwayLayer::new(c).trust_all(true), echo());
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let r = svc
            .clone()
            .oneshot(req("/", &[("x-spillway-customer", "greedy")]))
            .await
            .unwrap();
        statuses.push(r.status().as_u16());
        if r.status() == 429 {
            assert!(r.headers().contains_key(wire::RETRY_AFTER));
        }
    }
    assert_eq!(statuses[0], 200);
    assert_eq!(statuses[2], 429, "{statuses:?}");
    let other = svc
        .oneshot(req("/", &[("x-spillway-customer", "modest")]))
        .await
        .unwrap();
    assert_eq!(other.status(), 200);
    assert_eq!(text(other).await, "CRITICAL modest false");
}

#[tokio::test]
async fn spent_deadline_is_not_served() {
    let (c, _) = controller(config(100, Some(0)));
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = {
        let calls = calls.clone();
        service_fn(move |_r: Request<Body>| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, Infallible>(Response::new(Body::empty())) }
        })
    };
    let svc = layered(&SpillwayLayer::new(c), counted);
    let r = svc
        .clone()
        .oneshot(req("/", &[("x-spillway-deadline-ms", "0")]))
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()[super::reject::REASON], "deadline_exceeded");
    assert!(
        wire::is_dont_retry(r.headers()),
        "a retry cannot meet a spent deadline"
    );
    let r = svc
        .oneshot(req(
            "/",
            &[("grpc-timeout", "0n"), ("content-type", "application/grpc")],
        ))
        .await
        .unwrap();
    assert_eq!(wire::grpc_status(r.headers()), Some(wire::GRPC_UNAVAILABLE));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

/// A response body fed by a channel: it ends when the sender is dropped.
struct ChannelBody(tokio::sync::mpsc::Receiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|o| o.map(|b| Ok(http_body::Frame::data(b))))
    }
}

type Senders = Arc<std::sync::Mutex<Vec<tokio::sync::mpsc::Sender<Bytes>>>>;

fn streaming() -> (
    impl tower::Service<
            Request<Body>,
            Response = Response<ChannelBody>,
            Error = Infallible,
            Future = impl Send,
        > + Clone,
    Senders,
) {
    let senders = Senders::default();
    let s2 = senders.clone();
    let svc = service_fn(move |_r: Request<Body>| {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        s2.lock().unwrap().push(tx);
        async move { Ok::<_, Infallible>(Response::new(ChannelBody(rx))) }
    });
    (svc, senders)
}

#[tokio::test]
async fn streamed_body_holds_its_permit_until_it_ends() {
    let (c, _) = controller(config(1, Some(0)));
    let (svc, senders) = streaming();
    let svc = layered(&SpillwayLayer::new(c.clone()), svc);
    let first = svc.clone().oneshot(req("/", &[])).await.unwrap();
    assert_eq!(first.status(), 200);
    assert!(first.body().holds_permit());
    assert_eq!(
        c.snapshot().in_flight,
        1,
        "headers sent, body still streaming"
    );
    let refused = svc.clone().oneshot(req("/", &[])).await.unwrap();
    assert_eq!(
        refused.status(),
        503,
        "the streaming request still holds the only slot"
    );

    let tx = senders.lock().unwrap().remove(0);
    tx.send(Bytes::from_static(b"chunk")).await.unwrap();
    drop(tx);
    assert_eq!(text(first).await, "chunk");
    assert_eq!(c.snapshot().in_flight, 0, "released at end of stream");
    let again = svc.oneshot(req("/", &[])).await.unwrap();
    assert_eq!(again.status(), 200);
    drop(again); // client went away: released too
    assert_eq!(c.snapshot().in_flight, 0);
}

#[tokio::test(start_paused = true)]
async fn queued_request_is_served_when_a_slot_frees_or_times_out() {
    let (c, _) = controller(config(1, Some(4)));
    let (svc, senders) = streaming();
    let svc = layered(&SpillwayLayer::new(c.clone()), svc);
    let first = svc.clone().oneshot(req("/", &[])).await.unwrap();
    let waiting = tokio::spawn(svc.clone().oneshot(req("/", &[])));
    tokio::task::yield_now().await;
    assert_eq!(c.snapshot().queued, 1);
    drop(first); // frees the slot: the waiter gets it
    let second = waiting.await.unwrap().unwrap();
    assert_eq!(second.status(), 200);
    // Now the slot is held again; a third waits and its timer fires (paused clock advances).
    let third = svc.oneshot(req("/", &[])).await.unwrap();
    assert_eq!(third.status(), 503);
    assert_eq!(third.headers()[super::reject::REASON], "queue_timeout");
    drop(second);
    drop(senders);
}

#[tokio::test]
async fn untrusted_criticality_is_ignored_and_trusted_malformed_is_400() {
    let (c, _) = controller(config(100, Some(0)));
    let layer = SpillwayLayer::new(c)
        .trust("127.0.0.0/8")
        .unwrap()
        .route("/batch/", Criticality::SheddablePlus);
    let svc = layered(&layer, echo());
    let hdr = [
        ("x-spillway-criticality", "CRITICAL_PLUS"),
        ("x-spillway-customer", "vip"),
    ];
    let r = svc
        .clone()
        .oneshot(from(req("/batch/x", &hdr), "192.0.2.7:9"))
        .await
        .unwrap();
    assert_eq!(
        text(r).await,
        "SHEDDABLE_PLUS default false",
        "route default, no claim"
    );
    let r = svc.clone().oneshot(req("/", &hdr)).await.unwrap();
    assert_eq!(
        text(r).await,
        "CRITICAL default false",
        "no peer info: untrusted"
    );
    let r = svc
        .clone()
        .oneshot(from(req("/", &hdr), "127.0.0.1:9"))
        .await
        .unwrap();
    assert_eq!(text(r).await, "CRITICAL_PLUS vip false");

    let bad = [("x-spillway-criticality", "urgent")];
    let r = svc
        .clone()
        .oneshot(from(req("/", &bad), "192.0.2.7:9"))
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        200,
        "untrusted garbage is ignored, not an error"
    );
    let r = svc
        .oneshot(from(req("/", &bad), "127.0.0.1:9"))
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body = text(r).await;
    assert!(
        body.contains("x-spillway-criticality") && body.contains("SHEDDABLE_PLUS"),
        "{body}"
    );
    assert!(SpillwayLayer::new(controller(config(1, None)).0)
        .trust("10.0.0.0/33")
        .is_err());
}

#[tokio::test]
async fn grpc_rejection_is_trailers_only_with_pushback() {
    let (c, signal) = controller(config(100, Some(0)));
    signal.set(0.95);
    let svc = layered(
        &SpillwayLayer::new(c).default_criticality(Criticality::Sheddable),
        echo(),
    );
    let r = svc
        .oneshot(req("/pkg.Svc/Do", &[("content-type", "application/grpc")]))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(wire::grpc_status(r.headers()), Some(wire::GRPC_UNAVAILABLE));
    // The 1 s delay, spread around it (reject.rs): a burst's callers do not return at once.
    let pushback = wire::parse_pushback(&r.headers()[wire::GRPC_RETRY_PUSHBACK_MS]);
    assert!(
        matches!(pushback, wire::Pushback::RetryAfter(d)
            if (std::time::Duration::from_millis(500)..=std::time::Duration::from_millis(1500)).contains(&d)),
        "{pushback:?}"
    );
    assert!(http_body::Body::is_end_stream(r.body()));
}

#[tokio::test]
async fn health_checks_bypass_shedding() {
    let (c, signal) = controller(config(100, Some(0)));
    signal.set(5.0);
    let svc = layered(
        &SpillwayLayer::new(c)
            .default_criticality(Criticality::Sheddable)
            .health_path("/healthz"),
        echo(),
    );
    assert_eq!(
        svc.clone()
            .oneshot(req("/healthz", &[]))
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(svc.oneshot(req("/other", &[])).await.unwrap().status(), 503);
}

#[tokio::test]
async fn overload_give_up_becomes_dont_retry_at_this_edge() {
    let (c, _) = controller(config(100, Some(0)));
    let layer = SpillwayLayer::new(c.clone());
    let give_up = OverloadGiveUp {
        attempts: 3,
        reason: "budget",
    };
    let as_error = service_fn(move |_r: Request<Body>| {
        let e: BoxError = Box::new(give_up.clone());
        async move { Err::<Response<Body>, BoxError>(e) }
    });
    let r = layered(&layer, as_error)
        .oneshot(req("/", &[]))
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert!(wire::is_dont_retry(r.headers()));

    let as_response = service_fn(|_r: Request<Body>| async {
        Ok::<Response<Body>, Infallible>(
            OverloadGiveUp {
                attempts: 2,
                reason: "dont_retry",
            }
            .to_response(),
        )
    });
    let svc = layered(&layer, as_response);
    let r = svc
        .oneshot(req("/p.S/M", &[("content-type", "application/grpc")]))
        .await
        .unwrap();
    assert_eq!(wire::grpc_status(r.headers()), Some(wire::GRPC_UNAVAILABLE));
    assert_eq!(r.headers()[wire::GRPC_RETRY_PUSHBACK_MS], "-1");
    assert_eq!(c.snapshot().in_flight, 0);

    let other_error =
        service_fn(|_r: Request<Body>| async { Err::<Response<Body>, BoxError>("boom".into()) });
    assert!(layered(&layer, other_error)
        .oneshot(req("/", &[]))
        .await
        .is_err());
    assert_eq!(c.snapshot().in_flight, 0);
}

#[tokio::test]
async fn cost_and_orca_headers() {
    let (c, signal) = controller(config(100, Some(0)));
    signal.set(0.5);
    let layer = SpillwayLayer::new(c)
        .measure_cpu(true)
        .cost_headers(true)
        .orca(true);
    let r = layered(&layer, echo())
        .oneshot(req("/", &[]))
        .await
        .unwrap();
    let cost: f64 = r.headers()[wire::COST].to_str().unwrap().parse().unwrap();
    assert!(
        (0.0..1.0).contains(&cost),
        "CPU-seconds of a tiny handler: {cost}"
    );
    for h in [wire::QUEUE_MS, wire::SERVICE_MS] {
        let ms: f64 = r.headers()[h].to_str().unwrap().parse().unwrap();
        assert!(ms >= 0.0);
    }
    let orca = wire::parse_orca(&r.headers()[wire::ENDPOINT_LOAD_METRICS]).unwrap();
    assert_eq!(orca.application_utilization, Some(0.5));
    assert!(layer.estimated_cost(0.0).is_err());
}

/// A request body that never ends and counts how often it was read.
struct Endless(Arc<AtomicUsize>);

impl http_body::Body for Endless {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from_static(
            &[0; 4096],
        )))))
    }
}

/// A refused HTTP/1.1 request's body is read behind the refusal, up to the limit (then the
/// connection may close); a refused HTTP/2 request's is not read at all (dropping it resets
/// only its stream, after the answer).
#[tokio::test]
async fn a_refused_body_is_read_behind_the_answer_over_http1_only() {
    let (c, signal) = controller(config(100, Some(0)));
    signal.set(0.95);
    let layer = SpillwayLayer::new(c).trust_all(true);
    let svc = layered(
        &layer,
        service_fn(|_r: Request<Endless>| async {
            Ok::<_, Infallible>(Response::new(Body::empty()))
        }),
    );
    for (version, drained) in [
        (http::Version::HTTP_11, true),
        (http::Version::HTTP_2, false),
    ] {
        let polls = Arc::new(AtomicUsize::new(0));
        let r = Request::builder()
            .version(version)
            .header("x-spillway-criticality", "SHEDDABLE")
            .body(Endless(Arc::clone(&polls)))
            .unwrap();
        let res = svc.clone().oneshot(r).await.unwrap();
        assert_eq!(res.status(), 503, "{version:?}");
        // The drain runs on its own task: give it the runtime.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        let n = polls.load(Ordering::SeqCst);
        if drained {
            // 1 MiB in 4 KiB frames, then one frame past the limit.
            assert_eq!(n, (super::DRAIN_LIMIT >> 12) + 1, "{version:?}");
        } else {
            assert_eq!(n, 0, "{version:?}");
        }
    }
}

#[tokio::test]
async fn route_prefixes_match_on_segment_boundaries() {
    let (c, _) = controller(config(100, Some(0)));
    let layer = SpillwayLayer::new(c)
        .route("/batch", Criticality::Sheddable)
        .route("/api/", Criticality::SheddablePlus);
    let svc = layered(&layer, echo());
    for (path, want) in [
        ("/batch", "SHEDDABLE"),
        ("/batch/", "SHEDDABLE"),
        ("/batch/1", "SHEDDABLE"),
        ("/batchjobs", "CRITICAL"),
        ("/batch.json", "CRITICAL"),
        ("/api/", "SHEDDABLE_PLUS"),
        ("/api/x", "SHEDDABLE_PLUS"),
        ("/api", "CRITICAL"),
        ("/apix", "CRITICAL"),
    ] {
        let r = svc.clone().oneshot(req(path, &[])).await.unwrap();
        let got = text(r).await;
        assert!(got.starts_with(&format!("{want} ")), "{path}: {got}");
    }
}

#[tokio::test]
async fn default_layer_builds_and_serves() {
    let svc = layered(&SpillwayLayer::default(), echo());
    let res = svc.oneshot(req("/", &[])).await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(text(res).await, "CRITICAL default false");
}

#[tokio::test]
async fn trust_without_peer_address_warns_once_and_trusts_nobody() {
    let (c, _) = controller(config(100, None));
    let layer = SpillwayLayer::new(c).trust("127.0.0.1/32").unwrap();
    let svc = layered(&layer, echo());
    let res = svc
        .clone()
        .oneshot(req("/", &[("x-spillway-criticality", "SHEDDABLE")]))
        .await
        .unwrap();
    // No peer address: the header is not honoured, and the misconfiguration is reported.
    assert_eq!(text(res).await, "CRITICAL default false");
    assert!(layer.classifier().warned_no_peer());
    // With the address the same layer trusts the peer (the warning was about the server).
    let res = svc
        .oneshot(from(
            req("/", &[("x-spillway-criticality", "SHEDDABLE")]),
            "127.0.0.1:5000",
        ))
        .await
        .unwrap();
    assert_eq!(text(res).await, "SHEDDABLE default false");
}

#[tokio::test]
async fn no_trust_configured_gives_no_warning() {
    let (c, _) = controller(config(100, None));
    let layer = SpillwayLayer::new(c);
    let res = layered(&layer, echo())
        .oneshot(req("/", &[]))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert!(!layer.classifier().warned_no_peer());
}

/// A request queued before any service time is known waits, at most, until its deadline. The
/// first answer shows the service takes 50 ms: its give-up time moves to the deadline less
/// that, and the layer's timer follows (the core wakes the future; the future re-arms).
#[tokio::test(start_paused = true)]
async fn a_queued_request_leaves_at_a_give_up_time_brought_forward() {
    const MS: std::time::Duration = std::time::Duration::from_millis(1);
    let mut cfg = config(1, Some(8));
    cfg.queue.max_wait = std::time::Duration::from_secs(1);
    cfg.shed.thresholds = PerCriticality([None; 4]);
    let clock = ManualClock::new();
    let c = AdmissionController::new(cfg, Arc::new(clock.clone())).unwrap();
    let Admission::Admitted(running) = c.admit(&AdmissionRequest::new("a", Criticality::Critical))
    else {
        panic!("the first request takes the slot");
    };
    // Served first when the slot frees, so the layer's request stays queued.
    let Admission::Queued(first) = c.admit(&AdmissionRequest::new("a", Criticality::CriticalPlus))
    else {
        panic!("queued behind the first");
    };
    let svc = layered(&SpillwayLayer::new(c.clone()), echo());
    let waiting = tokio::spawn(svc.oneshot(req("/", &[("x-spillway-deadline-ms", "200")])));
    tokio::task::yield_now().await;
    assert_eq!(c.snapshot().queued, 2);

    clock.advance(50 * MS);
    drop(running);
    let _served = first.await.expect("granted the freed slot");
    // Past the deadline less 50 ms, before the deadline itself.
    tokio::time::advance(160 * MS).await;
    let r = tokio::time::timeout(10 * MS, waiting)
        .await
        .expect("the wait ended at the brought-forward time, not at the deadline")
        .unwrap()
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()[super::reject::REASON], "deadline_exceeded");
}
