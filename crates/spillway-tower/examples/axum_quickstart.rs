//! The README's axum quick start, served on loopback and checked: what a trusted caller's
//! criticality header does, what a route's default is, that a malformed criticality header is
//! refused with 400 naming the header, and that health checks pass. Exits non-zero on any
//! mismatch; `tests/examples.rs` runs it under `cargo test`.
//!
//! `cargo run -p spillway-tower --example axum_quickstart`

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

// readme:begin
use std::error::Error;
use std::future::Future;
use std::net::SocketAddr;

use axum::extract::ConnectInfo;
use axum::{routing::get, Router};
use spillway_core::{ConfigError, Criticality};
use spillway_tower::{context, server::SpillwayLayer};

/// A handler; Spillway puts the request's criticality, deadline and customer in its context.
async fn search() -> String {
    let ctx = context::current().unwrap_or_default();
    format!("searched at {}", ctx.criticality)
}

fn app() -> Result<Router, ConfigError> {
    let spillway = SpillwayLayer::default() // the zero-configuration policy of `spillway proxy`
        .trust("127.0.0.1/32")? // honour criticality/customer headers from these peers
        .peer_addr(|e| e.get::<ConnectInfo<SocketAddr>>().map(|c| c.0)) // axum's peer address
        .route("/batch", Criticality::Sheddable) // default criticality by path prefix
        .health_path("/healthz"); // never shed
    Ok(Router::new()
        .route("/search", get(search))
        .route("/batch/report", get(search))
        .route("/healthz", get(|| async { "ok" }))
        .layer(spillway))
}

async fn serve(
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Box<dyn Error + Send + Sync>> {
    // `with_connect_info` is what gives the layer the peer address: without it nobody is
    // trusted (every request gets the route's default) and the layer logs a warning once.
    let app = app()?.into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}
// readme:end

/// GET `path` with the given headers; returns status and body.
async fn get_text(
    base: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<(u16, String), Box<dyn Error + Send + Sync>> {
    let http: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut req = Request::get(format!("{base}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let res = http.request(req.body(Empty::new())?).await?;
    let status = res.status().as_u16();
    let body = res.into_body().collect().await?.to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// A request (path, headers) and what must come back (status, a part of the body).
type Check = (
    &'static str,
    &'static [(&'static str, &'static str)],
    u16,
    &'static str,
);

/// Serves the quick start on a free loopback port, checks it, stops it.
#[tokio::main]
pub async fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, async {
        let _ = stopped.await;
    }));

    let checks: [Check; 5] = [
        ("/search", &[], 200, "searched at CRITICAL"),
        (
            "/search",
            &[("x-spillway-criticality", "SHEDDABLE")],
            200,
            "searched at SHEDDABLE",
        ),
        ("/batch/report", &[], 200, "searched at SHEDDABLE"),
        (
            "/search",
            &[("x-spillway-criticality", "URGENT")],
            400,
            "x-spillway-criticality",
        ),
        ("/healthz", &[], 200, "ok"),
    ];
    for (path, headers, want_status, want_body) in checks {
        let (status, body) = get_text(&base, path, headers).await?;
        println!("GET {path} {headers:?} -> {status} {body:?}");
        if status != want_status || !body.contains(want_body) {
            return Err(format!(
                "GET {path} {headers:?}: expected {want_status} with {want_body:?}, got {status} {body:?}"
            )
            .into());
        }
    }

    let _ = stop.send(());
    server.await??;
    println!("all quick-start checks passed");
    Ok(())
}
