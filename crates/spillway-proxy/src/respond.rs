//! Responses the proxy makes itself: refusals, faults and bad input, for HTTP and gRPC.
//!
//! Why here and not in the forwarding code: every answer the proxy invents must say clearly
//! what happened (status, a body or `grpc-message` naming the cause, `Retry-After`, the
//! don't-retry marker) the same way everywhere. Header names and formats are
//! `spillway_tower::wire`'s; the status mapping (429 for a customer over quota, 503 for
//! overload, gRPC `RESOURCE_EXHAUSTED`/`UNAVAILABLE` as Trailers-Only) follows
//! `spillway_tower::server::reject`, whose builders are crate-private to that crate.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use spillway_core::controller::Refusal;
use spillway_tower::server::reject::REASON;
use spillway_tower::wire::{self, HeaderError, OverloadGiveUp, Protocol, Pushback};

use crate::controls::ControlRefusal;
use crate::upstream::{empty_body, full_body, ProxyBody};

/// gRPC `INVALID_ARGUMENT`.
const GRPC_INVALID_ARGUMENT: u16 = 3;
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
) -> Response<ProxyBody> {
    let mut res = match protocol {
        Protocol::Grpc => {
            let mut res = Response::new(empty_body());
            let h = res.headers_mut();
            h.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/grpc"),
            );
            h.insert(wire::GRPC_STATUS, HeaderValue::from(grpc));
            let msg = message.replace(|c: char| !c.is_ascii_graphic() && c != ' ', "_");
            if let Ok(v) = HeaderValue::from_str(&msg) {
                h.insert(wire::GRPC_MESSAGE, v);
            }
            res
        }
        Protocol::Http => {
            let mut body = message;
            body.push('\n');
            let mut res = Response::new(full_body(Bytes::from(body)));
            *res.status_mut() = status;
            res.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            res
        }
    };
    res.headers_mut()
        .insert(REASON, HeaderValue::from_static(reason));
    res
}

fn retry_headers(
    res: &mut Response<ProxyBody>,
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

/// The admission controller refused.
pub fn refusal(r: &Refusal, protocol: Protocol) -> Response<ProxyBody> {
    let over_quota = r.reason.is_customer_over_quota();
    let (status, grpc) = if over_quota {
        (StatusCode::TOO_MANY_REQUESTS, wire::GRPC_RESOURCE_EXHAUSTED)
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, wire::GRPC_UNAVAILABLE)
    };
    let reason = r.reason.as_str();
    let mut res = error(protocol, status, grpc, reason, reason.to_string());
    retry_headers(
        &mut res,
        protocol,
        r.retry_after.unwrap_or(Duration::from_secs(1)),
        !r.reason.retry_elsewhere_can_help(),
    );
    res
}

/// An incident control refused (never worth retrying elsewhere: the cut is fleet-wide).
pub fn control_refusal(c: &ControlRefusal, protocol: Protocol) -> Response<ProxyBody> {
    let mut res = error(
        protocol,
        StatusCode::SERVICE_UNAVAILABLE,
        wire::GRPC_UNAVAILABLE,
        c.reason(),
        c.to_string(),
    );
    retry_headers(
        &mut res,
        protocol,
        Duration::from_secs(1),
        !c.retryable_elsewhere(),
    );
    res
}

/// A malformed Spillway header (400 / `INVALID_ARGUMENT`), naming it and what it accepts.
pub fn bad_header(e: &HeaderError, protocol: Protocol) -> Response<ProxyBody> {
    error(
        protocol,
        StatusCode::BAD_REQUEST,
        GRPC_INVALID_ARGUMENT,
        "bad_header",
        e.to_string(),
    )
}

/// The proxy gave up on overloaded upstreams (503, don't retry).
pub fn give_up(g: &OverloadGiveUp, protocol: Protocol) -> Response<ProxyBody> {
    let mut res = error(
        protocol,
        StatusCode::SERVICE_UNAVAILABLE,
        wire::GRPC_UNAVAILABLE,
        "upstream_overloaded",
        g.to_string(),
    );
    retry_headers(&mut res, protocol, Duration::from_secs(1), true);
    res
}

/// 502: the upstream refused the connection or broke it.
pub fn bad_gateway(
    protocol: Protocol,
    reason: &'static str,
    message: String,
) -> Response<ProxyBody> {
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
) -> Response<ProxyBody> {
    let mut res = error(
        protocol,
        StatusCode::SERVICE_UNAVAILABLE,
        wire::GRPC_UNAVAILABLE,
        reason,
        message,
    );
    retry_headers(&mut res, protocol, Duration::from_secs(1), false);
    res
}

/// 504: no response head in time.
pub fn timeout(protocol: Protocol, message: String) -> Response<ProxyBody> {
    error(
        protocol,
        StatusCode::GATEWAY_TIMEOUT,
        GRPC_DEADLINE_EXCEEDED,
        "upstream_timeout",
        message,
    )
}

/// 500: the proxy could not build the upstream request (should not happen; named if it does).
pub fn internal(protocol: Protocol, message: String) -> Response<ProxyBody> {
    error(
        protocol,
        StatusCode::INTERNAL_SERVER_ERROR,
        GRPC_INTERNAL,
        "proxy_error",
        message,
    )
}
