//! ORCA load reports in both forms a backend sends, and the choice of which of their metrics
//! is the backend's utilisation.
//!
//! Why both forms: the ORCA libraries of gRPC (gRFC A51, "Custom Backend Metrics Support")
//! send the report as the serialised `xds.data.orca.v3.OrcaLoadReport` protobuf in the binary
//! metadata `endpoint-load-metrics-bin` (base64 on the wire, usually as a trailer), while HTTP
//! services write the `TEXT` form ([`super::parse_orca`]). A proxy that reads only one form is
//! blind to half the backends that report.
//!
//! Why a choice of metrics: a backend bound by something other than CPU (a connection pool,
//! a queue, memory) reports it as `named_metrics` or `utilization` entries, and only the
//! operator knows which one says "full". As in Envoy's and gRPC's weighted round robin
//! (`metric_names_for_computing_utilization`, gRFC A58), the utilisation is the *largest* of
//! the chosen metrics the report carries; by default it is `application_utilization`, else
//! `cpu_utilization`, the rule gRFC A58 gives for reports without named choices.
//!
//! Message layout (cncf/xds `xds/data/orca/v3/orca_load_report.proto`): 1 `cpu_utilization`,
//! 2 `mem_utilization`, 3 `rps` (deprecated), 4 `request_cost`, 5 `utilization`,
//! 6 `rps_fractional`, 7 `eps`, 8 `named_metrics`, 9 `application_utilization`.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;
use http::HeaderValue;

use super::orca::visit_orca_text;
use super::{accepts, name, HeaderError};

/// `xds.data.orca.v3.OrcaLoadReport`, the ORCA load report as protobuf.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OrcaLoadReportMessage {
    /// CPU utilisation as a fraction of the available CPU (may exceed 1 past soft limits).
    #[prost(double, tag = "1")]
    pub cpu_utilization: f64,
    /// Memory utilisation as a fraction.
    #[prost(double, tag = "2")]
    pub mem_utilization: f64,
    /// Deprecated whole requests per second (`rps_fractional` replaces it).
    #[prost(uint64, tag = "3")]
    pub rps: u64,
    /// Application-specific absolute costs of the request.
    #[prost(map = "string, double", tag = "4")]
    pub request_cost: HashMap<String, f64>,
    /// Resource utilisations, each a fraction of the resource.
    #[prost(map = "string, double", tag = "5")]
    pub utilization: HashMap<String, f64>,
    /// Requests per second being served.
    #[prost(double, tag = "6")]
    pub rps_fractional: f64,
    /// Errors per second.
    #[prost(double, tag = "7")]
    pub eps: f64,
    /// Application-specific opaque metrics.
    #[prost(map = "string, double", tag = "8")]
    pub named_metrics: HashMap<String, f64>,
    /// Application-defined utilisation (may exceed 1 past soft limits).
    #[prost(double, tag = "9")]
    pub application_utilization: f64,
}

/// The largest `endpoint-load-metrics-bin` value decoded (base64 text); a report of a few
/// dozen named metrics is well under 2 KB, and a larger one would only cost memory.
pub const MAX_ORCA_BIN_BYTES: usize = 8 * 1024;

/// gRPC binary metadata is standard base64, with or without padding (gRPC's HTTP/2 protocol
/// spec: "implementations MUST accept padded and un-padded values").
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Parses `endpoint-load-metrics-bin`: base64 of a serialised [`OrcaLoadReportMessage`].
pub fn parse_orca_bin(v: &HeaderValue) -> Result<OrcaLoadReportMessage, HeaderError> {
    let bad = || {
        HeaderError::new(
            name::ENDPOINT_LOAD_METRICS_BIN,
            v.as_bytes(),
            accepts::ORCA_BIN,
        )
    };
    if v.len() > MAX_ORCA_BIN_BYTES {
        return Err(bad());
    }
    let bytes = BASE64
        .decode(v.as_bytes().trim_ascii())
        .map_err(|_| bad())?;
    <OrcaLoadReportMessage as prost::Message>::decode(bytes.as_slice()).map_err(|_| bad())
}

/// Formats a report as `endpoint-load-metrics-bin` (padded base64), as gRPC's ORCA libraries
/// send it.
pub fn format_orca_bin(r: &OrcaLoadReportMessage) -> HeaderValue {
    let text = BASE64.encode(prost::Message::encode_to_vec(r));
    // Base64 is visible ASCII.
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// One metric of an ORCA report that can stand for the backend's utilisation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrcaMetric {
    /// `cpu_utilization`
    CpuUtilization,
    /// `mem_utilization`
    MemUtilization,
    /// `application_utilization`
    ApplicationUtilization,
    /// `utilization.<key>`: an entry of the `utilization` map.
    Utilization(Box<str>),
    /// `named_metrics.<key>`: an entry of the `named_metrics` map.
    Named(Box<str>),
}

/// What [`OrcaMetric::from_str`] accepts.
pub const ORCA_METRIC_ACCEPTS: &str = "cpu_utilization, mem_utilization, \
    application_utilization, utilization.<key> or named_metrics.<key>, where <key> is 1 to 64 \
    visible ASCII characters without spaces, commas or '='";

/// A metric name that is not one of [`ORCA_METRIC_ACCEPTS`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrcaMetricError(pub String);

impl fmt::Display for OrcaMetricError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown: String = self.0.chars().take(80).collect();
        write!(
            f,
            "{shown:?} is not an ORCA metric: expected {ORCA_METRIC_ACCEPTS}"
        )
    }
}

impl std::error::Error for OrcaMetricError {}

impl FromStr for OrcaMetric {
    type Err = OrcaMetricError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let key_ok = |k: &str| {
            (1..=64).contains(&k.len())
                && k.bytes()
                    .all(|c| c.is_ascii_graphic() && c != b',' && c != b'=')
        };
        let err = || OrcaMetricError(s.to_owned());
        match s {
            "cpu_utilization" => Ok(OrcaMetric::CpuUtilization),
            "mem_utilization" => Ok(OrcaMetric::MemUtilization),
            "application_utilization" => Ok(OrcaMetric::ApplicationUtilization),
            _ => match s.split_once('.') {
                Some(("utilization", k)) if key_ok(k) => Ok(OrcaMetric::Utilization(k.into())),
                Some(("named_metrics", k)) if key_ok(k) => Ok(OrcaMetric::Named(k.into())),
                _ => Err(err()),
            },
        }
    }
}

impl fmt::Display for OrcaMetric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OrcaMetric::CpuUtilization => f.write_str("cpu_utilization"),
            OrcaMetric::MemUtilization => f.write_str("mem_utilization"),
            OrcaMetric::ApplicationUtilization => f.write_str("application_utilization"),
            OrcaMetric::Utilization(k) => write!(f, "utilization.{k}"),
            OrcaMetric::Named(k) => write!(f, "named_metrics.{k}"),
        }
    }
}

impl OrcaMetric {
    /// Whether the `TEXT` report's pair named `name` is this metric.
    fn matches_text(&self, name: &[u8]) -> bool {
        match self {
            OrcaMetric::CpuUtilization => name == b"cpu_utilization",
            OrcaMetric::MemUtilization => name == b"mem_utilization",
            OrcaMetric::ApplicationUtilization => name == b"application_utilization",
            OrcaMetric::Utilization(k) => name.strip_prefix(b"utilization.") == Some(k.as_bytes()),
            OrcaMetric::Named(k) => name.strip_prefix(b"named_metrics.") == Some(k.as_bytes()),
        }
    }

    /// This metric's value in a protobuf report; proto3 leaves unset doubles at 0, so a zero
    /// scalar counts as absent (gRFC A58 treats a zero utilisation the same way).
    fn in_message(&self, r: &OrcaLoadReportMessage) -> Option<f64> {
        let nonzero = |x: f64| (x != 0.0).then_some(x);
        match self {
            OrcaMetric::CpuUtilization => nonzero(r.cpu_utilization),
            OrcaMetric::MemUtilization => nonzero(r.mem_utilization),
            OrcaMetric::ApplicationUtilization => nonzero(r.application_utilization),
            OrcaMetric::Utilization(k) => r.utilization.get(&**k).copied(),
            OrcaMetric::Named(k) => r.named_metrics.get(&**k).copied(),
        }
    }
}

/// Which metrics of a report are the backend's utilisation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum OrcaUtilisation {
    /// `application_utilization` when the report has it, else `cpu_utilization`.
    #[default]
    ApplicationElseCpu,
    /// The largest of these that the report carries.
    MaxOf(Vec<OrcaMetric>),
}

impl OrcaUtilisation {
    /// From a list of metric names; an empty list is the default rule.
    pub fn from_names<S: AsRef<str>>(names: &[S]) -> Result<Self, OrcaMetricError> {
        if names.is_empty() {
            return Ok(OrcaUtilisation::ApplicationElseCpu);
        }
        let metrics = names
            .iter()
            .map(|n| n.as_ref().parse())
            .collect::<Result<_, _>>()?;
        Ok(OrcaUtilisation::MaxOf(metrics))
    }

    /// The utilisation a `TEXT` report gives (`Ok(None)`: none of the metrics is in it).
    pub fn from_text(&self, v: &HeaderValue) -> Result<Option<f64>, HeaderError> {
        match self {
            OrcaUtilisation::ApplicationElseCpu => {
                let r = super::parse_orca(v)?;
                Ok(r.application_utilization.or(r.cpu_utilization))
            }
            OrcaUtilisation::MaxOf(metrics) => {
                let mut best: Option<f64> = None;
                visit_orca_text(v, |name, x| {
                    if metrics.iter().any(|m| m.matches_text(name)) {
                        best = Some(best.map_or(x, |b| b.max(x)));
                    }
                })?;
                Ok(best)
            }
        }
    }

    /// The utilisation a decoded protobuf report gives (`None`: none of the metrics is in it).
    pub fn from_message(&self, r: &OrcaLoadReportMessage) -> Option<f64> {
        let finite = |x: Option<f64>| x.filter(|x| x.is_finite());
        match self {
            OrcaUtilisation::ApplicationElseCpu => finite(
                OrcaMetric::ApplicationUtilization
                    .in_message(r)
                    .or(OrcaMetric::CpuUtilization.in_message(r)),
            ),
            OrcaUtilisation::MaxOf(metrics) => metrics
                .iter()
                .filter_map(|m| finite(m.in_message(r)))
                .reduce(f64::max),
        }
    }

    /// The utilisation an `endpoint-load-metrics-bin` value gives.
    pub fn from_bin(&self, v: &HeaderValue) -> Result<Option<f64>, HeaderError> {
        parse_orca_bin(v).map(|r| self.from_message(&r))
    }
}

#[cfg(test)]
#[path = "orca_metrics_tests.rs"]
mod tests;
