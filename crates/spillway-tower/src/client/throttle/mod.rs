//! Client-side adaptive throttling, keyed by destination (SRE book ch. 21, "Client-side
//! throttling").
//!
//! Why on the client: rejecting is cheap but not free, and a client that keeps sending to a
//! backend that refuses most requests can spend the backend's whole CPU on refusals. Each client
//! keeps `requests` and `accepts` over a sliding window (2 minutes in the book) and drops locally
//! with probability `max(0, (requests − K·accepts) / (requests + 1))`, K = 2; the arithmetic lives
//! in [`spillway_core::throttle`]. This layer only picks the throttle for the request's
//! destination, asks it, and tells it afterwards whether the backend accepted.

mod error;
mod future;
pub(crate) mod layer;
mod service;

pub use error::Throttled;
pub use future::ResponseFuture;
pub use layer::{ThrottleKeying, ThrottleLayer, DEFAULT_MAX_DESTINATIONS};
pub use service::Throttle;
