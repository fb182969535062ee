//! [`RetryLayer`]: configuration of the retry middleware.

use std::sync::Arc;
use std::time::Duration;

use spillway_core::clock::{Clock, SystemClock};
use spillway_core::retry::{RetryConfig, RetryPolicy};
use spillway_core::ConfigError;
use tower_layer::Layer;

use super::error::GiveUpReason;
use super::service::Retry;
use crate::wire::metric as m;

/// Default largest request body buffered for replay: 64 KiB. Big enough for typical RPC and
/// JSON requests; larger uploads are streamed through once and never retried.
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024;
/// Default base of the exponential backoff between attempts (full jitter, as in the AWS
/// Architecture Blog "Exponential Backoff and Jitter": sleep = uniform(0, min(max, base·2^n))).
pub const DEFAULT_BACKOFF_BASE: Duration = Duration::from_millis(25);
/// Default ceiling of one wait between attempts, also the most a server's pushback
/// (`Retry-After`, `grpc-retry-pushback-ms`) is honoured for: a longer ask is obeyed by not
/// waiting in this request at all — it gives up (the deadline gate) if the wait would pass the
/// deadline, else waits this ceiling.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Which retry discipline the layer applies.
#[derive(Debug, Clone)]
pub enum RetryMode {
    /// Spillway's: the core's gates (attempt limit counting attempts carried in, 10 % budget,
    /// don't-retry marker, widespread overload), and a give-up on overload returned as
    /// [`crate::wire::OverloadGiveUp`] so the layer above does not retry again.
    Gated(Arc<RetryPolicy>),
    /// The naive discipline the SRE book warns about, for comparison tests only: up to
    /// `max_attempts` attempts per call on every overload refusal or connection error, no budget,
    /// markers ignored, and the last refusal returned unchanged.
    Naive {
        /// Attempts per call, the first included.
        max_attempts: u32,
    },
}

/// Pre-registered counters (no label allocation per request).
pub(crate) struct Metrics {
    /// `spillway_requests_retried_total{reason="overload"|"connection", decision="retried"}`.
    pub(crate) retried_overload: metrics::Counter,
    pub(crate) retried_connection: metrics::Counter,
    /// `spillway_requests_retried_total{reason=<gate>, decision="gave_up"}`, by `GiveUpReason::index`.
    pub(crate) gave_up: [metrics::Counter; 9],
}

impl Metrics {
    fn new() -> Self {
        let retried = |reason: &'static str| metrics::counter!(m::RETRIED, m::L_REASON => reason, "decision" => "retried");
        Metrics {
            retried_overload: retried("overload"),
            retried_connection: retried("connection"),
            gave_up: GiveUpReason::ALL.map(|r| {
                metrics::counter!(m::RETRIED, m::L_REASON => r.as_str(), "decision" => "gave_up")
            }),
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub(crate) max_body_bytes: usize,
    pub(crate) buffer_unknown_length: bool,
    pub(crate) backoff_base: Duration,
    pub(crate) backoff_max: Duration,
    pub(crate) count_incoming_attempts: bool,
}

/// Retries failed calls — only replayable requests, only on overload refusals (HTTP 503/429,
/// gRPC `UNAVAILABLE`/`RESOURCE_EXHAUSTED`) or connection errors, never past the deadline of the
/// request being served — and sets the attempt header (`x-spillway-attempt` or
/// `grpc-previous-rpc-attempts`) on each attempt.
///
/// Services built from one layer share its policy (and so its budget): one layer per client.
#[derive(Clone)]
pub struct RetryLayer {
    pub(crate) mode: RetryMode,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) settings: Settings,
    pub(crate) metrics: Arc<Metrics>,
}

impl std::fmt::Debug for RetryLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetryLayer")
            .field("mode", &self.mode)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl RetryLayer {
    /// Spillway's gated retries with `cfg`, on the system clock.
    pub fn new(cfg: RetryConfig) -> Result<Self, ConfigError> {
        Self::with_clock(cfg, Arc::new(SystemClock))
    }

    /// As [`RetryLayer::new`] with an injected clock for the policy's windows and the deadline
    /// check (backoff sleeps still use tokio's timer).
    pub fn with_clock(cfg: RetryConfig, clock: Arc<dyn Clock>) -> Result<Self, ConfigError> {
        let policy = RetryPolicy::new(cfg, clock.now())?;
        Ok(Self::build(RetryMode::Gated(Arc::new(policy)), clock))
    }

    /// Naive retries (see [`RetryMode::Naive`]); `max_attempts` in `1..=100`.
    pub fn naive(max_attempts: u32) -> Result<Self, ConfigError> {
        if !(1..=100).contains(&max_attempts) {
            return Err(ConfigError::new(
                "retry.max_attempts",
                max_attempts,
                "an integer in 1..=100 (attempts per call, the first included)",
            ));
        }
        Ok(Self::build(
            RetryMode::Naive { max_attempts },
            Arc::new(SystemClock),
        ))
    }

    fn build(mode: RetryMode, clock: Arc<dyn Clock>) -> Self {
        RetryLayer {
            mode,
            clock,
            settings: Settings {
                max_body_bytes: DEFAULT_MAX_BODY_BYTES,
                buffer_unknown_length: false,
                backoff_base: DEFAULT_BACKOFF_BASE,
                backoff_max: DEFAULT_BACKOFF_MAX,
                count_incoming_attempts: true,
            },
            metrics: Arc::new(Metrics::new()),
        }
    }

    /// Largest body buffered for replay (default [`DEFAULT_MAX_BODY_BYTES`]); larger bodies are
    /// sent once and not retried. 0 makes only empty-bodied requests retryable.
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.settings.max_body_bytes = bytes;
        self
    }

    /// Also buffer bodies whose length is not known in advance (chunked HTTP, tonic unary
    /// requests), up to the bound. Default off: a streaming call whose client waits for the
    /// server before ending its body would wait forever for the buffering to finish. Turn it on
    /// for clients that only make unary calls (e.g. a tonic client of unary methods).
    pub fn buffer_unknown_length(mut self, on: bool) -> Self {
        self.settings.buffer_unknown_length = on;
        self
    }

    /// Backoff between attempts: full jitter over `base · 2^(retry−1)`, at most `max` (defaults
    /// [`DEFAULT_BACKOFF_BASE`], [`DEFAULT_BACKOFF_MAX`]). `base <= max` is required.
    pub fn backoff(mut self, base: Duration, max: Duration) -> Result<Self, ConfigError> {
        if base > max {
            return Err(ConfigError::new(
                "retry.backoff_base",
                format_args!("{base:?}"),
                "a duration <= retry.backoff_max",
            ));
        }
        self.settings.backoff_base = base;
        self.settings.backoff_max = max;
        Ok(self)
    }

    /// Whether the attempt limit counts the attempt number of the request being served
    /// (default true, as the core's [`spillway_core::retry::Failure::attempts_made`] says): a
    /// handler serving attempt 3 of 3 does not retry its own downstream calls, which bounds
    /// amplification along a chain. The attempt *header* on outgoing calls is always the call's
    /// own attempt number.
    pub fn count_incoming_attempts(mut self, on: bool) -> Self {
        self.settings.count_incoming_attempts = on;
        self
    }

    /// The shared policy (gated mode), e.g. to inspect its budget.
    pub fn policy(&self) -> Option<&Arc<RetryPolicy>> {
        match &self.mode {
            RetryMode::Gated(p) => Some(p),
            RetryMode::Naive { .. } => None,
        }
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = Retry<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Retry {
            inner,
            layer: self.clone(),
        }
    }
}
