//! The request's context — criticality, deadline, customer, attempt — carried from the server
//! layer to the handler and from the handler's outgoing calls to the next service.
//!
//! Why a task-local: Google's RPC framework propagates criticality and deadlines implicitly, so
//! application code cannot forget to (SRE book ch. 21, "Criticality": "criticality is propagated
//! automatically"; deadline propagation, ch. 22). A `tokio::task_local!` scoped around the
//! handler's future gives the same: the server layer sets it, the client layer reads it, and the
//! handler's code in between does nothing. The deadline is an absolute [`Instant`] in here and is
//! converted back to *remaining* time only when written to the wire, so time spent in this
//! service is subtracted automatically.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::HeaderMap;
use spillway_core::Criticality;
use tokio::task::futures::TaskLocalFuture;

use crate::wire::{self, Protocol};

tokio::task_local! {
    static CONTEXT: RequestContext;
}

/// What the server layer learnt about the request being served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestContext {
    /// How important the request is; outgoing calls inherit it.
    pub criticality: Criticality,
    /// When the caller stops waiting, if it said.
    pub deadline: Option<Instant>,
    /// Who the request is charged to (a shared string: cloning is a reference-count bump).
    pub customer: Arc<str>,
    /// 1-based attempt number of the incoming request (not propagated: a downstream call made
    /// while serving attempt 2 is that call's own first attempt).
    pub attempt: u32,
}

impl Default for RequestContext {
    fn default() -> Self {
        RequestContext {
            criticality: Criticality::default(),
            deadline: None,
            customer: Arc::from(""),
            attempt: 1,
        }
    }
}

impl RequestContext {
    /// Time left until the deadline at `now`: `None` if there is no deadline, `Some(ZERO)` if
    /// it has passed.
    pub fn remaining(&self, now: Instant) -> Option<Duration> {
        self.deadline.map(|d| d.saturating_duration_since(now))
    }

    /// True when the deadline has passed at `now` (work for this request is wasted).
    pub fn is_expired(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|d| d <= now)
    }

    /// Writes this context onto outgoing headers: criticality, customer (if non-empty) and the
    /// remaining time as of `now` — `grpc-timeout` for gRPC, `x-spillway-deadline-ms` for HTTP
    /// (the other dialect's header is removed so a stale value cannot win). The attempt number
    /// is not written: the client's retry layer sets the outgoing call's own attempt.
    pub fn write_headers(&self, headers: &mut HeaderMap, now: Instant, protocol: Protocol) {
        headers.insert(
            wire::CRITICALITY,
            wire::format_criticality(self.criticality),
        );
        // Already there with the same bytes (the caller's own header, or a value the caller
        // cached and wrote first): left as is, which saves copying it into a new value.
        let same = || {
            wire::find_only(headers, &wire::CUSTOMER)
                .is_some_and(|v| v.as_bytes() == self.customer.as_bytes())
        };
        if !self.customer.is_empty() && !same() {
            if let Ok(v) = http::HeaderValue::from_str(&self.customer) {
                headers.insert(wire::CUSTOMER, v);
            }
        }
        self.write_deadline(headers, now, protocol);
    }

    /// The remaining-time part of [`write_headers`](Self::write_headers) alone, for a caller
    /// that writes the criticality and customer fields itself.
    pub fn write_deadline(&self, headers: &mut HeaderMap, now: Instant, protocol: Protocol) {
        match (self.remaining(now), protocol) {
            (None, _) => {}
            (Some(left), Protocol::Grpc) => {
                headers.remove(wire::DEADLINE_MS);
                headers.insert(wire::GRPC_TIMEOUT, wire::format_grpc_timeout(left));
            }
            (Some(left), Protocol::Http) => {
                headers.remove(wire::GRPC_TIMEOUT);
                headers.insert(wire::DEADLINE_MS, wire::format_deadline_ms(left));
            }
        }
    }

    /// [`write_headers`](Self::write_headers) on a request, choosing the dialect from its
    /// `content-type`.
    pub fn write_request<B>(&self, req: &mut http::Request<B>, now: Instant) {
        let protocol = Protocol::of(req.headers());
        self.write_headers(req.headers_mut(), now, protocol);
    }
}

/// The context of the request this task is serving, if it runs inside the server layer
/// (a clone: one `Arc` reference-count bump).
pub fn current() -> Option<RequestContext> {
    CONTEXT.try_with(Clone::clone).ok()
}

/// Runs `f` on the current context without cloning it.
pub fn with_current<R>(f: impl FnOnce(&RequestContext) -> R) -> Option<R> {
    CONTEXT.try_with(f).ok()
}

/// Runs `fut` with `ctx` as its context (the server layer does this around the handler).
pub fn scope<F: Future>(ctx: RequestContext, fut: F) -> TaskLocalFuture<RequestContext, F> {
    CONTEXT.scope(ctx, fut)
}

/// Runs the synchronous `f` with `ctx` as the context (the server layer calls the inner
/// service's `call` this way, for services that start work eagerly there).
pub fn sync_scope<R>(ctx: RequestContext, f: impl FnOnce() -> R) -> R {
    CONTEXT.sync_scope(ctx, f)
}

/// Runs `fut` — typically calls a service makes on its own behalf, such as a cache refresh or
/// prefetch — with a criticality of at most `c`.
///
/// It can only *lower* criticality: if the current request is `SHEDDABLE`, asking for
/// `CRITICAL` yields `SHEDDABLE` (clamped, not an error), because otherwise any handler could
/// launder a sheddable request into critical downstream work and defeat shedding everywhere
/// below. Outside any request context there is nothing to clamp to and `c` is used as given,
/// with no deadline and no customer.
pub fn with_criticality<F: Future>(c: Criticality, fut: F) -> TaskLocalFuture<RequestContext, F> {
    let ctx = match current() {
        Some(mut ctx) => {
            ctx.criticality = ctx.criticality.min(c);
            ctx
        }
        None => RequestContext {
            criticality: c,
            ..RequestContext::default()
        },
    };
    CONTEXT.scope(ctx, fut)
}

/// Writes the current context (if any) onto an outgoing request, as
/// [`RequestContext::write_request`] does. Returns whether there was a context.
pub fn propagate<B>(req: &mut http::Request<B>, now: Instant) -> bool {
    with_current(|ctx| ctx.write_request(req, now)).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(c: Criticality) -> RequestContext {
        RequestContext {
            criticality: c,
            deadline: None,
            customer: Arc::from("acme"),
            attempt: 2,
        }
    }

    #[tokio::test]
    async fn current_is_set_only_inside_scope() {
        assert_eq!(current(), None);
        let got = scope(ctx(Criticality::Critical), async { current() }).await;
        assert_eq!(got, Some(ctx(Criticality::Critical)));
        assert_eq!(current(), None);
    }

    #[tokio::test]
    async fn with_criticality_lowers_but_never_raises() {
        let inner = scope(ctx(Criticality::Critical), async {
            let lowered = with_criticality(Criticality::Sheddable, async {
                current().map(|c| c.criticality)
            })
            .await;
            let raised = with_criticality(Criticality::CriticalPlus, async {
                current().map(|c| (c.criticality, c.customer))
            })
            .await;
            (lowered, raised)
        })
        .await;
        assert_eq!(inner.0, Some(Criticality::Sheddable));
        assert_eq!(inner.1, Some((Criticality::Critical, Arc::from("acme"))));
        // Lowered twice: the inner call cannot climb back above the outer lowering.
        let nested = scope(ctx(Criticality::Critical), async {
            with_criticality(Criticality::SheddablePlus, async {
                with_criticality(Criticality::Critical, async {
                    current().unwrap().criticality
                })
                .await
            })
            .await
        })
        .await;
        assert_eq!(nested, Criticality::SheddablePlus);
        // Outside a request there is nothing to clamp to.
        let free = with_criticality(Criticality::CriticalPlus, async { current() }).await;
        assert_eq!(free.map(|c| c.criticality), Some(Criticality::CriticalPlus));
    }

    #[test]
    fn writes_remaining_time_not_the_original_timeout() {
        let t0 = Instant::now();
        let mut c = ctx(Criticality::SheddablePlus);
        c.deadline = Some(t0 + Duration::from_millis(500));
        let now = t0 + Duration::from_millis(120);

        let mut req = http::Request::new(());
        c.write_request(&mut req, now);
        let h = req.headers();
        assert_eq!(h.get(wire::DEADLINE_MS).unwrap(), "380");
        assert_eq!(h.get(wire::CRITICALITY).unwrap(), "SHEDDABLE_PLUS");
        assert_eq!(h.get(wire::CUSTOMER).unwrap(), "acme");
        assert!(
            h.get(wire::ATTEMPT).is_none(),
            "attempt is the retry layer's to set"
        );

        let mut req = http::Request::new(());
        req.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/grpc"),
        );
        req.headers_mut()
            .insert(wire::DEADLINE_MS, http::HeaderValue::from_static("9999"));
        c.write_request(&mut req, now);
        let h = req.headers();
        assert_eq!(
            wire::parse_grpc_timeout(h.get(wire::GRPC_TIMEOUT).unwrap()),
            Ok(Duration::from_millis(380))
        );
        assert!(h.get(wire::DEADLINE_MS).is_none());

        // Past the deadline: zero remains, and the context says so.
        let late = t0 + Duration::from_secs(1);
        assert!(c.is_expired(late));
        assert_eq!(c.remaining(late), Some(Duration::ZERO));
        let mut h = HeaderMap::new();
        c.write_headers(&mut h, late, Protocol::Http);
        assert_eq!(h.get(wire::DEADLINE_MS).unwrap(), "0");
    }

    #[test]
    fn customer_is_replaced_unless_already_the_same() {
        let c = ctx(Criticality::Critical);
        let mut h = HeaderMap::new();
        h.insert(wire::CUSTOMER, http::HeaderValue::from_static("mallory"));
        h.append(wire::CUSTOMER, http::HeaderValue::from_static("eve"));
        c.write_headers(&mut h, Instant::now(), Protocol::Http);
        let all: Vec<_> = h.get_all(wire::CUSTOMER).iter().collect();
        assert_eq!(
            all,
            ["acme"],
            "a different value (and any duplicate) is replaced"
        );
        let mut h = HeaderMap::new();
        h.insert(wire::CUSTOMER, http::HeaderValue::from_static("acme"));
        h.append(wire::CUSTOMER, http::HeaderValue::from_static("eve"));
        c.write_headers(&mut h, Instant::now(), Protocol::Http);
        let all: Vec<_> = h.get_all(wire::CUSTOMER).iter().collect();
        assert_eq!(
            all,
            ["acme"],
            "the same first value with a second: replaced too"
        );
        // The same bytes already there: kept (the very value, not a copy).
        let mine = http::HeaderValue::from_static("acme");
        let mut h = HeaderMap::new();
        h.insert(wire::CUSTOMER, mine.clone());
        c.write_headers(&mut h, Instant::now(), Protocol::Http);
        assert_eq!(h.get_all(wire::CUSTOMER).iter().count(), 1);
        assert_eq!(
            h[wire::CUSTOMER].as_bytes().as_ptr(),
            mine.as_bytes().as_ptr()
        );
    }

    #[tokio::test]
    async fn propagate_uses_the_task_local() {
        let mut req = http::Request::new(());
        assert!(!propagate(&mut req, Instant::now()));
        assert!(req.headers().is_empty());
        let req = scope(ctx(Criticality::Sheddable), async move {
            propagate(&mut req, Instant::now());
            req
        })
        .await;
        assert_eq!(req.headers().get(wire::CRITICALITY).unwrap(), "SHEDDABLE");
    }
}
