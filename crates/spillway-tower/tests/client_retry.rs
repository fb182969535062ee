//! The retry layer over real loopback HTTP: replayable bodies are retried with the same bytes
//! and a fresh attempt header; bodies over the bound are streamed through once and not retried;
//! connection errors (retried like overload, within the gates) surface as themselves (not as an overload).

mod client_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::HeaderMap;
use axum::routing::post;
use axum::Router;
use http::StatusCode;
use http_body_util::Full;
use spillway_core::retry::RetryConfig;
use spillway_tower::client::{find_cause, RetryLayer};
use spillway_tower::wire::{self, OverloadGiveUp};
use tower::util::BoxCloneSyncService;
use tower::{Service, ServiceBuilder, ServiceExt};

use client_support::*;

/// Backend refusing the first `refuse` requests with 503, recording (attempt header, body length).
async fn backend(refuse: usize) -> (std::net::SocketAddr, Arc<Mutex<Vec<(String, usize)>>>) {
    let seen: Arc<Mutex<Vec<(String, usize)>>> = Arc::default();
    let s = seen.clone();
    let app = Router::new().route(
        "/",
        post(move |headers: HeaderMap, body: Bytes| {
            let s = s.clone();
            async move {
                let attempt = headers
                    .get(wire::ATTEMPT)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("-")
                    .to_owned();
                let mut seen = s.lock().unwrap_or_else(|p| p.into_inner());
                seen.push((attempt, body.len()));
                if seen.len() <= refuse {
                    (StatusCode::SERVICE_UNAVAILABLE, "overloaded")
                } else {
                    (StatusCode::OK, "served")
                }
            }
        }),
    );
    (serve(app).await, seen)
}

fn stack(layer: RetryLayer) -> Stack {
    BoxCloneSyncService::new(ServiceBuilder::new().layer(layer).service(hyper_client()))
}

fn layer() -> RetryLayer {
    RetryLayer::new(RetryConfig::default())
        .and_then(|l| l.backoff(Duration::ZERO, Duration::ZERO))
        .expect("valid")
}

async fn post_body(
    s: &mut Stack,
    uri: &str,
    len: usize,
) -> Result<StatusCode, spillway_tower::client::BoxError> {
    let req = http::Request::post(uri).body(Full::new(Bytes::from(vec![b'x'; len])))?;
    Ok(s.ready().await?.call(req).await?.status())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayable_bodies_are_retried_with_the_same_bytes_and_next_attempt_number() {
    let (addr, seen) = backend(2).await;
    let mut s = stack(layer());
    let status = post_body(&mut s, &format!("http://{addr}/"), 1000)
        .await
        .expect("served on the third attempt");
    assert_eq!(status, StatusCode::OK);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![("1".into(), 1000), ("2".into(), 1000), ("3".into(), 1000)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_the_bound_pass_through_once_and_are_not_retried() {
    let (addr, seen) = backend(10).await;
    let mut s = stack(layer().max_body_bytes(64 * 1024));
    let err = post_body(&mut s, &format!("http://{addr}/"), 100 * 1024)
        .await
        .expect_err("refused and not retried");
    let g = find_cause::<OverloadGiveUp>(err.as_ref()).expect("marked give-up");
    assert_eq!(g.reason, "not_replayable");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![("1".into(), 100 * 1024)],
        "sent once, body intact"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_errors_surface_as_themselves_not_as_overload() {
    // A port with nothing listening: bind, note the port, close.
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
    let mut s = stack(layer());
    let err = post_body(&mut s, &format!("http://{addr}/"), 10)
        .await
        .expect_err("nothing listens");
    assert!(
        find_cause::<OverloadGiveUp>(err.as_ref()).is_none(),
        "a dead backend is not an overload: {err}"
    );
    assert!(
        find_cause::<std::io::Error>(err.as_ref()).is_some(),
        "{err:?}"
    );
}
