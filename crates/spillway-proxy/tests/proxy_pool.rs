//! Connections are load too: reuse, a bounded pool per task, idle connections closed.

mod proxy_support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use proxy_support::*;

#[tokio::test]
async fn many_client_connections_share_few_upstream_connections() {
    let b = backend("b").await;
    let p = proxy_toml(&format!(
        "[upstream]\naddresses = [\"{}\"]\nmax_requests_per_task = 2\npool_wait_timeout_ms = 5000\n[admission.limit]\nalgorithm = \"fixed\"\nlimit = 100\n",
        b.addr
    ))
    .await;
    // 6 clients, each on its own connection, all slow at once: the upstream sees at most 2.
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let addr = p.addr;
        tasks.push(tokio::spawn(async move {
            get(&client(), addr, "/slow", &[]).await.0
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    assert_eq!(b.max_active.load(Ordering::SeqCst), 2);
    assert!(
        b.accepted.load(Ordering::SeqCst) <= 2,
        "{}",
        b.accepted.load(Ordering::SeqCst)
    );
    // Sequential requests from new client connections reuse the pooled upstream connections.
    let before = b.accepted.load(Ordering::SeqCst);
    for _ in 0..20 {
        assert_eq!(get(&client(), p.addr, "/", &[]).await.0, 200);
    }
    assert_eq!(b.accepted.load(Ordering::SeqCst), before);
}

#[tokio::test]
async fn idle_upstream_connections_are_closed() {
    let b = backend("b").await;
    let p = proxy_toml(&format!(
        "[upstream]\naddresses = [\"{}\"]\nidle_timeout_ms = 100\n",
        b.addr
    ))
    .await;
    let c = client();
    assert_eq!(get(&c, p.addr, "/", &[]).await.0, 200);
    assert_eq!(get(&c, p.addr, "/", &[]).await.0, 200);
    assert_eq!(b.accepted.load(Ordering::SeqCst), 1, "reused while fresh");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(get(&c, p.addr, "/", &[]).await.0, 200);
    assert_eq!(
        b.accepted.load(Ordering::SeqCst),
        2,
        "the idle one was closed"
    );
}
