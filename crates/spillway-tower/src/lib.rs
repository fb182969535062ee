//! Spillway's protections for tower services (axum, hyper, tonic), added as layers.
//!
//! Why layers: Google's services get criticality, adaptive throttling and retry budgets from
//! their RPC framework without writing code; in the Rust ecosystem the framework-neutral place
//! for that is a tower `Layer`. Every decision is delegated to `spillway-core`; this crate only
//! carries requests to it and maps its answers to HTTP and gRPC at the edge.
//!
//! ```
//! use std::convert::Infallible;
//! use http::{Request, Response};
//! use http_body_util::BodyExt;
//! use spillway_tower::{context, server::SpillwayLayer};
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let svc = ServiceBuilder::new()
//!     // Every caller trusted: right behind a proxy that sets or strips the headers itself.
//!     .layer(SpillwayLayer::default().trust_all(true))
//!     .service(service_fn(|_req: Request<String>| async {
//!         let ctx = context::current().unwrap_or_default();
//!         Ok::<_, Infallible>(Response::new(format!("served at {}", ctx.criticality)))
//!     }));
//!
//! let get = |criticality| {
//!     Request::get("/search")
//!         .header("x-spillway-criticality", criticality)
//!         .body(String::new())
//! };
//! let res = svc.clone().oneshot(get("SHEDDABLE")?).await?;
//! assert_eq!(res.status(), 200);
//! assert_eq!(res.into_body().collect().await?.to_bytes(), "served at SHEDDABLE");
//!
//! let res = svc.oneshot(get("URGENT")?).await?; // not a criticality: 400 naming the header
//! assert_eq!(res.status(), 400);
//! # Ok(())
//! # }
//! ```
//!
//! The README's axum quick start and client stack are `examples/axum_quickstart.rs` and
//! `examples/axum_service.rs`, run by `tests/examples.rs`.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod client;
pub mod context;
#[cfg(feature = "fleet")]
pub mod lease;
pub mod metrics;
pub mod server;
pub mod wire;
