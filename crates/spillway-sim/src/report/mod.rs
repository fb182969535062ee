//! Run reports: one data model for every experiment, written as JSON and rendered as a
//! self-contained HTML page with inline SVG charts.
//!
//! Why one model: `spillway load` (real traffic), `spillway sim` (virtual time) and
//! `spillway demo` (several runs side by side) must tell the same story with the same
//! arithmetic, so a reader can put a simulated curve next to a measured one. The claims are the
//! curves of SRE book ch. 21 and the AWS Builders' Library article "Using load shedding to avoid
//! overload": goodput vs offered load past the knee, success per criticality, recovery after a
//! surge, and latency that includes the time spent queued.
//!
//! # The model
//!
//! A run is a sequence of **logical requests**. Each one is *offered* at an intended time, may be
//! sent on the wire several times (retries), and ends with exactly one [`Outcome`]. Every count
//! in a [`SecondStats`] is attributed to the second in which the request was **offered** (its
//! intended send time, not its completion), so `goodput / offered` for a second is the fraction
//! of that second's demand that was served, and for every second
//!
//! `offered = goodput + rejected + timed_out + throttled + errors`
//!
//! ([`Counts::is_balanced`]). `sent` counts attempts on the wire (first tries plus retries), so
//! `sent / offered` is the load amplification caused by retries; a request refused locally by the
//! client's adaptive throttle on its first try has `sent = 0`.
//!
//! Latency is recorded for **successful requests only** (failures are fast or capped by the
//! timeout and would flatter or distort the percentiles) and is measured from the intended send
//! time, so time spent waiting anywhere — in the client, in a socket, in the server's queue —
//! counts (Gil Tene, "How NOT to Measure Latency", 2015: coordinated omission).
//!
//! Build a report with [`Recorder`] (feed it one [`RequestRecord`] per finished request), write
//! it with [`write_json`], render one or more with [`render_html`].

mod html;
mod recorder;
mod svg;

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

pub use html::render_html;
pub use recorder::{Outcome, Recorder, RequestRecord};

/// Outcome counts of the logical requests offered in some interval (or a whole run).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Logical requests offered (intended to be sent) in the interval.
    pub offered: u64,
    /// Attempts sent on the wire for those requests (first tries and retries).
    pub sent: u64,
    /// Requests that ended refused locally by the client's adaptive throttle.
    pub throttled: u64,
    /// Requests that ended refused by the server (e.g. HTTP 429/503) after any retries.
    pub rejected: u64,
    /// Requests with no successful answer within the client's timeout.
    pub timed_out: u64,
    /// Requests that ended in any other failure (connection refused, 5xx other than 503, ...).
    pub errors: u64,
    /// Requests answered successfully within the timeout.
    pub goodput: u64,
}

impl Counts {
    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &Counts) {
        self.offered += other.offered;
        self.sent += other.sent;
        self.throttled += other.throttled;
        self.rejected += other.rejected;
        self.timed_out += other.timed_out;
        self.errors += other.errors;
        self.goodput += other.goodput;
    }

    /// Sum of the final outcomes; equals `offered` once every request has finished.
    pub fn finished(&self) -> u64 {
        self.goodput + self.rejected + self.timed_out + self.throttled + self.errors
    }

    /// Whether every offered request has exactly one outcome.
    pub fn is_balanced(&self) -> bool {
        self.finished() == self.offered
    }

    /// `goodput / offered`, or `None` when nothing was offered.
    pub fn success_ratio(&self) -> Option<f64> {
        (self.offered > 0).then(|| self.goodput as f64 / self.offered as f64)
    }
}

/// Latency percentiles in milliseconds, from an HDR histogram of successful requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Number of samples.
    pub count: u64,
    /// Smallest sample.
    pub min_ms: f64,
    /// Arithmetic mean.
    pub mean_ms: f64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Largest sample.
    pub max_ms: f64,
}

/// Everything that happened to the requests offered in one second of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SecondStats {
    /// Seconds since the start of the run (this row covers `[t, t + 1)`).
    pub t: u64,
    /// All requests offered in this second.
    #[serde(flatten)]
    pub counts: Counts,
    /// The same, per criticality (canonical names, e.g. `CRITICAL`); only levels that occurred.
    pub by_criticality: BTreeMap<String, Counts>,
    /// The same, per customer; only customers that occurred.
    pub by_customer: BTreeMap<String, Counts>,
    /// Latency of this second's successful requests, if any succeeded.
    pub latency: Option<Percentiles>,
    /// Mean time successful requests spent queued at the server, when the server reported it.
    pub queue_ms_mean: Option<f64>,
    /// Mean time successful requests spent being served, when the server reported it.
    pub processing_ms_mean: Option<f64>,
}

/// Whole-run totals.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Length of the run's offering window in seconds (the per-second rows cover it).
    pub duration_s: f64,
    /// All requests.
    #[serde(flatten)]
    pub counts: Counts,
    /// Totals per criticality.
    pub by_criticality: BTreeMap<String, Counts>,
    /// Totals per customer.
    pub by_customer: BTreeMap<String, Counts>,
    /// `offered / duration_s`.
    pub offered_rps: f64,
    /// `goodput / duration_s`.
    pub goodput_rps: f64,
    /// `sent / offered`: attempts per logical request (1.0 = no retries).
    pub amplification: f64,
}

/// Whole-run latency of successful requests, with the server's own split when it reported one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// End-to-end latency from the intended send time.
    pub total: Percentiles,
    /// Time queued at the server (from the response's queue-time header), if reported.
    pub queue: Option<Percentiles>,
    /// Time being served (from the response's service-time header), if reported.
    pub processing: Option<Percentiles>,
}

/// One run: what was done (title, free-form `meta`), what happened each second, and the totals.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// Short label shown in legends and tables (e.g. `unprotected`, `spillway`).
    pub title: String,
    /// Free-form description of the run: target, behaviour, rate shape, seed, capacity, ...
    /// Numbers under the key `capacity_rps` are drawn as a reference line on the charts.
    pub meta: BTreeMap<String, serde_json::Value>,
    /// One row per second of the offering window, in order, with no gaps.
    pub seconds: Vec<SecondStats>,
    /// Totals.
    pub summary: Summary,
    /// Latency of successful requests; `None` when nothing succeeded.
    pub latency: Option<LatencySummary>,
}

impl RunReport {
    /// Sets a free-form `meta` entry after the run (e.g. what the backend saw).
    pub fn set_meta_value(&mut self, key: impl Into<String>, value: impl Into<serde_json::Value>) {
        self.meta.insert(key.into(), value.into());
    }

    /// `meta["capacity_rps"]` as a number, if present.
    pub fn capacity_rps(&self) -> Option<f64> {
        self.meta
            .get("capacity_rps")
            .and_then(serde_json::Value::as_f64)
    }
}

/// Failure to write or read a report file.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The file could not be written or read.
    #[error("report file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The JSON could not be produced or parsed.
    #[error("report file {path}: {source}")]
    Json {
        /// The file.
        path: String,
        /// What went wrong.
        source: serde_json::Error,
    },
}

/// Writes `reports` (one or more runs) as pretty JSON: an array of [`RunReport`].
pub fn write_json(reports: &[RunReport], path: &Path) -> Result<(), ReportError> {
    let text = serde_json::to_string_pretty(reports).map_err(|source| ReportError::Json {
        path: path.display().to_string(),
        source,
    })?;
    write_text(&text, path)
}

/// Reads a file written by [`write_json`].
pub fn read_json(path: &Path) -> Result<Vec<RunReport>, ReportError> {
    let text = std::fs::read_to_string(path).map_err(|source| ReportError::Io {
        path: path.display().to_string(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| ReportError::Json {
        path: path.display().to_string(),
        source,
    })
}

/// Writes [`render_html`] of `reports` to `path`.
pub fn write_html(reports: &[RunReport], path: &Path) -> Result<(), ReportError> {
    write_text(&render_html(reports), path)
}

fn write_text(text: &str, path: &Path) -> Result<(), ReportError> {
    std::fs::write(path, text).map_err(|source| ReportError::Io {
        path: path.display().to_string(),
        source,
    })
}
