//! The throttle's local refusal, as an error the caller can match.

use http::uri::Authority;

/// The request was refused locally by the adaptive throttle and never sent.
///
/// The backend has recently been refusing requests for overload, so this client drops a fraction
/// of its own requests before they reach the wire (SRE book ch. 21, "Client-side throttling").
/// Treat it like an overload refusal from the backend: do not retry it immediately.
///
/// It travels inside the boxed error of the client stack; match it with
/// `err.downcast_ref::<Throttled>()` (or [`crate::client::find_cause`] through wrappers).
#[derive(Debug, Clone, PartialEq)]
pub struct Throttled {
    /// Probability with which the throttle was refusing when it refused this request, in [0, 1).
    pub probability: f64,
    /// The destination the throttle is kept for (`None`: the layer's single throttle).
    pub destination: Option<Authority>,
}

impl std::fmt::Display for Throttled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.destination {
            Some(d) => write!(
                f,
                "request to {d} throttled locally: the backend is refusing for overload (local refusal probability {:.3})",
                self.probability
            ),
            None => write!(
                f,
                "request throttled locally: the backend is refusing for overload (local refusal probability {:.3})",
                self.probability
            ),
        }
    }
}

impl std::error::Error for Throttled {}
