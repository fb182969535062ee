//! The server layer in an axum service over real loopback sockets (HTTP/1.1 and HTTP/2
//! prior-knowledge for the gRPC wire format), with a hyper client.

mod upload_support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use spillway_core::controller::{AdmissionConfig, AdmissionController};
use spillway_core::limit::{FixedConfig, LimitConfig};
use spillway_core::quota::{CustomerQuota, QuotaConfig, QuotaEnforcement};
use spillway_core::signal::ManualSignal;
use spillway_core::{Criticality, FixedRandom, PerCriticality, SystemClock};
use spillway_tower::context;
use spillway_tower::server::SpillwayLayer;
use spillway_tower::wire;

fn controller(limit: usize, quota: QuotaConfig) -> (AdmissionController, Arc<ManualSignal>) {
    let mut cfg = AdmissionConfig {
        limit: LimitConfig::Fixed(FixedConfig { limit }),
        headroom: PerCriticality([1.0; 4]),
        quota,
        // The core's shed ladder (0.8 / 0.9 / 1.0), not the default policy's SHEDDABLE-only
        // 1.0: these tests drive shedding per level with a manual signal.
        shed: spillway_core::shed::ShedConfig::default(),
        ..AdmissionConfig::default()
    };
    cfg.queue.max_len = Some(0);
    let signal = Arc::new(ManualSignal::new("test"));
    let c = AdmissionController::new(cfg, Arc::new(SystemClock))
        .expect("valid config")
        .with_signal(signal.clone())
        .with_random(Arc::new(FixedRandom(0.0)));
    (c, signal)
}

fn layer(c: AdmissionController) -> SpillwayLayer {
    SpillwayLayer::new(c).peer_addr(|e| e.get::<ConnectInfo<SocketAddr>>().map(|c| c.0))
}

async fn echo() -> String {
    let ctx = context::current().expect("context set by the layer");
    format!("{} {}", ctx.criticality, ctx.customer)
}

async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    addr
}

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

async fn get_with(
    c: &HttpClient,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> Response<hyper::body::Incoming> {
    let mut b = Request::get(format!("http://{addr}{path}"));
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    c.request(b.body(Full::default()).unwrap()).await.unwrap()
}

async fn text(r: Response<hyper::body::Incoming>) -> String {
    let b = r.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&b).into_owned()
}

#[tokio::test]
async fn under_overload_sheddable_is_refused_before_critical() {
    let (c, signal) = controller(100, QuotaConfig::default());
    let app = Router::new()
        .route("/", get(echo))
        .layer(layer(c).trust("127.0.0.0/8").unwrap());
    let addr = serve(app).await;
    let http = client();
    signal.set(0.95); // past SHEDDABLE's (0.8) and SHEDDABLE_PLUS's (0.9) thresholds
    let mut served = std::collections::BTreeMap::new();
    for c in Criticality::ALL {
        let r = get_with(&http, addr, "/", &[("x-spillway-criticality", c.as_str())]).await;
        served.insert(c, r.status());
    }
    println!("utilisation 0.95: {served:?}");
    assert_eq!(
        served[&Criticality::Sheddable],
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(
        served[&Criticality::SheddablePlus],
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(served[&Criticality::Critical], StatusCode::OK);
    assert_eq!(served[&Criticality::CriticalPlus], StatusCode::OK);
    signal.set(0.5);
    let r = get_with(&http, addr, "/", &[("x-spillway-criticality", "SHEDDABLE")]).await;
    assert_eq!(r.status(), 200, "recovers when load falls");
}

#[tokio::test]
async fn customer_over_quota_gets_429_while_another_within_quota_is_served() {
    let quota = QuotaConfig {
        enforcement: QuotaEnforcement::Always,
        customers: vec![("greedy".into(), CustomerQuota::uniform(1.0))],
        ..QuotaConfig::default()
    };
    let (c, _) = controller(100, quota);
    let app = Router::new()
        .route("/", get(echo))
        .layer(layer(c).trust("127.0.0.0/8").unwrap());
    let addr = serve(app).await;
    let http = client();
    let mut greedy = Vec::new();
    for _ in 0..4 {
        let r = get_with(&http, addr, "/", &[("x-spillway-customer", "greedy")]).await;
        if r.status() == 429 {
            let ra: u64 = r.headers()["retry-after"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!(ra >= 1);
        }
        greedy.push(r.status().as_u16());
    }
    let modest = get_with(&http, addr, "/", &[("x-spillway-customer", "modest")]).await;
    println!("greedy: {greedy:?}, modest: {}", modest.status());
    assert_eq!(greedy[0], 200);
    assert!(greedy[1..].contains(&429), "{greedy:?}");
    assert_eq!(modest.status(), 200);
    assert_eq!(text(modest).await, "CRITICAL modest");
}

#[tokio::test]
async fn a_request_whose_deadline_is_spent_is_not_served() {
    let (c, _) = controller(100, QuotaConfig::default());
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let app = Router::new()
        .route(
            "/",
            get(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                async { "served" }
            }),
        )
        .layer(layer(c));
    let addr = serve(app).await;
    let http = client();
    let r = get_with(&http, addr, "/", &[("x-spillway-deadline-ms", "0")]).await;
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["x-spillway-dont-retry"], "1");
    assert_eq!(calls.load(Ordering::SeqCst), 0, "the handler never ran");
    let r = get_with(&http, addr, "/", &[("x-spillway-deadline-ms", "5000")]).await;
    assert_eq!(text(r).await, "served");
    let r = get_with(&http, addr, "/", &[("x-spillway-deadline-ms", "soon")]).await;
    assert_eq!(r.status(), 400);
    assert!(text(r).await.contains("x-spillway-deadline-ms"));
}

/// A response body fed by a channel; it ends when the sender is dropped.
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

#[tokio::test]
async fn a_streamed_body_holds_its_permit_until_it_ends() {
    let (c, _) = controller(1, QuotaConfig::default());
    let senders: Arc<Mutex<Vec<tokio::sync::mpsc::Sender<Bytes>>>> = Arc::default();
    let s2 = senders.clone();
    let app = Router::new()
        .route(
            "/stream",
            get(move || {
                let (tx, rx) = tokio::sync::mpsc::channel(4);
                s2.lock().unwrap().push(tx);
                async move { Body::new(ChannelBody(rx)) }
            }),
        )
        .layer(layer(c.clone()));
    let addr = serve(app).await;
    let http = client();

    let first = get_with(&http, addr, "/stream", &[]).await;
    assert_eq!(
        first.status(),
        200,
        "headers arrived; the body is still open"
    );
    assert_eq!(c.snapshot().in_flight, 1);
    let second = get_with(&http, addr, "/stream", &[]).await;
    assert_eq!(
        second.status(),
        503,
        "the open stream still holds the only slot"
    );

    let tx = senders.lock().unwrap().remove(0);
    tx.send(Bytes::from_static(b"part1 ")).await.unwrap();
    tx.send(Bytes::from_static(b"part2")).await.unwrap();
    drop(tx);
    assert_eq!(text(first).await, "part1 part2");
    assert_eq!(c.snapshot().in_flight, 0, "released when the body ended");
    let third = get_with(&http, addr, "/stream", &[]).await;
    assert_eq!(third.status(), 200);
}

#[tokio::test]
async fn criticality_header_is_honoured_only_from_trusted_peers() {
    let (c, _) = controller(100, QuotaConfig::default());
    let untrusted = Router::new().route("/batch/job", get(echo)).layer(
        layer(c.clone())
            .trust("10.0.0.0/8")
            .unwrap()
            .route("/batch/", Criticality::Sheddable),
    );
    let trusted = Router::new()
        .route("/", get(echo))
        .layer(layer(c).trust("127.0.0.1/32").unwrap());
    let (ua, ta) = (serve(untrusted).await, serve(trusted).await);
    let http = client();
    let claim = [
        ("x-spillway-criticality", "CRITICAL_PLUS"),
        ("x-spillway-customer", "someone-else"),
    ];
    let r = get_with(&http, ua, "/batch/job", &claim).await;
    assert_eq!(
        text(r).await,
        "SHEDDABLE default",
        "loopback is not in 10/8: route default"
    );
    let r = get_with(
        &http,
        ua,
        "/batch/job",
        &[("x-spillway-criticality", "nonsense")],
    )
    .await;
    assert_eq!(r.status(), 200, "an untrusted malformed header is ignored");
    let r = get_with(&http, ta, "/", &claim).await;
    assert_eq!(text(r).await, "CRITICAL_PLUS someone-else");
    let r = get_with(&http, ta, "/", &[("x-spillway-criticality", "nonsense")]).await;
    assert_eq!(r.status(), 400);
    let body = text(r).await;
    assert!(body.contains("x-spillway-criticality"), "{body}");
    assert!(
        body.contains("CRITICAL_PLUS, CRITICAL, SHEDDABLE_PLUS, SHEDDABLE"),
        "{body}"
    );
}

#[tokio::test]
async fn grpc_requests_get_trailers_only_refusals_with_pushback() {
    let quota = QuotaConfig {
        enforcement: QuotaEnforcement::Always,
        customers: vec![("greedy".into(), CustomerQuota::uniform(1.0))],
        ..QuotaConfig::default()
    };
    let (c, signal) = controller(100, quota);
    let app = Router::new()
        .route("/pkg.Svc/Call", post(|| async { "unused" }))
        .layer(layer(c).trust("127.0.0.0/8").unwrap());
    let addr = serve(app).await;
    let h2: HttpClient = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    let call = |headers: Vec<(&'static str, &'static str)>| {
        let h2 = h2.clone();
        async move {
            let mut b = Request::post(format!("http://{addr}/pkg.Svc/Call"))
                .header("content-type", "application/grpc")
                .header("te", "trailers");
            for (k, v) in headers {
                b = b.header(k, v);
            }
            h2.request(b.body(Full::default()).unwrap()).await.unwrap()
        }
    };
    // Over quota: RESOURCE_EXHAUSTED, with the quota's pushback.
    let mut last = None;
    for _ in 0..4 {
        let r = call(vec![("x-spillway-customer", "greedy")]).await;
        if wire::grpc_status(r.headers()).is_some() {
            last = Some(r);
            break;
        }
    }
    let r = last.expect("greedy customer refused within 4 calls");
    assert_eq!(r.version(), http::Version::HTTP_2);
    assert_eq!(r.status(), 200, "gRPC refusals are HTTP 200 trailers-only");
    assert_eq!(
        wire::grpc_status(r.headers()),
        Some(wire::GRPC_RESOURCE_EXHAUSTED)
    );
    let pushback = wire::parse_pushback(&r.headers()[wire::GRPC_RETRY_PUSHBACK_MS]);
    assert!(matches!(pushback, wire::Pushback::RetryAfter(d) if d > std::time::Duration::ZERO));
    let body = r.into_body().collect().await.unwrap();
    assert!(
        body.to_bytes().is_empty(),
        "no messages in a trailers-only response"
    );

    // Overload: UNAVAILABLE with pushback from the controller's Retry-After hint.
    signal.set(0.95);
    let r = call(vec![("x-spillway-criticality", "SHEDDABLE")]).await;
    assert_eq!(wire::grpc_status(r.headers()), Some(wire::GRPC_UNAVAILABLE));
    // About the 1 s hint: spread over ½–1½ of it, so a burst's callers do not return at once.
    let pushback = wire::parse_pushback(&r.headers()[wire::GRPC_RETRY_PUSHBACK_MS]);
    assert!(
        matches!(pushback, wire::Pushback::RetryAfter(d)
            if (std::time::Duration::from_millis(500)..=std::time::Duration::from_millis(1500)).contains(&d)),
        "{pushback:?}"
    );
    assert_eq!(r.headers()[wire::GRPC_MESSAGE], "shed");

    // A spent deadline: UNAVAILABLE, and "don't retry" (negative pushback, gRFC A6).
    signal.set(0.0);
    let r = call(vec![("grpc-timeout", "0m")]).await;
    assert_eq!(wire::grpc_status(r.headers()), Some(wire::GRPC_UNAVAILABLE));
    assert_eq!(
        wire::parse_pushback(&r.headers()[wire::GRPC_RETRY_PUSHBACK_MS]),
        wire::Pushback::DontRetry
    );
}

/// A refused upload much larger than what arrives with its head: the 503 comes back before the
/// client has finished sending, the layer reads the rest behind it, and the connection then
/// serves the next request. (Dropped unread, hyper closes the connection with the rest of the
/// body in its receive buffer, and the kernel's reset can destroy the 503 before the client
/// reads it: the client sees "connection reset" instead of `Retry-After`.)
#[tokio::test]
async fn a_large_refused_upload_is_read_behind_the_answer() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let (c, signal) = controller(100, QuotaConfig::default());
    let app = Router::new()
        .route("/", get(echo))
        .route("/up", post(echo))
        .layer(layer(c).trust("127.0.0.0/8").unwrap());
    let addr = serve(app).await;
    signal.set(0.95); // past SHEDDABLE's threshold
    let (head, mut s) = upload_support::answered_during_upload(addr, "SHEDDABLE").await;
    let head = head.to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 503"), "{head}");
    assert!(head.contains("\r\nretry-after: "), "{head}");
    // A request served on the same connection.
    signal.set(0.0);
    s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nx-spillway-criticality: CRITICAL\r\n\r\n")
        .await
        .unwrap();
    let mut next = Vec::new();
    let mut buf = [0u8; 4096];
    while !next.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf).await.expect("the next answer");
        assert!(n > 0, "the connection closed after the refusal");
        next.extend_from_slice(&buf[..n]);
    }
    let next = String::from_utf8_lossy(&next);
    assert!(next.starts_with("HTTP/1.1 200"), "{next}");
}
