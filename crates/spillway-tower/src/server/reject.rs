//! Turning a typed refusal into a response — done only here, at the edge.
//!
//! HTTP: 429 when the *customer* is over quota (their problem; RFC 6585), 503 when the *server*
//! is overloaded (RFC 9110), both with `Retry-After` in whole seconds (≥ 1), and
//! `x-spillway-dont-retry: 1` when retrying cannot help: the reason says so, or the overload is
//! sustained ([`Refusal::retry_can_help`]).
//!
//! gRPC: a Trailers-Only response (gRPC over HTTP/2 spec: HTTP 200 with `grpc-status` in the
//! headers and END_STREAM, no messages) with `RESOURCE_EXHAUSTED` (8) for over-quota and
//! `UNAVAILABLE` (14) for overload, plus `grpc-retry-pushback-ms` (gRFC A6): about the delay
//! when a retry may help — a momentary overload of this task, which another may absorb (spread
//! over ½–1½ × the delay, see `spread`; for over-quota: the quota's refill time exactly) — and
//! `-1` when it cannot, including an overload that
//! has lasted [`SUSTAINED_AFTER`](spillway_core::controller::SUSTAINED_AFTER) (gRFC A6: a
//! server under sustained load tells its clients not to retry).
//!
//! Cost: rejections allocate only the response and its header map; bodies and messages are
//! static (`Bytes::from_static`, `HeaderValue::from_static`). The 400 for a malformed header
//! allocates its message — rare, and the point is to name the header.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use spillway_core::controller::Refusal;
use spillway_core::{RandomSource, ThreadRandom};

use super::body::SpillwayBody;
use crate::wire::{self, HeaderError, Protocol, Pushback};

/// gRPC `INVALID_ARGUMENT`, for a malformed Spillway header on a gRPC request.
const GRPC_INVALID_ARGUMENT: u16 = 3;

/// Header carrying the refusal reason (`RefusalReason::as_str`), for clients and logs.
pub const REASON: http::HeaderName = http::HeaderName::from_static("x-spillway-reason");

/// A gRPC Trailers-Only response (HTTP 200, `content-type: application/grpc`, `grpc-status` and
/// `grpc-message` in the headers, no body), for callers that build their own early errors (e.g.
/// a proxy's faults). The body is empty [`Bytes`]; map it to your body type with
/// [`Response::map`].
pub fn grpc_trailers_only(status: u16, message: HeaderValue) -> Response<Bytes> {
    let mut res = Response::new(Bytes::new());
    let h = res.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    h.insert(wire::GRPC_STATUS, HeaderValue::from(status));
    h.insert(wire::GRPC_MESSAGE, message);
    res
}

/// The response for a refusal by the admission controller — the one wire mapping of a
/// [`Refusal`], for every edge that answers for Spillway (this crate's server layer, the proxy).
///
/// HTTP: 429 for a customer over quota, 503 otherwise, the reason as a `text/plain` body.
/// gRPC: Trailers-Only with `RESOURCE_EXHAUSTED` / `UNAVAILABLE` and `grpc-retry-pushback-ms`
/// (about the delay when retrying may help, spread over ½–1½ of it; for over-quota the refill
/// delay; `-1` otherwise). Both:
/// `Retry-After` (the refusal's own delay, else `default_retry_after`; whole seconds, at least
/// one), [`REASON`], and `x-spillway-dont-retry: 1` when retrying cannot help
/// ([`Refusal::retry_can_help`]: the reason, or a sustained overload).
///
/// The body is [`Bytes`] (empty for gRPC, so the response ends with its headers); map it to
/// your body type with [`Response::map`].
pub fn refusal_response(
    r: &Refusal,
    protocol: Protocol,
    default_retry_after: Duration,
) -> Response<Bytes> {
    let over_quota = r.reason.is_customer_over_quota();
    let dont_retry = !r.retry_can_help();
    let retry_after = r.retry_after.unwrap_or(default_retry_after);
    let reason = r.reason.as_str();
    let mut res = match protocol {
        Protocol::Grpc => {
            let status = if over_quota {
                wire::GRPC_RESOURCE_EXHAUSTED
            } else {
                wire::GRPC_UNAVAILABLE
            };
            let mut res = grpc_trailers_only(status, HeaderValue::from_static(reason));
            // One header must say both "not now, not elsewhere" and "later is fine": a quota
            // refusal with a refill time is a *delayed* retry that can succeed (pushback = that
            // delay); other refusals retrying cannot help get gRFC A6's negative value.
            let pushback = match (dont_retry, over_quota, r.retry_after) {
                (false, true, _) => Pushback::RetryAfter(retry_after),
                (false, false, _) => {
                    Pushback::RetryAfter(spread(retry_after, ThreadRandom.uniform()))
                }
                (true, true, Some(later)) => Pushback::RetryAfter(later),
                (true, _, _) => Pushback::DontRetry,
            };
            res.headers_mut().insert(
                wire::GRPC_RETRY_PUSHBACK_MS,
                wire::format_pushback(pushback),
            );
            res
        }
        Protocol::Http => {
            let mut res = Response::new(Bytes::from_static(reason.as_bytes()));
            *res.status_mut() = if over_quota {
                StatusCode::TOO_MANY_REQUESTS
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            res.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain"),
            );
            res
        }
    };
    let h = res.headers_mut();
    h.insert(wire::RETRY_AFTER, wire::format_retry_after(retry_after));
    h.insert(REASON, HeaderValue::from_static(reason));
    if dont_retry {
        h.insert(wire::DONT_RETRY, HeaderValue::from_static("1"));
    }
    res
}

/// A momentary overload's pushback: the delay times `½ + u` (`u` uniform in `[0, 1)`), so on
/// average the delay and spread over as long again. gRFC A6 clients wait exactly a server's
/// pushback (their own backoff is jittered, a pushback is not): one delay for every caller
/// refused in a burst brings all their retries back at once, one delay later — the burst again,
/// now met as a sustained overload that refuses them for good (`bench/grpc-retry.sh`, burst
/// case: the refusals of a 0.4 s burst came back as one 0.4 s wave 1 s later). Spread around
/// the delay rather than after it so that a client capping its wait at the delay (this crate's
/// retry layer caps at 1 s) still spreads.
fn spread(delay: Duration, u: f64) -> Duration {
    let factor = 0.5 + u.clamp(0.0, 1.0);
    Duration::try_from_secs_f64(delay.as_secs_f64() * factor).unwrap_or(delay)
}

/// A locally made body for this crate's server (an empty one ends with the headers).
fn local_body<B>(data: Bytes) -> SpillwayBody<B> {
    if data.is_empty() {
        SpillwayBody::empty()
    } else {
        SpillwayBody::local(data)
    }
}

/// [`refusal_response`] with this crate's server body.
pub(crate) fn refusal<B>(
    r: &Refusal,
    protocol: Protocol,
    default_retry_after: Duration,
) -> Response<SpillwayBody<B>> {
    refusal_response(r, protocol, default_retry_after).map(local_body)
}

/// The response when a handler gave up on an overloaded downstream ([`wire::OverloadGiveUp`]):
/// 503 / `UNAVAILABLE` with the don't-retry marker in both dialects.
pub(crate) fn give_up<B>(protocol: Protocol, retry_after: Duration) -> Response<SpillwayBody<B>> {
    let mut res = match protocol {
        Protocol::Grpc => grpc_trailers_only(
            wire::GRPC_UNAVAILABLE,
            HeaderValue::from_static("downstream overloaded"),
        )
        .map(local_body),
        Protocol::Http => {
            let mut res = Response::new(SpillwayBody::local(Bytes::from_static(
                b"downstream overloaded",
            )));
            *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            res
        }
    };
    let h = res.headers_mut();
    h.insert(wire::RETRY_AFTER, wire::format_retry_after(retry_after));
    mark_dont_retry(h);
    res
}

/// Puts both don't-retry markers on a response (the HTTP one and gRFC A6's negative pushback).
pub fn mark_dont_retry(h: &mut HeaderMap) {
    h.insert(wire::DONT_RETRY, HeaderValue::from_static("1"));
    h.insert(
        wire::GRPC_RETRY_PUSHBACK_MS,
        wire::format_pushback(Pushback::DontRetry),
    );
}

/// 400 (or gRPC `INVALID_ARGUMENT`) naming the malformed header and what it accepts.
pub(crate) fn bad_header<B>(e: &HeaderError, protocol: Protocol) -> Response<SpillwayBody<B>> {
    let msg = e.to_string();
    match protocol {
        Protocol::Grpc => {
            grpc_trailers_only(GRPC_INVALID_ARGUMENT, grpc_message(&msg)).map(local_body)
        }
        Protocol::Http => {
            let mut res = Response::new(SpillwayBody::local(Bytes::from(msg)));
            *res.status_mut() = StatusCode::BAD_REQUEST;
            res.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain"),
            );
            res
        }
    }
}

/// `text` as a `grpc-message` value: percent-encoded as the gRPC over HTTP/2 spec asks (bytes
/// outside 0x20–0x7E, and `%`, as `%XX`), so any text is a valid header value.
pub fn grpc_message(text: &str) -> HeaderValue {
    HeaderValue::from_str(&percent_encode(text))
        .unwrap_or_else(|_| HeaderValue::from_static("unprintable message"))
}

/// `grpc-message` encoding (gRPC over HTTP/2): bytes outside 0x20–0x7E and `%` as `%XX`.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_core::controller::RefusalReason;
    use spillway_core::Criticality;

    fn refused(reason: RefusalReason, retry_after: Option<Duration>) -> Refusal {
        Refusal {
            reason,
            criticality: Criticality::Sheddable,
            retry_after,
            sustained: false,
        }
    }

    type R = Response<SpillwayBody<http_body_util::Empty<Bytes>>>;

    #[test]
    fn http_maps_quota_to_429_and_overload_to_503() {
        let r: R = refusal(
            &refused(RefusalReason::OverQuota, Some(Duration::from_millis(1500))),
            Protocol::Http,
            Duration::from_secs(1),
        );
        assert_eq!(r.status(), 429);
        assert_eq!(r.headers()[wire::RETRY_AFTER], "2");
        assert_eq!(r.headers()[REASON], "over_quota");
        let r: R = refusal(
            &refused(RefusalReason::Shed, None),
            Protocol::Http,
            Duration::ZERO,
        );
        assert_eq!(r.status(), 503);
        assert_eq!(r.headers()[wire::RETRY_AFTER], "1", "at least one second");
    }

    #[test]
    fn a_sustained_overload_is_marked_dont_retry_in_both_dialects() {
        let r = Refusal {
            sustained: true,
            ..refused(RefusalReason::QueueFull, Some(Duration::from_secs(1)))
        };
        let h: R = refusal(&r, Protocol::Http, Duration::from_secs(1));
        assert!(wire::is_dont_retry(h.headers()));
        assert_eq!(h.status(), 503);
        let g: R = refusal(&r, Protocol::Grpc, Duration::from_secs(1));
        assert_eq!(
            g.headers()[wire::GRPC_RETRY_PUSHBACK_MS],
            "-1",
            "gRFC A6: no retry"
        );
        // The same refusal while momentary invites a retry after about the delay, spread so
        // that a burst's callers do not all come back at the same instant.
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..64 {
            let g: R = refusal(
                &refused(RefusalReason::QueueFull, Some(Duration::from_secs(1))),
                Protocol::Grpc,
                Duration::from_secs(1),
            );
            let Pushback::RetryAfter(d) =
                wire::parse_pushback(&g.headers()[wire::GRPC_RETRY_PUSHBACK_MS])
            else {
                panic!("a momentary overload invites a retry");
            };
            assert!(
                (Duration::from_millis(500)..=Duration::from_millis(1500)).contains(&d),
                "{d:?}"
            );
            assert_eq!(g.headers()[wire::RETRY_AFTER], "1");
            seen.insert(d);
        }
        assert!(seen.len() > 8, "pushbacks not spread: {seen:?}");
    }

    #[test]
    fn momentary_pushback_spreads_around_the_delay() {
        let s = Duration::from_secs(1);
        assert_eq!(spread(s, 0.0), s / 2);
        assert_eq!(spread(s, 0.5), s);
        assert_eq!(spread(s, 7.0), s * 3 / 2, "draws are clamped to [0, 1]");
        assert_eq!(spread(s, f64::NAN), s, "no draw: the delay");
        assert_eq!(spread(Duration::MAX, 0.99), Duration::MAX, "no overflow");
        assert_eq!(spread(Duration::ZERO, 0.5), Duration::ZERO);
    }

    #[test]
    fn quota_pushback_is_the_refill_time_exactly() {
        // A customer over quota may retry when its quota has refilled, not before: no spread.
        let g: R = refusal(
            &refused(RefusalReason::OverQuota, Some(Duration::from_millis(250))),
            Protocol::Grpc,
            Duration::from_secs(1),
        );
        assert_eq!(g.headers()[wire::GRPC_RETRY_PUSHBACK_MS], "250");
    }

    #[test]
    fn dont_retry_marker_follows_the_reason() {
        for reason in RefusalReason::ALL {
            let expect = !reason.retry_elsewhere_can_help();
            let r: R = refusal(
                &refused(reason, None),
                Protocol::Http,
                Duration::from_secs(1),
            );
            assert_eq!(wire::is_dont_retry(r.headers()), expect, "{reason:?}");
            let g: R = refusal(
                &refused(reason, None),
                Protocol::Grpc,
                Duration::from_secs(1),
            );
            assert_eq!(g.status(), 200, "trailers-only is HTTP 200");
            let pushback = wire::parse_pushback(&g.headers()[wire::GRPC_RETRY_PUSHBACK_MS]);
            assert_eq!(pushback == Pushback::DontRetry, expect, "{reason:?}");
        }
    }

    #[test]
    fn grpc_trailers_only_statuses_and_pushback() {
        let g: R = refusal(
            &refused(RefusalReason::OverQuota, Some(Duration::from_millis(250))),
            Protocol::Grpc,
            Duration::from_secs(1),
        );
        assert_eq!(
            wire::grpc_status(g.headers()),
            Some(wire::GRPC_RESOURCE_EXHAUSTED)
        );
        assert_eq!(g.headers()[http::header::CONTENT_TYPE], "application/grpc");
        let g: R = refusal(
            &refused(RefusalReason::Shed, None),
            Protocol::Grpc,
            Duration::from_secs(1),
        );
        assert_eq!(wire::grpc_status(g.headers()), Some(wire::GRPC_UNAVAILABLE));
        assert!(http_body::Body::is_end_stream(g.body()));
    }

    #[test]
    fn give_up_carries_both_markers() {
        for p in [Protocol::Http, Protocol::Grpc] {
            let r: R = give_up(p, Duration::from_secs(1));
            assert!(wire::is_dont_retry(r.headers()));
            assert_eq!(r.headers()[wire::GRPC_RETRY_PUSHBACK_MS], "-1");
        }
    }

    #[test]
    fn bad_header_names_the_header() {
        let e = wire::parse_criticality(&HeaderValue::from_static("urgent")).unwrap_err();
        let r: R = bad_header(&e, Protocol::Http);
        assert_eq!(r.status(), 400);
        let g: R = bad_header(&e, Protocol::Grpc);
        assert_eq!(wire::grpc_status(g.headers()), Some(3));
        let msg = g.headers()[wire::GRPC_MESSAGE].to_str().unwrap();
        assert!(msg.contains("x-spillway-criticality"), "{msg}");
        assert_eq!(percent_encode("a%b\u{e9}"), "a%25b%C3%A9");
    }
}
