//! The server side: [`SpillwayLayer`] puts admission control in front of a tower HTTP service.
//!
//! Why a layer and not a handler helper: Google's services get criticality-aware shedding,
//! per-customer quotas and deadline checks from their RPC framework, for every method, without
//! writing code (SRE book ch. 21). A tower layer is the framework-neutral equivalent for axum,
//! hyper and tonic: one `.layer(...)` and every route is protected. All decisions are made by
//! `spillway_core::controller::AdmissionController`; this module classifies requests, carries
//! them to it, maps its answer to HTTP/gRPC at the edge ([`reject`]), and keeps the permit
//! until the response body has ended (the `body` module). A refused request's body is read and
//! discarded behind the refusal ([`drain_behind`]), so that the client gets the answer and keeps
//! its connection.
//!
//! ```no_run
//! # fn demo(controller: spillway_core::controller::AdmissionController) -> Result<(), spillway_core::ConfigError> {
//! use spillway_core::Criticality;
//! use spillway_tower::server::SpillwayLayer;
//!
//! let layer = SpillwayLayer::new(controller)
//!     .trust("10.0.0.0/8")?                      // who may set criticality/customer headers
//!     .route("/batch/", Criticality::Sheddable)  // default criticality by path prefix
//!     .health_path("/healthz")                   // bypasses shedding
//!     .cost_headers(true);
//! // axum: Router::new().route(...).layer(layer)
//! # let _ = layer; Ok(()) }
//! ```

mod body;
mod classify;
mod cpu;
mod drain;
mod future;
mod layer;
pub mod reject;
mod service;

pub use body::SpillwayBody;
pub use classify::{
    socket_addr_extension, Classified, Classifier, CustomerFn, CustomerSource, HealthFn,
    OperationFn, OperationSource, PeerFn, RequestView, Route,
};
pub use cpu::{CpuMeter, Measured};
pub use drain::{drain, drain_behind, DRAIN_LIMIT, DRAIN_WITHIN};
pub use future::ResponseFuture;
pub use layer::SpillwayLayer;
pub use service::Spillway;

#[cfg(test)]
mod cardinality_tests;
#[cfg(test)]
mod tests;
