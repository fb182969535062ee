//! A client that uploads while it reads the answer, over a raw loopback socket: the shape of
//! a refused (or otherwise unread) upload. Shared by this crate's server tests and
//! `spillway-proxy`'s refusal tests (included there by `#[path]`), so the two check the same
//! thing the same way.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The `content-length` of a response head.
pub fn content_length(head: &str) -> usize {
    head.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .expect("a content-length")
}

/// Sends a 512 KiB POST of `criticality` to `addr` in 16 KiB pieces while reading the answer,
/// which comes before the upload ends; checks the upload is taken whole (no reset) and reads
/// the answer's body. Returns the answer's head and the connection, ready for another request.
pub async fn answered_during_upload(addr: SocketAddr, criticality: &str) -> (String, TcpStream) {
    const LEN: usize = 512 << 10;
    let s = TcpStream::connect(addr).await.unwrap();
    let (mut rd, mut wr) = s.into_split();
    let head = format!(
        "POST /up HTTP/1.1\r\nhost: x\r\nx-spillway-criticality: {criticality}\r\n\
         content-length: {LEN}\r\n\r\n"
    );
    wr.write_all(head.as_bytes()).await.unwrap();
    // The answer does not wait for the upload, and the upload is not cut short by a reset.
    let upload = tokio::spawn(async move {
        let piece = vec![b'x'; 16 << 10];
        for _ in 0..LEN / piece.len() {
            wr.write_all(&piece).await?;
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        Ok::<_, std::io::Error>(wr)
    });
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        if let Some(at) = answer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = rd.read(&mut buf).await.expect("the answer, not a reset");
        assert!(n > 0, "the connection closed before the answer");
        answer.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&answer[..end]).into_owned();
    let wr = upload
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("the whole upload was taken, no reset ({e}); answer: {head}"));
    let mut s = rd.reunite(wr).unwrap();
    // The rest of the answer's body.
    let mut rest = vec![0u8; content_length(&head).saturating_sub(answer.len() - end)];
    s.read_exact(&mut rest).await.expect("the answer's body");
    (head, s)
}
