//! ORCA load reports in gRPC's binary form (`endpoint-load-metrics-bin`, protobuf in base64),
//! as a response header or — as gRPC's ORCA libraries send it — a trailer, and a named metric
//! chosen by `signals.orca_metrics` as the task's utilisation.

mod proxy_support;

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use spillway_tower::wire::{format_orca_bin, OrcaLoadReportMessage};
use tokio::net::TcpListener;

use proxy_support::*;
use spillway_proxy::run::Running;

/// A report whose CPU reads low and whose named metric `queue` reads `queue`.
fn report(queue: f64) -> OrcaLoadReportMessage {
    let mut r = OrcaLoadReportMessage {
        cpu_utilization: 0.1,
        ..Default::default()
    };
    r.named_metrics.insert("queue".into(), queue);
    r
}

/// A backend (HTTP/1.1 and h2) answering every request with a binary ORCA report: in the
/// headers, or, for gRPC requests, in the trailers after a one-message body.
async fn reporting_backend(queue: f64) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else { return };
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: Request<hyper::body::Incoming>| async move {
                        let grpc = req
                            .headers()
                            .get("content-type")
                            .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
                        let bin = format_orca_bin(&report(queue));
                        let res = if grpc {
                            let mut trailers = http::HeaderMap::new();
                            trailers.insert("grpc-status", "0".parse().unwrap());
                            trailers.insert("endpoint-load-metrics-bin", bin);
                            // One empty gRPC message: not compressed, length 0.
                            let body = Full::new(Bytes::from_static(&[0, 0, 0, 0, 0]))
                                .with_trailers(async move { Some(Ok(trailers)) });
                            Response::builder()
                                .header("content-type", "application/grpc")
                                .body(body.boxed())
                                .unwrap()
                        } else {
                            Response::builder()
                                .header("endpoint-load-metrics-bin", bin)
                                .body(Full::new(Bytes::from_static(b"ok")).boxed())
                                .unwrap()
                        };
                        Ok::<_, Infallible>(res)
                    },
                );
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    addr
}

fn config(upstream: SocketAddr, protocol: &str) -> String {
    format!(
        r#"
[upstream]
addresses = ["{upstream}"]
protocol = "{protocol}"
[signals]
orca_metrics = ["named_metrics.queue", "mem_utilization"]
"#
    )
}

/// The task's utilisation and the ORCA signal's value, read once the signal's mean has had
/// time to be recomputed.
async fn orca_readings(p: &Running) -> (f64, f64) {
    tokio::time::sleep(spillway_proxy::upstream::orca::REFRESH * 2).await;
    let st = p.state.status();
    let signal = st
        .admission
        .signals
        .iter()
        .find(|(n, _)| n == "upstream_orca")
        .expect("ORCA signal registered")
        .1;
    (st.upstreams[0].orca_utilisation, signal)
}

#[tokio::test]
async fn a_binary_report_in_the_headers_is_read_over_http1_and_h2() {
    for (h2, queue) in [(false, 0.6), (true, 0.45)] {
        let b = reporting_backend(queue).await;
        let p = proxy_toml(&config(b, if h2 { "http2" } else { "http1" })).await;
        let c = if h2 { h2_client() } else { client() };
        let (status, _, body) = get(&c, p.addr, "/", &[]).await;
        assert_eq!(status, 200, "h2={h2}: {body}");
        let (task, signal) = orca_readings(&p).await;
        assert!((task - queue).abs() < 1e-9, "h2={h2}: task {task}");
        assert!((signal - queue).abs() < 1e-9, "h2={h2}: signal {signal}");
    }
}

#[tokio::test]
async fn a_grpc_backends_trailer_report_is_read() {
    let b = reporting_backend(0.8).await;
    let p = proxy_toml(&config(b, "http2")).await;
    let (mut send, conn) = h2_connection(p.addr).await;
    let conn = tokio::spawn(conn);
    let req = Request::post(format!("http://{}/pkg.Svc/Call", p.addr))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(http_body_util::Empty::new())
        .unwrap();
    let res = send.send_request(req).await.unwrap();
    assert_eq!(res.status(), 200);
    let collected = res.into_body().collect().await.unwrap();
    let trailers = collected.trailers().cloned().expect("trailers passed on");
    assert_eq!(trailers.get("grpc-status").unwrap(), "0");
    // The report is passed on to the client as well as read.
    assert!(trailers.contains_key("endpoint-load-metrics-bin"));
    conn.abort();
    let (task, signal) = orca_readings(&p).await;
    assert!((task - 0.8).abs() < 1e-9, "task {task}");
    assert!((signal - 0.8).abs() < 1e-9, "signal {signal}");
}

#[tokio::test]
async fn without_a_chosen_metric_the_default_rule_reads_cpu() {
    let b = reporting_backend(0.6).await;
    let p = proxy_toml(&format!("[upstream]\naddresses = [\"{b}\"]\n")).await;
    let (status, _, _) = get(&client(), p.addr, "/", &[]).await;
    assert_eq!(status, 200);
    let (task, _) = orca_readings(&p).await;
    // No application_utilization in the report: cpu_utilization (0.1), not the named metric.
    assert!((task - 0.1).abs() < 1e-9, "task {task}");
}
