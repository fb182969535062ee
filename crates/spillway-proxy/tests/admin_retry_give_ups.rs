//! `spillway_proxy_retry_give_ups_total` counts the proxy's real give-ups by gate: with a
//! retry budget of zero and two tasks that both refuse for overload, every request is refused
//! once, not retried, answered with the don't-retry marker, and counted at the `budget` gate —
//! the series the `SpillwayRetryBudgetExhausted` alert watches.

mod admin_support;

use std::convert::Infallible;

use admin_support::{sample, stack};
use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use spillway_proxy::admin::AdminConfig;
use tokio::net::TcpListener;

/// A loopback upstream that refuses every request with 503 (an overload refusal without a
/// don't-retry marker, so the proxy would retry it elsewhere if its gates allowed).
async fn refusing_upstream() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let svc = service_fn(|_req| async {
                    let mut r = Response::new(Full::new(Bytes::from_static(b"busy")));
                    *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                    Ok::<_, Infallible>(r)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (addr, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_retry_budget_is_counted_at_its_gate() {
    let (a, ta) = refusing_upstream().await;
    let (b, tb) = refusing_upstream().await;
    // No budget at all; widespread overload never declared (it needs 64 distinct tasks), so
    // the budget is the gate that stops every retry. Ejection off: both tasks stay in play.
    let toml = format!(
        r#"
[upstream]
addresses = ["{a}", "{b}"]
[upstream.ejection]
consecutive_failures = 0
[upstream.retry]
budget_ratio = 0.0
min_retries_per_sec = 0.0
widespread_ring = 64
widespread_min_tasks = 64

[[routes]]
name = "api"
path = "/"
"#
    );
    let s = stack(&toml, AdminConfig::default()).await;
    let budget = |text: &str| {
        sample(
            text,
            "spillway_proxy_retry_give_ups_total",
            &[("reason", "budget")],
        )
    };
    let before = budget(&s.admin_get("/metrics").await.text).expect("registered at 0");
    for i in 0..5 {
        let r = s.get_proxy(&format!("/api/{i}"), &[]).await;
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.text);
        assert_eq!(r.headers["x-spillway-dont-retry"], "1", "{:?}", r.headers);
    }
    let text = s.admin_get("/metrics").await.text;
    assert_eq!(budget(&text), Some(before + 5.0), "{text}");
    for other in ["widespread", "attempt_limit"] {
        assert_eq!(
            sample(
                &text,
                "spillway_proxy_retry_give_ups_total",
                &[("reason", other)]
            ),
            Some(0.0),
            "{text}"
        );
    }
    s.shutdown().await;
    ta.abort();
    tb.abort();
}
