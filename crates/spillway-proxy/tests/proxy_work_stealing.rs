//! The benchmark switch `SPILLWAY_PROXY_WORK_STEALING=1` (its own test binary: it sets a
//! process-wide environment variable) serves the data plane on one tokio work-stealing runtime,
//! the layout before thread-per-core, for side-by-side comparison.

mod proxy_support;

use proxy_support::backend;
use spillway_proxy::run::{start_threads, WORK_STEALING_ENV};
use spillway_proxy::ProxyState;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_work_stealing_switch_serves_and_stops() {
    let b = backend("b").await;
    std::env::set_var(WORK_STEALING_ENV, "1");
    let mut cfg = spillway_proxy::config::parse(
        &format!(
            "[upstream]\naddresses = [\"{}\"]\n[listen]\nthreads = 2\n",
            b.addr
        ),
        "test.toml",
    )
    .unwrap();
    cfg.admin.enabled = false;
    cfg.listen.address = "127.0.0.1:0".parse().unwrap();
    let state = ProxyState::new(cfg, "test", None).unwrap();
    let dp = tokio::task::spawn_blocking(move || start_threads(&state))
        .await
        .unwrap()
        .unwrap();
    assert!(dp.layout.contains("work-stealing"), "{}", dp.layout);
    assert_eq!(dp.threads(), 0);
    let addr = dp.addr;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /ws HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(out.contains("b GET /ws"), "{out}");
    tokio::task::spawn_blocking(move || dp.shutdown())
        .await
        .unwrap();
    assert!(TcpStream::connect(addr).await.is_err());
}
