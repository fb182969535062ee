//! Client retries behind the three gates of the SRE book (ch. 21, "Handling Overload Errors").
//!
//! Why: retries are the most dangerous positive feedback under overload — three attempts per
//! layer, three layers deep, send the bottom 27× its load. This layer retries only what can
//! succeed on another attempt (overload refusals and connection errors, of requests whose body
//! it could buffer), only through the core's gates ([`spillway_core::retry::RetryPolicy`]:
//! attempts ≤ 3 counting those the served request carried in, retries ≤ 10 % of requests,
//! no retry of a response marked "don't retry", none when the overload is widespread), and never
//! past the deadline. When it gives up on an overload it returns
//! [`crate::wire::OverloadGiveUp`], which this service's server layer answers with the
//! don't-retry marker: only the layer right above the overloaded one retries, and the
//! amplification stays near 1.1× however deep the chain.

pub(crate) mod body;
mod error;
mod future;
mod layer;
mod service;

pub use body::RetryBody;
pub use error::GiveUpReason;
pub use future::ResponseFuture;
pub use layer::{
    RetryLayer, RetryMode, DEFAULT_BACKOFF_BASE, DEFAULT_BACKOFF_MAX, DEFAULT_MAX_BODY_BYTES,
};
pub use service::Retry;
