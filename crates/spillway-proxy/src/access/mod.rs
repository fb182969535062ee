//! The access log: one line per answered request (`[log.access]`), off by default.
//!
//! Why a writer of its own rather than `tracing` events: an access log is data an operator
//! ships somewhere (a file logrotate rotates, a collector), sampled, and it must never slow the
//! requests it describes. So a request only formats its line and offers it to a bounded channel;
//! a dedicated thread writes and flushes. When the writer falls behind, lines are dropped and
//! counted (`spillway_proxy_access_log_dropped_total`), never waited for — a proxy under overload
//! must not add disk latency to every answer. When the log is off the data plane pays one branch
//! on an `Option`.
//!
//! The writer belongs to the configuration's runtime: a reload (SIGHUP, `POST /reload`) builds a
//! new one, which opens the file again — so logrotate's "move, then SIGHUP" works — and the old
//! writer finishes its queued lines and exits when the last request holding the old runtime ends.

#[cfg(test)]
mod tests;

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use spillway_core::{ConfigError, Criticality};

pub use crate::config::{AccessFormat, AccessLogConfig, LogConfig};

/// Lines dropped because the access log's writer was behind (a full channel).
pub const DROPPED: &str = "spillway_proxy_access_log_dropped_total";

/// Lines waiting for the writer at most: about 2 MB of memory at ~250 bytes a line; deeper
/// would only delay the drop decision while the disk is slower than the traffic.
const CAPACITY: usize = 8192;

static DEFAULT_JSON: AtomicBool = AtomicBool::new(false);

/// The format of access logs whose `format` is unset: the binary sets it from `--log-format`, so
/// the access log and the process's own log are one format unless configured otherwise.
pub fn set_default_format(format: AccessFormat) {
    DEFAULT_JSON.store(format == AccessFormat::Json, Ordering::Relaxed);
}

fn default_format() -> AccessFormat {
    if DEFAULT_JSON.load(Ordering::Relaxed) {
        AccessFormat::Json
    } else {
        AccessFormat::Text
    }
}

/// What the proxy decided about a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Admitted and forwarded upstream (the status is the upstream's, or the proxy's own when
    /// forwarding failed).
    Admitted,
    /// Refused: an incident control, the admission controller (quota, shed, limit, queue), or
    /// draining.
    Refused,
    /// Answered by the route's static degraded response.
    Degraded,
    /// Malformed: refused before classification or by it (400-class answers).
    Invalid,
}

impl Decision {
    /// The name in the log.
    pub const fn as_str(self) -> &'static str {
        match self {
            Decision::Admitted => "admitted",
            Decision::Refused => "refused",
            Decision::Degraded => "degraded",
            Decision::Invalid => "invalid",
        }
    }
}

/// One request's line, before formatting.
#[derive(Debug, Clone)]
pub struct Entry<'a> {
    /// When the answer was ready.
    pub time: SystemTime,
    /// The matched route (none: unmatched, or not classified).
    pub route: Option<&'a str>,
    /// The effective criticality (none: not classified).
    pub criticality: Option<Criticality>,
    /// The customer charged (none: not classified).
    pub customer: Option<&'a str>,
    /// The decision.
    pub decision: Decision,
    /// The answer's `x-spillway-reason`, if any: the refusal's reason, or the proxy's or a
    /// Spillway-protected upstream's reason for an error.
    pub reason: Option<&'a str>,
    /// Time queued for admission (admitted requests).
    pub queue: Option<Duration>,
    /// From the grant to the upstream's response head (admitted requests).
    pub upstream: Option<Duration>,
    /// The status sent to the client (HTTP; a gRPC answer's status is its `grpc-status`).
    pub status: u16,
    /// The caller's attempt number (1 = first try), from its retry header.
    pub attempt: Option<u32>,
}

/// A running access log: the sampling decision and the channel to its writer thread.
#[derive(Debug)]
pub struct AccessLog {
    sample: f64,
    format: AccessFormat,
    tx: SyncSender<String>,
    dropped: AtomicU64,
}

impl AccessLog {
    /// Opens the log `cfg` describes (`None` when it is off): the file is opened (appended to)
    /// here, so a path that cannot be written is a configuration error, reported with its key.
    pub fn open(cfg: &AccessLogConfig) -> Result<Option<AccessLog>, ConfigError> {
        if !cfg.enabled {
            return Ok(None);
        }
        let out: Box<dyn std::io::Write + Send> = match &cfg.path {
            Some(path) => Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| {
                        ConfigError::new(
                            "access.path",
                            format!("{} ({e})", path.display()),
                            "a file the proxy can create or append to",
                        )
                    })?,
            ),
            None => Box::new(std::io::stderr()),
        };
        Self::start(cfg, out).map(Some)
    }

    /// The log `cfg` describes, written to `out` by a thread of its own.
    fn start(
        cfg: &AccessLogConfig,
        out: Box<dyn std::io::Write + Send>,
    ) -> Result<AccessLog, ConfigError> {
        let (tx, rx) = sync_channel(CAPACITY);
        std::thread::Builder::new()
            .name("spillway-access".into())
            .spawn(move || write_lines(&rx, out))
            .map_err(|e| ConfigError::new("access", e, "a thread for the access log's writer"))?;
        Ok(AccessLog {
            sample: cfg.sample,
            format: cfg.format.unwrap_or_else(default_format),
            tx,
            dropped: AtomicU64::new(0),
        })
    }

    /// Lines this log dropped because its writer was behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Whether this request is one of the sample (drawn per request; 1.0 draws nothing).
    pub fn sampled(&self) -> bool {
        self.sample >= 1.0 || fastrand::f64() < self.sample
    }

    /// Formats `e` and offers it to the writer; never waits (a full channel drops the line and
    /// counts it).
    pub fn record(&self, e: &Entry<'_>) {
        let line = format_entry(e, self.format);
        match self.tx.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                metrics::counter!(DROPPED).increment(1);
            }
        }
    }
}

/// The writer thread: writes what arrives, flushing whenever it has caught up, so a line
/// reaches the file within one write of its request even when traffic is sparse.
fn write_lines(rx: &Receiver<String>, out: Box<dyn std::io::Write + Send>) {
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, out);
    while let Ok(line) = rx.recv() {
        let mut ok = out.write_all(line.as_bytes()).is_ok();
        while let Ok(more) = rx.try_recv() {
            ok &= out.write_all(more.as_bytes()).is_ok();
        }
        ok &= out.flush().is_ok();
        if !ok {
            // A full disk or a closed stderr: say so once per batch, keep serving.
            tracing::warn!("access log: a write failed; lines are being lost");
        }
        // Lines gather for a moment before the next batch: a writer blocked in `recv` is woken
        // by the line that arrives (a futex call on the sending data-plane thread, and a context
        // switch), so under steady traffic each request would pay a system call. Sleeping here,
        // the senders find no one to wake; the writer wakes at most once per BATCH_PAUSE.
        std::thread::sleep(BATCH_PAUSE);
    }
}

/// The writer's pause between batches: a line reaches the file at most this much later; at
/// 20,000 lines a second the channel holds ~100 of its 8192 meanwhile.
const BATCH_PAUSE: Duration = Duration::from_millis(5);

/// One line, newline included.
pub fn format_entry(e: &Entry<'_>, format: AccessFormat) -> String {
    let time = rfc3339(e.time);
    let ms = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1000.0);
    let mut s = String::with_capacity(256);
    match format {
        AccessFormat::Json => {
            // Written field by field, in this order: a `serde_json::Value` would allocate a map
            // and a string per key for every request logged.
            let _ = write!(s, "{{\"time\":\"{time}\"");
            json_str(&mut s, "route", e.route);
            json_str(
                &mut s,
                "criticality",
                e.criticality.map(Criticality::as_str),
            );
            json_str(&mut s, "customer", e.customer);
            json_str(&mut s, "decision", Some(e.decision.as_str()));
            json_str(&mut s, "reason", e.reason);
            for (k, v) in [("queue_ms", ms(e.queue)), ("upstream_ms", ms(e.upstream))] {
                match v {
                    Some(v) => {
                        let _ = write!(s, ",\"{k}\":{v:.3}");
                    }
                    None => {
                        let _ = write!(s, ",\"{k}\":null");
                    }
                }
            }
            let _ = write!(s, ",\"status\":{}", e.status);
            match e.attempt {
                Some(a) => {
                    let _ = write!(s, ",\"attempt\":{a}}}");
                }
                None => s.push_str(",\"attempt\":null}"),
            }
        }
        AccessFormat::Text => {
            let _ = write!(s, "{time} access");
            text(&mut s, "route", e.route);
            text(
                &mut s,
                "criticality",
                e.criticality.map(Criticality::as_str),
            );
            text(&mut s, "customer", e.customer);
            text(&mut s, "decision", Some(e.decision.as_str()));
            text(&mut s, "reason", e.reason);
            for (k, v) in [("queue_ms", ms(e.queue)), ("upstream_ms", ms(e.upstream))] {
                match v {
                    Some(v) => {
                        let _ = write!(s, " {k}={v:.3}");
                    }
                    None => {
                        let _ = write!(s, " {k}=-");
                    }
                }
            }
            let _ = write!(s, " status={}", e.status);
            match e.attempt {
                Some(a) => {
                    let _ = write!(s, " attempt={a}");
                }
                None => s.push_str(" attempt=-"),
            }
        }
    }
    s.push('\n');
    s
}

/// `,"key":"value"` with JSON's escapes (a caller chooses the customer), or `,"key":null`.
fn json_str(s: &mut String, key: &str, value: Option<&str>) {
    let _ = write!(s, ",\"{key}\":");
    let Some(v) = value else {
        s.push_str("null");
        return;
    };
    s.push('"');
    for c in v.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            '\r' => s.push_str("\\r"),
            '\t' => s.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(s, "\\u{:04x}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
}

/// ` key=value`; a value a caller chose (a customer name) is quoted, with escapes, when it holds
/// anything but plain characters, so it can neither break the line nor forge another field.
fn text(s: &mut String, key: &str, value: Option<&str>) {
    let _ = write!(s, " {key}=");
    match value {
        None => s.push('-'),
        Some(v)
            if !v.is_empty()
                && v.chars()
                    .all(|c| c.is_ascii_graphic() && c != '"' && c != '=') =>
        {
            s.push_str(v)
        }
        Some(v) => {
            let _ = write!(s, "{v:?}");
        }
    }
}

/// `2026-12-03T02:50:01.123Z` (UTC, milliseconds).
fn rfc3339(t: SystemTime) -> String {
    let now = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = now.as_secs();
    let (d, s) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil(d as i64);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        s / 3600,
        s / 60 % 60,
        s % 60,
        now.subsec_millis()
    )
}

/// Days since 1970-01-01 → (year, month, day) (Howard Hinnant's `civil_from_days`).
fn civil(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}
