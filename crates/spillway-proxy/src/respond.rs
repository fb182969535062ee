//! Responses the proxy makes itself: refusals, faults and bad input, for HTTP and gRPC.
//!
//! Why here and not in the forwarding code: every answer the proxy invents must say clearly
//! what happened (status, a body or `grpc-message` naming the cause, `Retry-After`, the
//! don't-retry marker) the same way everywhere. Header names and formats are
//! `spillway_tower::wire`'s; a controller refusal is answered by
//! `spillway_tower::server::reject::refusal_response` (429 for a customer over quota, 503 for
//! overload, gRPC `RESOURCE_EXHAUSTED`/`UNAVAILABLE` as Trailers-Only), the very mapping the
//! tower server layer uses, so a service behind the layer and one behind the proxy refuse alike.

use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use spillway_core::controller::{Refusal, RefusalReason};
use spillway_core::Criticality;
use spillway_tower::server::reject::{self, REASON};
use spillway_tower::wire::{self, HeaderError, OverloadGiveUp, Protocol, Pushback};

use crate::body::{empty_body, full_body, ResponseBody};
use crate::controls::ControlRefusal;

/// The content type of the proxy's own plain-text bodies.
const TEXT: &str = "text/plain; charset=utf-8";
/// gRPC `INVALID_ARGUMENT`.
const GRPC_INVALID_ARGUMENT: u16 = 3;
/// gRPC's UNIMPLEMENTED.
const GRPC_UNIMPLEMENTED: u16 = 12;
/// gRPC `DEADLINE_EXCEEDED`.
const GRPC_DEADLINE_EXCEEDED: u16 = 4;
/// gRPC `INTERNAL`.
const GRPC_INTERNAL: u16 = 13;

/// A response with `status` (HTTP) or `grpc` (gRPC, Trailers-Only), naming `reason` in the
/// `x-spillway-reason` header and `message` in the body / `grpc-message`.
pub fn error(
    protocol: Protocol,
    status: StatusCode,
    grpc: u16,
    reason: &'static str,
    message: String,
) -> Response<ResponseBody> {
    let mut res = match protocol {
        Protocol::Grpc => {
            reject::grpc_trailers_only(grpc, reject::grpc_message(&message)).map(|_| empty_body())
        }
        Protocol::Http => {
            let mut body = message;
            body.push('\n');
            let mut res = Response::new(full_body(Bytes::from(body)));
            *res.status_mut() = status;
            res.headers_mut()
                .insert(http::header::CONTENT_TYPE, HeaderValue::from_static(TEXT));
            res
        }
    };
    res.headers_mut()
        .insert(REASON, HeaderValue::from_static(reason));
    res
}

fn retry_headers(
    res: &mut Response<ResponseBody>,
    protocol: Protocol,
    retry_after: Duration,
    dont_retry: bool,
) {
    let h = res.headers_mut();
    h.insert(wire::RETRY_AFTER, wire::format_retry_after(retry_after));
    if dont_retry {
        for (k, v) in OverloadGiveUp::marker_headers() {
            h.insert(k, v);
        }
    } else if protocol == Protocol::Grpc {
        h.insert(
            wire::GRPC_RETRY_PUSHBACK_MS,
            wire::format_pushback(Pushback::RetryAfter(retry_after)),
        );
    }
}

/// `Retry-After` when a refusal carries no delay of its own (spillway-tower's default too).
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);
/// The admission controller refused: spillway-tower's mapping, with the proxy's body type.
pub fn refusal(r: &Refusal, protocol: Protocol) -> Response<ResponseBody> {
    reject::refusal_response(r, protocol, DEFAULT_RETRY_AFTER).map(full_body)
}

/// The request's deadline passed before the proxy could send it on: the answer the controller
/// gives a deadline it sees at admission (the same reason, status and don't-retry marker).
pub fn deadline_passed(criticality: Criticality, protocol: Protocol) -> Response<ResponseBody> {
    let r = Refusal {
        reason: RefusalReason::DeadlineExceeded,
        criticality,
        retry_after: None,
        sustained: false,
    };
    refusal(&r, protocol)
}

/// An incident control refused (never worth retrying elsewhere: the cut is fleet-wide).
pub fn control_refusal(c: &ControlRefusal, protocol: Protocol) -> Response<ResponseBody> {
    let mut res = match (c, protocol) {
        // During an incident every refused request carries the same text: formatted once.
        (ControlRefusal::Shed { below }, Protocol::Http) => {
            let mut res =
                Response::new(full_body(Bytes::from_static(shed_body(*below).as_bytes())));
            *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            res.headers_mut()
                .insert(http::header::CONTENT_TYPE, HeaderValue::from_static(TEXT));
            res.headers_mut()
                .insert(REASON, HeaderValue::from_static(c.reason()));
            res
        }
        _ => error(
            protocol,
            StatusCode::SERVICE_UNAVAILABLE,
            wire::GRPC_UNAVAILABLE,
            c.reason(),
            c.to_string(),
        ),
    };
    retry_headers(
        &mut res,
        protocol,
        DEFAULT_RETRY_AFTER,
        !c.retryable_elsewhere(),
    );
    res
}

/// The body of a shed-below refusal (one string per criticality, made on first use and kept
/// for the life of the process: at most four).
fn shed_body(below: Criticality) -> &'static str {
    static BODIES: [OnceLock<&'static str>; 4] = [const { OnceLock::new() }; 4];
    let i = below.index().min(BODIES.len() - 1);
    BODIES[i].get_or_init(|| {
        let mut s = ControlRefusal::Shed { below }.to_string();
        s.push('\n');
        Box::leak(s.into_boxed_str())
    })
}

/// A malformed Spillway header (400 / `INVALID_ARGUMENT`), naming it and what it accepts.
pub fn bad_header(e: &HeaderError, protocol: Protocol) -> Response<ResponseBody> {
    error(
        protocol,
        StatusCode::BAD_REQUEST,
        GRPC_INVALID_ARGUMENT,
        "bad_header",
        e.to_string(),
    )
}

/// A request whose `host` cannot be forwarded (400 / `INVALID_ARGUMENT`), saying why (`e`:
/// the forwarding policy's `HostError`; taken as text so this layer needs nothing from it).
pub fn bad_host(e: &impl std::fmt::Display, protocol: Protocol) -> Response<ResponseBody> {
    error(
        protocol,
        StatusCode::BAD_REQUEST,
        GRPC_INVALID_ARGUMENT,
        "bad_host",
        e.to_string(),
    )
}

/// A request whose path cannot be routed unambiguously (400 / `INVALID_ARGUMENT`), saying why
/// (`crate::path`).
pub fn bad_path(e: &crate::path::PathError, protocol: Protocol) -> Response<ResponseBody> {
    error(
        protocol,
        StatusCode::BAD_REQUEST,
        GRPC_INVALID_ARGUMENT,
        "bad_path",
        e.to_string(),
    )
}

/// A request with a header field named with `_` under
/// `request.headers_with_underscores = "refuse"` (400 / `INVALID_ARGUMENT`), naming it.
pub fn underscore_header(name: &http::HeaderName, protocol: Protocol) -> Response<ResponseBody> {
    error(
        protocol,
        StatusCode::BAD_REQUEST,
        GRPC_INVALID_ARGUMENT,
        "underscore_header",
        format!(
            "the header field `{name}` has `_` in its name, which some upstreams read as `-`; \
             send `{}` (request.headers_with_underscores = \"refuse\")",
            name.as_str().replace('_', "-")
        ),
    )
}

/// A `CONNECT` (501 / `UNIMPLEMENTED`): a reverse proxy opens no tunnels to where a client
/// names. 501 rather than 405, which would owe an `allow` list of the upstream's methods
/// (RFC 9110 §15.5.6, §15.6.2).
pub fn connect_unsupported(protocol: Protocol) -> Response<ResponseBody> {
    error(
        protocol,
        StatusCode::NOT_IMPLEMENTED,
        GRPC_UNIMPLEMENTED,
        "connect_unsupported",
        "CONNECT is not supported: spillway proxy forwards requests to its upstream, it opens \
         no tunnels"
            .to_string(),
    )
}

/// The proxy gave up on overloaded upstreams (503, don't retry).
pub fn give_up(g: &OverloadGiveUp, protocol: Protocol) -> Response<ResponseBody> {
    let mut res = error(
        protocol,
        StatusCode::SERVICE_UNAVAILABLE,
        wire::GRPC_UNAVAILABLE,
        "upstream_overloaded",
        g.to_string(),
    );
    retry_headers(&mut res, protocol, DEFAULT_RETRY_AFTER, true);
    res
}

/// 502: the upstream refused the connection or broke it.
pub fn bad_gateway(
    protocol: Protocol,
    reason: &'static str,
    message: String,
) -> Response<ResponseBody> {
    error(
        protocol,
        StatusCode::BAD_GATEWAY,
        wire::GRPC_UNAVAILABLE,
        reason,
        message,
    )
}

/// 503: no upstream could take the request.
pub fn unavailable(
    protocol: Protocol,
    reason: &'static str,
    message: String,
) -> Response<ResponseBody> {
    let mut res = error(
        protocol,
        StatusCode::SERVICE_UNAVAILABLE,
        wire::GRPC_UNAVAILABLE,
        reason,
        message,
    );
    retry_headers(&mut res, protocol, DEFAULT_RETRY_AFTER, false);
    res
}

/// 504: no response head in time.
pub fn timeout(protocol: Protocol, message: String) -> Response<ResponseBody> {
    error(
        protocol,
        StatusCode::GATEWAY_TIMEOUT,
        GRPC_DEADLINE_EXCEEDED,
        "upstream_timeout",
        message,
    )
}

/// 500: the proxy could not build the upstream request (should not happen; named if it does).
pub fn internal(protocol: Protocol, message: String) -> Response<ResponseBody> {
    error(
        protocol,
        StatusCode::INTERNAL_SERVER_ERROR,
        GRPC_INTERNAL,
        "proxy_error",
        message,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use spillway_core::controller::RefusalReason;
    use spillway_tower::server::reject::refusal_response;

    /// The cached shed-below answer is the one `error` builds from the refusal's text.
    #[tokio::test]
    async fn cached_shed_refusal_matches_the_formatted_one() {
        for below in Criticality::ALL {
            let c = ControlRefusal::Shed { below };
            let cached = control_refusal(&c, Protocol::Http);
            let mut fresh = error(
                Protocol::Http,
                StatusCode::SERVICE_UNAVAILABLE,
                wire::GRPC_UNAVAILABLE,
                c.reason(),
                c.to_string(),
            );
            retry_headers(&mut fresh, Protocol::Http, DEFAULT_RETRY_AFTER, true);
            assert_eq!(cached.status(), fresh.status(), "{below}");
            assert_eq!(cached.headers(), fresh.headers(), "{below}");
            let a = cached.into_body().collect().await.unwrap().to_bytes();
            let b = fresh.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(a, b, "{below}");
            assert!(String::from_utf8_lossy(&a).contains(below.as_str()));
        }
    }

    /// The proxy answers a refusal exactly as spillway-tower's server layer does (one mapping):
    /// same status, headers and body, for every reason, both dialects, with and without delay.
    #[tokio::test]
    async fn refusal_is_the_tower_mapping() {
        for reason in RefusalReason::ALL {
            for retry_after in [None, Some(Duration::from_millis(2500))] {
                for protocol in [Protocol::Http, Protocol::Grpc] {
                    let r = Refusal {
                        reason,
                        criticality: Criticality::Sheddable,
                        retry_after,
                        sustained: false,
                    };
                    let mut ours = refusal(&r, protocol);
                    let mut theirs = refusal_response(&r, protocol, Duration::from_secs(1));
                    let case = format!("{reason:?} {retry_after:?} {protocol:?}");
                    assert_eq!(ours.status(), theirs.status(), "{case}");
                    // A momentary overload's pushback is drawn at random around the delay
                    // (spillway-tower's `reject::spread`): the same kind of answer, not the same ms.
                    let kind = |h: Option<HeaderValue>| {
                        h.map(|v| std::mem::discriminant(&wire::parse_pushback(&v)))
                    };
                    assert_eq!(
                        kind(ours.headers_mut().remove(wire::GRPC_RETRY_PUSHBACK_MS)),
                        kind(theirs.headers_mut().remove(wire::GRPC_RETRY_PUSHBACK_MS)),
                        "{case}"
                    );
                    assert_eq!(ours.headers(), theirs.headers(), "{case}");
                    let body = ours.into_body().collect().await.unwrap().to_bytes();
                    assert_eq!(body, theirs.into_body(), "{case}");
                }
            }
        }
    }
}
