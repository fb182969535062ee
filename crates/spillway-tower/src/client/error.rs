//! [`ClientError`]: the client stack's error as a concrete, cloneable enum.
//!
//! Why not only [`BoxError`]: a boxed error cannot be cloned, so a client kept in axum state
//! (which must be `Clone`) needs wrapping, and every handler repeats the same `downcast_ref`
//! chain to tell "the downstream is overloaded" from "the connection failed". Mapping the stack's
//! error into this enum once (`.map_err(ClientError::from)`) gives handlers a `match` and a
//! ready response.

use std::sync::Arc;

use super::{find_cause, BoxError, Throttled};
use crate::wire::OverloadGiveUp;

/// Why a call through the client stack failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The retry layer gave up on an overloaded downstream (retrying could not help).
    #[error(transparent)]
    GaveUp(OverloadGiveUp),
    /// The adaptive throttle refused the call locally; it never reached the wire.
    #[error(transparent)]
    Throttled(Throttled),
    /// Anything else: connection refused, timeouts of the transport, a malformed request.
    #[error(transparent)]
    Other(Arc<dyn std::error::Error + Send + Sync + 'static>),
}

impl From<BoxError> for ClientError {
    fn from(e: BoxError) -> Self {
        if let Some(g) = find_cause::<OverloadGiveUp>(&*e) {
            ClientError::GaveUp(g.clone())
        } else if let Some(t) = find_cause::<Throttled>(&*e) {
            ClientError::Throttled(t.clone())
        } else {
            ClientError::Other(Arc::from(e))
        }
    }
}

impl ClientError {
    /// Whether the downstream is overloaded (gave up or throttled): the caller above should
    /// not retry either.
    pub fn is_overload(&self) -> bool {
        matches!(self, ClientError::GaveUp(_) | ClientError::Throttled(_))
    }

    /// The response a handler returns for this error: an overload becomes 503 with the
    /// don't-retry marker (completed by the server layer, see [`OverloadGiveUp::to_response`]),
    /// anything else 502 Bad Gateway.
    pub fn to_response<B: Default>(&self) -> http::Response<B> {
        match self {
            ClientError::GaveUp(g) => g.to_response(),
            ClientError::Throttled(_) => OverloadGiveUp {
                attempts: 1,
                reason: "throttled",
            }
            .to_response(),
            ClientError::Other(_) => {
                let mut res = http::Response::new(B::default());
                *res.status_mut() = http::StatusCode::BAD_GATEWAY;
                res
            }
        }
    }
}

/// A client stack boxed behind [`ClientError`]: `Clone + Send + Sync`, so it goes straight into
/// axum state. Build it with
/// `ClientService::new(ServiceBuilder::new()...service(http).map_err(ClientError::from))`.
pub type ClientService<ReqBody, ResBody> =
    tower::util::BoxCloneSyncService<http::Request<ReqBody>, http::Response<ResBody>, ClientError>;
