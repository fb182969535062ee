//! What a downstream answer means to the client layers: accepted, or refused for overload.
//!
//! Why one function: the throttle ("was it accepted?") and the retry layer ("may I retry?") must
//! read a response the same way, or one would count as accepted what the other retries.
//! Overload refusals are HTTP 503 (overloaded) and 429 (over quota — still the backend refusing
//! work), and gRPC `UNAVAILABLE` / `RESOURCE_EXHAUSTED` in a trailers-only response (status in
//! the headers, which is how Spillway's server layer and tonic send early errors). A gRPC status
//! that only arrives in the trailers after a body is not seen here (it would need buffering the
//! response); servers refusing for overload answer before producing a body.

use std::time::Duration;

use http::{HeaderMap, Response, StatusCode};

use crate::wire::{self, Pushback};

/// How a downstream refused a request for overload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverloadRefusal {
    /// The response carried a don't-retry marker (`x-spillway-dont-retry: 1` or a negative
    /// `grpc-retry-pushback-ms`).
    pub dont_retry: bool,
    /// The server asked to wait this long before retrying (`grpc-retry-pushback-ms` >= 0, or
    /// `Retry-After` seconds).
    pub retry_after: Option<Duration>,
}

/// The overload refusal a response carries, if it is one: HTTP 503/429, or gRPC `UNAVAILABLE`
/// / `RESOURCE_EXHAUSTED` in a Trailers-Only response. The one reading of "did the downstream
/// refuse for overload", shared by the throttle, the retry layer and the proxy, so none counts
/// as accepted what another retries. Generic over the body: only the head is read.
pub fn overload_refusal<B>(resp: &Response<B>) -> Option<OverloadRefusal> {
    let headers = resp.headers();
    let by_status = matches!(
        resp.status(),
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS
    );
    let by_grpc = matches!(
        wire::grpc_status(headers),
        Some(wire::GRPC_UNAVAILABLE | wire::GRPC_RESOURCE_EXHAUSTED)
    );
    if !(by_status || by_grpc) {
        return None;
    }
    Some(OverloadRefusal {
        dont_retry: wire::is_dont_retry(headers),
        retry_after: retry_after(headers),
    })
}

/// True when the response is an overload refusal (not an accept, for the throttle).
pub(crate) fn is_overload_refusal<B>(resp: &Response<B>) -> bool {
    overload_refusal(resp).is_some()
}

fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    if let Some(v) = headers.get(wire::GRPC_RETRY_PUSHBACK_MS) {
        return match wire::parse_pushback(v) {
            Pushback::RetryAfter(d) => Some(d),
            Pushback::DontRetry => None,
        };
    }
    headers
        .get(wire::RETRY_AFTER)
        .and_then(|v| wire::parse_retry_after(v).ok())
}

/// True when an error (or one of its sources) is an I/O error meaning the connection could not
/// be used, so the backend did not process the request and sending it again is safe.
///
/// Walks the `source()` chain (hyper-util's client wraps the `io::Error` of a failed connect).
pub(crate) fn is_connection_error(err: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind as K;
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                K::ConnectionRefused
                    | K::ConnectionReset
                    | K::ConnectionAborted
                    | K::NotConnected
                    | K::AddrNotAvailable
            ) {
                return true;
            }
        }
        cur = e.source();
    }
    false
}

/// Finds an error of type `T` in an error or its `source()` chain (e.g. [`super::Throttled`] or
/// [`crate::wire::OverloadGiveUp`] under a wrapper).
pub fn find_cause<'a, T: std::error::Error + 'static>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(t) = e.downcast_ref::<T>() {
            return Some(t);
        }
        cur = e.source();
    }
    None
}
