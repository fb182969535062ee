//! A request body the proxy answers without forwarding (a refusal, a bad header, a static
//! degraded response): read and discarded behind the answer, within bounds.
//!
//! Why: a body dropped unread costs the client its connection and can cost it the answer
//! ([`spillway_tower::server::drain`] says how); a client that sees "connection reset" instead
//! of a 503 with `Retry-After` retries at once, the opposite of what a refusal asks under
//! overload. Reading the rest behind the answer keeps both. Bounded, because a refusal must
//! stay cheap: at most [`LIMIT`] bytes within [`WITHIN`]; past either the body is dropped and
//! the connection closes as before.

use std::time::Duration;

use hyper::body::Incoming;

/// The most of an unforwarded body read before giving the connection up.
const LIMIT: usize = 1 << 20;
/// How long an unforwarded body is read before giving the connection up (nginx's
/// `lingering_timeout` default).
const WITHIN: Duration = Duration::from_secs(5);

/// Owns a request body until it is forwarded ([`take`](Self::take)); dropped with the body
/// unread, it reads the rest in a task of its own.
pub(super) struct Unread(Option<Incoming>);

impl Unread {
    pub(super) fn new(body: Incoming) -> Self {
        Unread(Some(body))
    }

    /// The body, to forward.
    pub(super) fn take(mut self) -> Incoming {
        self.0.take().expect("an Unread holds its body until taken")
    }
}

impl Drop for Unread {
    fn drop(&mut self) {
        let Some(body) = self.0.take() else { return };
        if http_body::Body::is_end_stream(&body) {
            return;
        }
        // Outside a runtime (never on the data plane) the body is just dropped.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let drain = spillway_tower::server::drain(body, LIMIT);
                let _ = tokio::time::timeout(WITHIN, drain).await;
            });
        }
    }
}
