//! One request's path through the proxy: its path made normal and look-alike header fields
//! dropped → classify → incident controls → degrade → admit → forward (balance, throttle,
//! retry) → hold the permit until the response body ends.
//!
//! Why this order (SRE book ch. 21; the whole path, file by file, is in docs/architecture.md):
//! classification decides everything after it; the operator's incident levers come before any
//! work; a degraded static answer is cheaper than admission; admission (spillway-core's
//! controller: quota, shed, limit, queue) happens before the body is read, so a refused request
//! costs no body buffering; the permit is held until the response body ends, so a streamed
//! response counts as in flight for as long as it really occupies the upstream — and an upgraded
//! tunnel until both its directions close.

mod abandoned;
mod attempt;
mod body;
mod gate;
mod headers;
mod host;
mod retry;
mod send;
mod underscores;
mod verdict;

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use http::{Request, Response};
use hyper::body::Incoming;
use spillway_tower::metrics as tower_metrics;
use spillway_tower::wire::Protocol;

use crate::access::Decision;
use crate::body::ResponseBody;
use crate::metrics::Fault;
use crate::request_body::UnreadRequestBody;
use crate::respond;
use crate::state::ThreadSnapshot;

use crate::http1::strip_hop_by_hop;
use headers::is_upgrade;
pub use headers::Peer;

/// Handles one client request with `cur`, its thread's snapshot of the state
/// (`ProxyState::current`). Never fails: every outcome is a response; the `Result` is the
/// one hyper's service returns, so the listener hands this future over as it is instead of
/// wrapping it in another (each wrapping level copies the whole future once more per request).
///
/// `client_upgrade` is the client connection's side of an upgrade the request asks for
/// ([`upgrade_of`]); the body is read behind the answer if it is not forwarded, or not to its
/// end (a refusal keeps the client's connection).
#[allow(clippy::manual_async_fn)] // on purpose: see the body's first comment
pub fn handle(
    cur: Arc<ThreadSnapshot>,
    mut peer: Option<Peer>,
    mut parts: http::request::Parts,
    body: UnreadRequestBody,
    client_upgrade: Option<hyper::upgrade::OnUpgrade>,
) -> impl Future<Output = Result<Response<ResponseBody>, Infallible>> {
    // An `async` block that takes its arguments where they stand, not an `async fn`, which moves
    // them once more into its body's locals when first polled (`upstream::Connections::send`);
    // the request's parts and body come apart for the same reason (a `Request` taken apart
    // here would be copied into the future's locals).
    async move {
        let now = Instant::now();
        // Held until the response body ends when forwarded, else until the answer is returned.
        let busy = peer.as_mut().and_then(|p| p.busy.take());
        let (state, rt) = (&cur.state, &cur.rt);
        let protocol = Protocol::of(&parts.headers);
        // What the access log needs after the answer is made (`crate::access`): set on the way,
        // read only when the log is on.
        let mut seen = None;
        let mut granted: Option<(Instant, std::time::Duration)> = None;
        // Held until the answer's head is made (`in_progress`).
        let holding = state.in_progress.begin();
        let (res, decision) = 'answer: {
            if holding.is_none() {
                break 'answer in_progress_full(state, protocol);
            }
            // Matched where it is made: a named `Result` would keep its storage in the future
            // across the awaits below (as would any moved-from local).
            let (class, labels, degraded_path) =
                match gate::pre_admit(&cur, &mut parts, peer.as_ref(), protocol, now, &mut seen) {
                    Ok(passed) => passed,
                    Err(answered) => break 'answer answered,
                };
            let permit = match gate::admit(rt, state, class, &labels, protocol, now).await {
                Ok(p) => p,
                Err(answered) => break 'answer answered,
            };
            tower_metrics::admitted(&labels, permit.queue_time());
            granted = Some((permit.started_at(), permit.queue_time()));

            strip_hop_by_hop(&mut parts.headers, client_upgrade.is_some());
            let added = gate::forwarded_headers(
                rt,
                &mut parts,
                class,
                peer.as_ref(),
                &permit,
                protocol,
                degraded_path,
            );
            let fw = send::Forward {
                state,
                rt,
                parts: &mut parts,
                added,
                protocol,
                class,
                labels,
                busy,
                raw_fields: peer.as_ref().is_some_and(|p| p.raw_fields),
            };
            // Named without cost: it lives on inside `send::forward`'s future.
            let (res, upstream_upgrade) = send::forward(fw, body, permit).await;
            // Without the client's side (it did not ask to upgrade) the hold is dropped here, which
            // releases the permit at once.
            if let (Some(on_client), Some(up)) = (client_upgrade, upstream_upgrade) {
                tokio::spawn(tunnel(on_client, up));
            }
            (res, Decision::Admitted)
        };
        drop(holding);
        if let Some(log) = rt.access.as_ref().filter(|log| log.sampled()) {
            access(log, &res, decision, seen.as_ref(), granted);
        }
        Ok(res)
    }
}

/// Writes `res`'s access log line (`crate::access`); only called when the log is on and the
/// request is in the sample.
fn access(
    log: &crate::access::AccessLog,
    res: &Response<ResponseBody>,
    decision: Decision,
    class: Option<&crate::route::Classified>,
    granted: Option<(Instant, std::time::Duration)>,
) {
    let reason = res
        .headers()
        .get(spillway_tower::server::reject::REASON)
        .and_then(|v| v.to_str().ok());
    log.record(&crate::access::Entry {
        time: std::time::SystemTime::now(),
        route: class.and_then(|c| c.route.as_ref()).map(|r| &*r.name),
        criticality: class.map(|c| c.criticality),
        customer: class.map(|c| &*c.customer),
        decision,
        reason,
        queue: granted.map(|g| g.1),
        upstream: granted.map(|g| g.0.elapsed()),
        status: res.status().as_u16(),
        attempt: class.map(|c| c.attempt),
    });
}

/// The answer while `listen.max_requests_in_progress` requests are held (`in_progress`).
fn in_progress_full(state: &crate::state::ProxyState, protocol: Protocol) -> gate::Answered {
    state.faults.count(Fault::RequestsInProgress);
    let res = respond::unavailable(
        protocol,
        "requests_in_progress",
        "this proxy holds listen.max_requests_in_progress requests: send to another task or \
         later"
            .into(),
    );
    (res, Decision::Refused)
}

/// A request from hyper's server made ready for [`handle`]: its body guarded ([`UnreadRequestBody`]) and,
/// when it asks to upgrade the connection, the client's side of the upgrade taken.
pub fn upgrade_of(
    mut req: Request<Incoming>,
) -> (
    Request<UnreadRequestBody>,
    Option<hyper::upgrade::OnUpgrade>,
) {
    let upgrade = is_upgrade(&req).then(|| hyper::upgrade::on(&mut req));
    let version = req.version();
    (req.map(|b| UnreadRequestBody::new(b, version)), upgrade)
}

/// Copies bytes both ways until both directions have closed (or either fails), holding the
/// admission permit, the task's in-flight count and its slot until then (`send::Upgrade`).
async fn tunnel(client: hyper::upgrade::OnUpgrade, up: send::Upgrade) {
    let send::Upgrade { upstream, hold } = up;
    let (Ok(c), Ok(u)) = (client.await, upstream.await) else {
        return;
    };
    let mut c = hyper_util::rt::TokioIo::new(c);
    let mut u = hyper_util::rt::TokioIo::new(u);
    let _ = tokio::io::copy_bidirectional(&mut c, &mut u).await;
    drop(hold);
}

#[cfg(test)]
mod tests {
    /// The size of the future `f` returns, without calling it.
    fn future_size<A, B, C, D, E, F: std::future::Future>(_: impl Fn(A, B, C, D, E) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// A request's future is built, then moved into hyper's slot for it, and its inner
    /// futures into it: each move copies the whole size, per request (memmove was 3% of the
    /// proxy's CPU with this future at 5,472 bytes; perf, bench/results/proxy-forwarding.md
    /// "Fourth round"). The upstream connect path, which runs once per connection, is boxed
    /// (4,400 bytes with it); this fails if a rarely taken path makes the common one large
    /// again, or a value is bound to a name whose scope spans an await: its storage stays in the
    /// future even once moved (a named `Result<Request, _>` in `attempt` cost 464 bytes).
    #[test]
    fn the_per_request_future_stays_small() {
        let handle = future_size(super::handle);
        eprintln!("handle future: {handle} bytes");
        assert!(
            handle <= 2_700,
            "handle's future is {handle} bytes (was 5,472 before)"
        );
    }

    /// The body types move with every response and every request sent upstream several times
    /// per request; past 256 bytes glibc's memmove takes its slower path for each move
    /// (cachegrind: +250 instructions per request at 264 bytes; bench/results/proxy-forwarding.md,
    /// sixth round).
    #[test]
    fn the_body_types_stay_within_256_bytes() {
        let size = std::mem::size_of::<crate::body::ResponseBody>();
        eprintln!("ResponseBody: {size} bytes");
        assert!(size <= 256, "ResponseBody is {size} bytes");
        let size = std::mem::size_of::<crate::request_body::RequestBody>();
        eprintln!("RequestBody: {size} bytes");
        assert!(size <= 256, "RequestBody is {size} bytes");
    }
}
