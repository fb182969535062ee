//! Which adaptive limit the zero-config proxy should use: a loopback experiment.
//!
//! A backend with 4 workers and 50 ms of work per request (capacity 80 req/s; latency grows
//! smoothly with the queue in front of the workers) is driven by 64 closed-loop clients through
//! the proxy, once with spillway-core's default (Gradient2) and once with the proxy's default
//! (Envoy gradient). It prints the learned limit, goodput and latency of served requests
//! (`SPILLWAY_TRACE=1` prints the limit every 0.5 s). Work is slow and CPU-light on purpose: on
//! a 2-core shared machine a CPU-bound backend makes every latency, minRTT included, measure
//! the CPU queue instead of the backend.
//! Ignored by default (timing on a shared machine); run with
//! `cargo test -p spillway-proxy --test proxy_default_limit -- --ignored --nocapture`.

mod proxy_support;

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use proxy_support::*;
use spillway_core::limit::LimitConfig;
use spillway_proxy::ProxyConfig;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

async fn workers_backend(workers: usize, work: Duration) -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let sem = Arc::new(Semaphore::new(workers));
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else { return };
            let sem = Arc::clone(&sem);
            tokio::spawn(async move {
                let svc = service_fn(move |_r: hyper::Request<Incoming>| {
                    let sem = Arc::clone(&sem);
                    async move {
                        let _w = sem.acquire().await;
                        tokio::time::sleep(work).await;
                        Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(
                            b"ok",
                        ))))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    addr
}

struct Outcome {
    limit: usize,
    served: u64,
    shed: u64,
    p50_ms: f64,
    p99_ms: f64,
}

async fn drive(limit: LimitConfig, up: std::net::SocketAddr) -> Outcome {
    let mut cfg = ProxyConfig::default();
    cfg.upstream.addresses = vec![up.to_string()];
    cfg.admission.limit = limit;
    let p = proxy(cfg).await;
    let c = client();
    let stop = Instant::now() + Duration::from_secs(6);
    let (served, shed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (c, addr, served, shed) = (c.clone(), p.addr, served.clone(), shed.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            while Instant::now() < stop {
                let t = Instant::now();
                let (s, _, _) = get(&c, addr, "/", &[]).await;
                if s == 200 {
                    served.fetch_add(1, Ordering::Relaxed);
                    // Only the last 3 s: after the limit has had time to settle.
                    if stop.saturating_duration_since(t) < Duration::from_secs(3) {
                        lat.push(t.elapsed().as_secs_f64() * 1e3);
                    }
                } else {
                    shed.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            lat
        }));
    }
    let st = Arc::clone(&p.state);
    let mon = tokio::spawn(async move {
        while Instant::now() < stop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let a = st.status().admission;
            if std::env::var_os("SPILLWAY_TRACE").is_some() {
                println!(
                    "  limit {:4} in_flight {:3} queued {:3} util {:.2} service {:?}",
                    a.limit, a.in_flight, a.queued, a.utilisation, a.expected_service_time
                );
            }
        }
    });
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.unwrap());
    }
    let _ = mon.await;
    lat.sort_by(|a, b| a.total_cmp(b));
    let q = |f: f64| {
        lat.get(((lat.len() as f64 * f) as usize).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    };
    let limit = p.state.status().admission.limit;
    p.shutdown().await;
    Outcome {
        limit,
        served: served.load(Ordering::Relaxed),
        shed: shed.load(Ordering::Relaxed),
        p50_ms: q(0.5),
        p99_ms: q(0.99),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn envoy_gradient_protects_where_gradient2_drifts() {
    let up = workers_backend(4, Duration::from_millis(50)).await;
    let g2 = drive(LimitConfig::default(), up).await;
    let envoy = drive(spillway_proxy::config::default_admission().limit, up).await;
    for (name, o) in [
        ("gradient2 (core default)", &g2),
        ("envoy gradient (proxy default)", &envoy),
    ] {
        println!(
            "{name:32} limit {:4}  served {:6}  shed {:6}  served latency p50 {:6.1} ms  p99 {:6.1} ms",
            o.limit, o.served, o.shed, o.p50_ms, o.p99_ms
        );
    }
    assert!(
        envoy.limit < g2.limit,
        "envoy {} vs gradient2 {}",
        envoy.limit,
        g2.limit
    );
    assert!(envoy.p99_ms < g2.p99_ms);
}
