//! Client layers: what a service puts around the clients it uses to call its downstreams.
//!
//! ```text
//! PropagateLayer ─► RetryLayer ─► ThrottleLayer ─► transport (hyper-util, tonic Channel, …)
//! (criticality,     (three gates,   (adaptive,
//!  deadline,         attempt         per destination)
//!  customer)         header)
//! ```
//!
//! Order matters: the retry layer sits above the throttle so that every attempt passes the
//! throttle and counts as a request (SRE book ch. 21: retries are requests too), and a local
//! throttle refusal reaches the retry layer as an overload it gives up on.
//! Errors of the stack are boxed ([`BoxError`]); `.map_err(ClientError::from)` turns them into
//! the cloneable [`ClientError`] enum (overload given up on, throttled locally, other), and
//! [`ClientService`] is the whole stack boxed behind it, ready for axum state.

mod classify;
mod error;
pub mod propagate;
pub mod retry;
pub mod throttle;

#[cfg(test)]
mod tests;

pub use classify::{find_cause, overload_refusal, OverloadRefusal};
pub use error::{ClientError, ClientService};
pub use propagate::{Propagate, PropagateLayer};
pub use retry::{Retry, RetryLayer, RetryMode};
pub use throttle::{Throttle, ThrottleKeying, ThrottleLayer, Throttled};

/// The error type of the client layers: any error, boxed (tower's convention).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;
