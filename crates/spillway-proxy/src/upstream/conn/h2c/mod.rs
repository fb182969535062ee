//! Whether an upstream task speaks HTTP/2 in cleartext with prior knowledge (h2c), asked once
//! per task before `upstream.protocol = "auto"` sends it an HTTP/2 client's request.
//!
//! Why ask: `auto` forwards an HTTP/2 client's requests over HTTP/2, and most services that speak
//! only HTTP/1.1 answer the HTTP/2 preface with a 400 or a closed connection — every request of
//! an HTTP/2 client (a browser behind TLS, `curl --http2-prior-knowledge`) was a 502 in front
//! of them. Asking on a connection of its own, before any request goes, costs one connection
//! per task and process, and nothing is ever sent twice; a task that does not answer as an
//! HTTP/2 server gets HTTP/1.1. (gRPC needs HTTP/2 end to end and is never asked about.)
//!
//! How: the client connection preface (RFC 9113 §3.4) — the magic and an empty SETTINGS frame.
//! An HTTP/2 server's first frame must be a SETTINGS frame (type 0x4, the fourth byte of the
//! 9-byte frame header); an HTTP/1.1 status line, a close or a reset is a definite no, cached
//! for good. No answer within the connect timeout is taken for a no for [`RETRY_AFTER`]
//! (a server slow under load is not written off), then asked again; a connection that cannot
//! be made is no answer at all (the request's own connect fails the usual way).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[cfg(test)]
mod tests;

/// The HTTP/2 client connection preface and an empty SETTINGS frame.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// How long a no for want of an answer lasts before the task is asked again.
pub(super) const RETRY_AFTER: Duration = Duration::from_secs(30);

/// What a task was found to speak. Stored per task in one word: [`UNKNOWN`], [`YES`], [`NO`],
/// or `(until_ms << 2) | NO_UNTIL` — a no for want of an answer, until `until_ms` (milliseconds
/// since the pool's origin).
const UNKNOWN: u64 = 0;
const YES: u64 = 1;
const NO: u64 = 2;
const NO_UNTIL: u64 = 3;

/// Each task's answer so far.
#[derive(Debug)]
pub(super) struct H2cSupport {
    tasks: Box<[AtomicU64]>,
}

/// A probe's finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Answer {
    /// The server sent an HTTP/2 SETTINGS frame first.
    Yes,
    /// It answered something else, or closed.
    No,
    /// Nothing within the wait.
    Silent,
}

impl H2cSupport {
    pub(super) fn new(tasks: usize) -> Self {
        H2cSupport {
            tasks: (0..tasks).map(|_| AtomicU64::new(UNKNOWN)).collect(),
        }
    }

    /// What is known of `task` now (`now_ms` is read only for a no for want of an answer):
    /// `None` if it must be asked.
    pub(super) fn known(&self, task: usize, now_ms: impl FnOnce() -> u64) -> Option<bool> {
        let w = self.tasks.get(task)?.load(Ordering::Relaxed);
        match w & 3 {
            YES => Some(true),
            NO => Some(false),
            NO_UNTIL if now_ms() < w >> 2 => Some(false),
            _ => None,
        }
    }

    /// Records `answer` for `task`, found at `now_ms`; returns whether it speaks h2c.
    pub(super) fn record(&self, task: usize, answer: Answer, now_ms: u64) -> bool {
        let w = match answer {
            Answer::Yes => YES,
            Answer::No => NO,
            Answer::Silent => {
                let until = now_ms.saturating_add(RETRY_AFTER.as_millis() as u64);
                (until.min(u64::MAX >> 2) << 2) | NO_UNTIL
            }
        };
        if let Some(t) = self.tasks.get(task) {
            t.store(w, Ordering::Relaxed);
        }
        answer == Answer::Yes
    }
}

/// Sends the preface on `stream` and reads the first frame header back, for at most `wait`.
pub(super) async fn probe(mut stream: TcpStream, wait: Duration) -> Answer {
    let ask = async {
        if stream.write_all(PREFACE).await.is_err() {
            return Answer::No;
        }
        let mut head = [0u8; 9];
        match stream.read_exact(&mut head).await {
            Ok(_) if head[3] == 0x04 => Answer::Yes,
            _ => Answer::No,
        }
    };
    tokio::time::timeout(wait, ask)
        .await
        .unwrap_or(Answer::Silent)
}
