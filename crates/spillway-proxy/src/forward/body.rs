//! The request body on its way upstream: buffered for replay on another task when small and
//! the buffer budget has room, else streamed once.

use std::sync::Arc;

use bytes::Bytes;
use http_body::Body;
use http_body_util::BodyExt;

use crate::request_body::UnreadRequestBody;
use crate::state::{BodyBudget, BodyGrant};

/// The request body: buffered (replayable on another task; its share of the buffer budget
/// held as long as it is) or streamed (sent once).
pub(super) enum ReqBody {
    // The grant is only held: dropped with the body, it gives its bytes back.
    Buffered(Bytes, #[allow(dead_code)] Option<BodyGrant>),
    Streamed(Option<UnreadRequestBody>),
}

/// Why a body meant for buffering could not be read.
pub(super) enum ReadError {
    /// The client did not finish sending it in time.
    Timeout,
    /// The stream failed or was longer than announced.
    Broken(String),
}

/// Buffers a body with a known length up to `limit` (within `timeout`: a slow upload must not
/// hold an admission permit forever) when `budget` has room for it; anything else is handed
/// back to be streamed. (A request with no body never gets here: `send::forward` answers that
/// case without building this future.)
pub(super) async fn read_body(
    body: UnreadRequestBody,
    limit: usize,
    budget: &Arc<BodyBudget>,
    timeout: std::time::Duration,
) -> Result<ReqBody, ReadError> {
    let hint = body.size_hint();
    let small = hint.exact().filter(|&n| n <= limit as u64);
    // Reserved before reading: the bytes are in memory as they arrive.
    let Some(grant) = small.and_then(|n| budget.take(n as usize)) else {
        return Ok(ReqBody::Streamed(Some(body)));
    };
    match tokio::time::timeout(timeout, http_body_util::Limited::new(body, limit).collect()).await {
        Ok(Ok(c)) => Ok(ReqBody::Buffered(c.to_bytes(), Some(grant))),
        Ok(Err(e)) => Err(ReadError::Broken(e.to_string())),
        Err(_) => Err(ReadError::Timeout),
    }
}
