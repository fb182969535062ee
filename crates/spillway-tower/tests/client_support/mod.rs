//! Shared helpers of the client integration tests: real loopback servers and client stacks.
//!
//! `edge` is a minimal stand-in for the server layer's context handling, written against the
//! public `wire`/`context` API: it parses the incoming context headers, runs the handler inside
//! `context::scope`, and answers an `OverloadGiveUp` from the handler with 503 + the don't-retry
//! marker. It keeps these tests about the client layers (the server layer has its own tests).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use spillway_core::Criticality;
use spillway_tower::client::{find_cause, BoxError};
use spillway_tower::context::{self, RequestContext};
use spillway_tower::wire::{self, OverloadGiveUp};
use tower::util::BoxCloneSyncService;

/// The client stack type the tests store in handler state.
pub type Stack = BoxCloneSyncService<
    http::Request<Full<Bytes>>,
    http::Response<hyper::body::Incoming>,
    BoxError,
>;

/// A plain hyper-util client over HTTP/1.
pub fn hyper_client<B>() -> Client<HttpConnector, B>
where
    B: http_body::Body + Send + 'static + Unpin,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

/// Serves `app` on 127.0.0.1:0 in the background; returns its address.
pub async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

/// The edge: incoming context headers → task-local context around the handler.
pub async fn edge(req: Request, next: Next) -> Response {
    let h = req.headers();
    let ctx = RequestContext {
        criticality: h
            .get(wire::CRITICALITY)
            .and_then(|v| wire::parse_criticality(v).ok())
            .unwrap_or(Criticality::Critical),
        deadline: wire::read_timeout(h)
            .ok()
            .flatten()
            .map(|d| Instant::now() + d),
        customer: h
            .get(wire::CUSTOMER)
            .and_then(|v| wire::parse_customer(v).ok())
            .map(Arc::from)
            .unwrap_or_else(|| Arc::from("")),
        attempt: wire::read_attempt(h).unwrap_or(1),
    };
    context::scope(ctx, next.run(req)).await
}

/// A handler's error: the downstream call failed.
pub struct CallError(pub BoxError);

impl IntoResponse for CallError {
    fn into_response(self) -> Response {
        if let Some(g) = find_cause::<OverloadGiveUp>(self.0.as_ref()) {
            let r: http::Response<axum::body::Body> = g.to_response();
            return r;
        }
        (StatusCode::BAD_GATEWAY, self.0.to_string()).into_response()
    }
}

/// Sends a GET through `stack` and returns status, headers and body text.
pub async fn send_get(
    stack: &mut Stack,
    uri: &str,
    headers: &[(&http::HeaderName, &str)],
) -> Result<(StatusCode, http::HeaderMap, String), BoxError> {
    use tower::{Service, ServiceExt};
    let mut req = http::Request::get(uri).body(Full::new(Bytes::new()))?;
    for (k, v) in headers {
        req.headers_mut()
            .insert((*k).clone(), http::HeaderValue::from_str(v)?);
    }
    let resp = stack.ready().await?.call(req).await?;
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await?.to_bytes();
    Ok((
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    ))
}

/// Forwards a downstream answer: status and body, plus the don't-retry marker if it had one.
pub async fn forward(resp: http::Response<hyper::body::Incoming>) -> Response {
    let (parts, body) = resp.into_parts();
    let bytes = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let mut out = (parts.status, bytes).into_response();
    if let Some(v) = parts.headers.get(wire::DONT_RETRY) {
        out.headers_mut().insert(wire::DONT_RETRY, v.clone());
    }
    out
}

/// Zero backoff so the tests run at loopback speed.
pub fn no_backoff() -> (Duration, Duration) {
    (Duration::ZERO, Duration::ZERO)
}
