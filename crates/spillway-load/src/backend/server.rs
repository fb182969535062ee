//! The backend's HTTP side: accept loop, health and stats endpoints, and the handler that puts
//! a request on the queue and waits for a worker's answer.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use spillway_tower::wire;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

use super::{CpuMode, Job, Shared};

/// What `cost=` accepts.
const COST_ACCEPTS: &str =
    "cost must be a number in (0, 1000] (a service-time multiplier, default 1)";

pub(crate) async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stopped.changed() => return,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            // Out of file descriptors or a connection reset during accept: back off a little
            // instead of spinning, and keep serving.
            Err(_) => {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let shared = Arc::clone(&shared);
        let mut stopped = stopped.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let shared = Arc::clone(&shared);
                async move { Ok::<_, Infallible>(handle(req, &shared).await) }
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = conn => {}
                _ = stopped.changed() => {}
            }
        });
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r
}

/// Parses the `cost` query parameter: `Ok(1.0)` when absent.
pub(crate) fn parse_cost(query: Option<&str>) -> Result<f64, ()> {
    let Some(q) = query else { return Ok(1.0) };
    for pair in q.split('&') {
        if let Some(v) = pair.strip_prefix("cost=") {
            return match v.parse::<f64>() {
                Ok(c) if c.is_finite() && c > 0.0 && c <= 1000.0 => Ok(c),
                _ => Err(()),
            };
        }
    }
    Ok(1.0)
}

/// The most of a request body the backend reads (and discards) before it gives up on the
/// connection. It reads what it is sent, as a real service does: dropped unread, the body's
/// rest made hyper close the connection, and the kernel's reset could destroy the answer
/// before the caller read it (2.4% of 256 KB POSTs came back 502 through `spillway proxy`).
const DRAIN_LIMIT: usize = 64 << 20;

async fn handle(req: Request<Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
    match req.uri().path() {
        "/healthz" => return text(StatusCode::OK, "ok\n"),
        "/stats" => {
            let body = serde_json::to_vec(&shared.stats()).unwrap_or_default();
            let mut r = Response::new(Full::new(Bytes::from(body)));
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            return r;
        }
        _ => {}
    }
    let Ok(cost) = parse_cost(req.uri().query()) else {
        return text(StatusCode::BAD_REQUEST, COST_ACCEPTS);
    };
    spillway_tower::server::drain(req.into_body(), DRAIN_LIMIT).await;
    let (reply, answer) = oneshot::channel();
    shared.queued.fetch_add(1, Ordering::Relaxed);
    let job = Job {
        enqueued: Instant::now(),
        cost,
        reply,
    };
    if shared.queue.send(job).is_err() {
        shared.queued.fetch_sub(1, Ordering::Relaxed);
        return text(StatusCode::SERVICE_UNAVAILABLE, "backend stopped\n");
    }
    shared.accepted.fetch_add(1, Ordering::Relaxed);
    // If the caller disconnects, hyper drops this future and `answer` with it; the job stays
    // queued and is served anyway — the pathology this backend models.
    let Ok(served) = answer.await else {
        return text(StatusCode::SERVICE_UNAVAILABLE, "backend stopped\n");
    };
    let mut r = text(StatusCode::OK, "ok\n");
    let h = r.headers_mut();
    h.insert(wire::QUEUE_MS, wire::format_millis(served.queue));
    h.insert(wire::SERVICE_MS, wire::format_millis(served.service));
    h.insert(wire::COST, wire::format_cost(served.service.as_secs_f64()));
    let orca = wire::OrcaReport {
        application_utilization: Some(served.utilisation),
        cpu_utilization: (shared.cfg.cpu == CpuMode::Spin).then_some(served.utilisation),
        rps_fractional: Some(served.rps),
        ..wire::OrcaReport::default()
    };
    h.insert(wire::ENDPOINT_LOAD_METRICS, wire::format_orca(&orca));
    r
}

#[cfg(test)]
mod tests {
    use super::parse_cost;

    #[test]
    fn cost_parameter() {
        assert_eq!(parse_cost(None), Ok(1.0));
        assert_eq!(parse_cost(Some("a=1")), Ok(1.0));
        assert_eq!(parse_cost(Some("a=1&cost=2.5")), Ok(2.5));
        for bad in [
            "cost=0",
            "cost=-1",
            "cost=x",
            "cost=1001",
            "cost=NaN",
            "cost=inf",
        ] {
            assert_eq!(parse_cost(Some(bad)), Err(()), "{bad}");
        }
    }
}
