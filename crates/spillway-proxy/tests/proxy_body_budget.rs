//! `upstream.retry_buffer_total_bytes`: bodies buffered for retries share one budget across all
//! requests. While one upload holds the whole budget (buffered, its last bytes not sent yet), a
//! second one is streamed to the upstream as it arrives instead of being buffered; the budget
//! comes back when the first is done.

mod proxy_support;

use std::time::Duration;

use proxy_support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// An upstream that reports each request line as soon as its head arrives, then reads the body
/// (by its `content-length`) and answers `200 ok`.
async fn upstream() -> (std::net::SocketAddr, mpsc::UnboundedReceiver<String>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let Some(end) = read_until(&mut s, &mut buf, b"\r\n\r\n").await else {
                        return;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                    buf.drain(..end);
                    let _ = tx.send(head.lines().next().unwrap_or_default().to_string());
                    let n = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    while buf.len() < n {
                        let mut b = [0u8; 4096];
                        match s.read(&mut b).await {
                            Ok(0) | Err(_) => return,
                            Ok(k) => buf.extend_from_slice(&b[..k]),
                        }
                    }
                    buf.drain(..n);
                    let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                    if s.write_all(ok).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, rx)
}

/// Sends a POST of a 100-byte body's head and first 50 bytes; the caller sends the rest.
async fn half_upload(proxy: std::net::SocketAddr, path: &str) -> TcpStream {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\nconnection: close\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&[b'a'; 50]).await.unwrap();
    s
}

async fn finish(mut s: TcpStream) -> String {
    s.write_all(&[b'b'; 50]).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("an answer in time")
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

async fn next(rx: &mut mpsc::UnboundedReceiver<String>) -> String {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("the upstream saw a request in time")
        .expect("upstream running")
}

#[tokio::test]
async fn when_the_budget_is_spent_a_body_is_streamed_instead_of_buffered() {
    let (addr, mut seen) = upstream().await;
    let p = proxy_toml(&format!(
        "[upstream]\naddresses = [\"{addr}\"]\nretry_buffer_bytes = 100\n\
         retry_buffer_total_bytes = 100\n"
    ))
    .await;
    let budget = p.state.body_budget();

    // A: buffered (it fits), so held back from the upstream until its body is whole.
    let a = half_upload(p.addr, "/a").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while budget.in_use() != 100 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "A never took its share"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // B: the budget is spent, so B goes upstream at once, its body following as it comes.
    let b = half_upload(p.addr, "/b").await;
    assert_eq!(next(&mut seen).await, "post /b http/1.1");
    assert!(finish(b).await.ends_with("ok"));
    // A was still held back: nothing of it reached the upstream before B.
    assert!(seen.try_recv().is_err());
    assert_eq!(budget.in_use(), 100);
    assert!(finish(a).await.ends_with("ok"));
    assert_eq!(next(&mut seen).await, "post /a http/1.1");
    // A's share came back once its exchange was over.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while budget.in_use() != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "A's share never came back"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // With room again, a body is buffered as before (held back until whole).
    let c = half_upload(p.addr, "/c").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while budget.in_use() != 100 {
        assert!(tokio::time::Instant::now() < deadline, "C was not buffered");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(finish(c).await.ends_with("ok"));
    assert_eq!(next(&mut seen).await, "post /c http/1.1");
}
