//! Spillway's protections for tower services (axum, hyper, tonic), added as layers.
//!
//! Why layers: Google's services get criticality, adaptive throttling and retry budgets from
//! their RPC framework without writing code; in the Rust ecosystem the framework-neutral place
//! for that is a tower `Layer`. Every decision is delegated to `spillway-core`; this crate only
//! carries requests to it and maps its answers to HTTP and gRPC at the edge.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod client;
pub mod context;
pub mod metrics;
pub mod server;
pub mod wire;
