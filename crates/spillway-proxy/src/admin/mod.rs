//! The admin listener: metrics, status, effective configuration, reload, the degradation switch
//! and the incident controls, over HTTP/1.1 on a separate (loopback by default) port.
//!
//! Why a separate listener: during an overload the data port is exactly the one refusing
//! requests, and the operator's levers must still answer. The admin port sits outside admission
//! control, on loopback unless configured otherwise, with an optional bearer token. Why these
//! endpoints: the reference guide's overload runbook (confirm overload, stop the feedback, shed,
//! cut and ramp — see `docs/runbook.md`) needs each to be one `curl`; Prometheus scrapes
//! `/metrics`; the SRE book's visibility advice (count refusals by reason, keep rejections out
//! of latency) is what the metrics carry.
//!
//! | method | path | token needed when one is set | what |
//! | --- | --- | --- | --- |
//! | GET | `/metrics` | only with `protect_reads` | Prometheus text format |
//! | GET | `/status` | only with `protect_reads` | JSON: admission, upstreams, routes, controls, offered demand |
//! | GET | `/controls` | only with `protect_reads` | JSON: the incident controls |
//! | GET | `/ready` | never | 200 when traffic should be sent here, else 503 and why ([`crate::drain`]) |
//! | GET | `/live` | never | 200 while the process answers |
//! | GET | `/config` | yes | the effective configuration as JSON, secrets redacted |
//! | POST | `/reload` | yes | re-read the config file (or reload the TOML body) |
//! | POST | `/degradation` | yes | `{"route": "..", "enabled": false}`: the off switch |
//! | POST | `/controls/shed-below` | yes | `{"criticality": "SHEDDABLE_PLUS"}` or `"off"` |
//! | POST | `/controls/admit-percent` | yes | `{"percent": 1, "ramp_seconds": 600, "exempt_from": "CRITICAL_PLUS"}` |
//! | POST | `/controls/retries` | yes | `{"enabled": false}` |
//! | POST | `/controls/exercise-degraded` | yes | `{"fraction": 0.01}` |
//! | POST | `/controls/reset` | yes | every control off |
//!
//! Changes (every POST) and `/config` must also be addressed to this listener (`Host`,
//! `Origin`) and, without a token, not be a request a web form can make (module `origin` has the
//! threat model: cross-origin form posts and DNS rebinding).
//!
//! Reads are open by default when a token is set because they hold no secrets and Prometheus
//! and dashboards scrape them; `/config` needs the token because it describes the deployment.
//! `protect_reads = true` puts every endpoint behind the token.

mod api;
mod auth;
mod fleet;
pub mod histograms;
pub mod labels;
pub mod metrics;
mod origin;
mod params;
mod redact;
mod reply;
mod server;
mod stall;

#[cfg(test)]
mod guard_tests;
#[cfg(test)]
mod tests;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use spillway_core::ConfigError;

pub use api::AdminApi;
pub use auth::{bearer_matches, MIN_TOKEN_LEN};
pub use metrics::{record_offered, OFFERED_COST, OFFERED_REQUESTS};
pub use origin::{OwnAddress, ADMIN_HEADER};
pub use redact::{is_secret_key, redact};
pub use reply::{AdminBody, ApiError};
pub use server::{serve_admin, AdminError, AdminServer};

/// The default admin address: loopback only, port 9901 (Envoy's admin port is 9901 in its
/// examples; operators recognise it).
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 9901);

/// The `[admin]` table of the proxy's configuration file.
///
/// ```toml
/// [admin]
/// enabled = true                 # default true
/// listen = "127.0.0.1:9901"      # default; a non-loopback address requires a token
/// token_file = "/etc/spillway/admin-token"   # or token = "...", at least 16 characters
/// protect_reads = false          # true: /metrics, /status and /controls need the token too
/// max_connections = 64
/// header_read_timeout_ms = 5000
/// send_timeout_ms = 10000
/// max_body_bytes = 1048576
/// allowed_hosts = []             # other names a change may be addressed to (see `origin`)
/// max_customer_labels = 100      # customers with series of their own; the rest are "other"
/// max_operation_labels = 100     # the same for operations
/// max_series_per_family = 1500   # series of each per-request family; the rest fold into "other"
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// Start the admin listener. Default `true`.
    pub enabled: bool,
    /// Address to listen on. Default `127.0.0.1:9901`.
    pub listen: SocketAddr,
    /// Bearer token required on mutating endpoints and `/config`. Default none. Prefer
    /// `token_file`, which keeps the secret out of the configuration file.
    pub token: Option<String>,
    /// File holding the token (surrounding whitespace trimmed). Default none.
    pub token_file: Option<PathBuf>,
    /// Require the token on `/metrics`, `/status` and `/controls` as well. Default `false`.
    pub protect_reads: bool,
    /// Concurrent admin connections; further ones wait in the accept queue. Default 64.
    pub max_connections: usize,
    /// Time allowed to send the request head. Default 5000 ms.
    pub header_read_timeout_ms: u64,
    /// A connection whose socket takes no byte of its answers for this long is closed (a
    /// client that stops reading must not hold an admin slot). Default 10000 ms.
    pub send_timeout_ms: u64,
    /// Largest accepted request body (a TOML config posted to `/reload`). Default 1 MiB.
    pub max_body_bytes: usize,
    /// Names (`host` or `host:port`) besides the listener's own address that requests
    /// changing state may carry in `Host`/`Origin`, e.g. the DNS name a remote operator uses.
    /// Default none.
    pub allowed_hosts: Vec<String>,
    /// Customers that get metric series of their own (the first ones seen keep them; later
    /// ones are counted as `other`). Default 100.
    pub max_customer_labels: usize,
    /// Operations that get metric series of their own, as for customers. Default 100.
    pub max_operation_labels: usize,
    /// Series each per-request family (admitted, shed, queue time, latency, throttled,
    /// retried) may hold; label
    /// combinations past it are recorded with the customer, then the operation, as `other`
    /// (`spillway_tower::metrics::series`). Default 1 500.
    pub max_series_per_family: usize,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            enabled: true,
            listen: DEFAULT_LISTEN,
            token: None,
            token_file: None,
            protect_reads: false,
            max_connections: 64,
            header_read_timeout_ms: 5000,
            send_timeout_ms: 10_000,
            max_body_bytes: 1 << 20,
            allowed_hosts: Vec::new(),
            max_customer_labels: labels::DEFAULT_MAX_VALUES,
            max_operation_labels: labels::DEFAULT_MAX_VALUES,
            max_series_per_family: spillway_tower::metrics::series::DEFAULT_MAX_SERIES,
        }
    }
}

impl AdminConfig {
    /// Checks every value; `ConfigError::field` is the key inside `[admin]` (prefix it with
    /// `admin.` for messages). Reads `token_file`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.token.is_some() && self.token_file.is_some() {
            return Err(ConfigError::new(
                "token_file",
                "(set together with token)",
                "either token or token_file, not both",
            ));
        }
        let token = self.resolve_token()?;
        if self.enabled && token.is_none() && !self.listen.ip().is_loopback() {
            return Err(ConfigError::new(
                "listen",
                self.listen,
                "a loopback address (127.0.0.1 or [::1]) unless token or token_file is set: \
                 the admin API can cut all traffic",
            ));
        }
        if self.protect_reads && token.is_none() {
            return Err(ConfigError::new(
                "protect_reads",
                true,
                "false unless token or token_file is set",
            ));
        }
        if !(1..=10_000).contains(&self.max_connections) {
            return Err(ConfigError::new(
                "max_connections",
                self.max_connections,
                "an integer from 1 to 10000",
            ));
        }
        if !(100..=600_000).contains(&self.header_read_timeout_ms) {
            return Err(ConfigError::new(
                "header_read_timeout_ms",
                self.header_read_timeout_ms,
                "milliseconds from 100 to 600000",
            ));
        }
        if !(100..=600_000).contains(&self.send_timeout_ms) {
            return Err(ConfigError::new(
                "send_timeout_ms",
                self.send_timeout_ms,
                "milliseconds from 100 to 600000",
            ));
        }
        if !(1024..=(64 << 20)).contains(&self.max_body_bytes) {
            return Err(ConfigError::new(
                "max_body_bytes",
                self.max_body_bytes,
                "bytes from 1024 to 67108864 (64 MiB)",
            ));
        }
        if self.allowed_hosts.len() > origin::MAX_ALLOWED_HOSTS {
            return Err(ConfigError::new(
                "allowed_hosts",
                format!("({} entries)", self.allowed_hosts.len()),
                "at most 64 entries",
            ));
        }
        for h in &self.allowed_hosts {
            origin::check_allowed_host(h)?;
        }
        for (field, v) in [
            ("max_customer_labels", self.max_customer_labels),
            ("max_operation_labels", self.max_operation_labels),
        ] {
            if v > labels::MAX_MAX_VALUES {
                return Err(ConfigError::new(
                    field,
                    v,
                    "an integer from 0 to 10000 (each value costs about 35 series in /metrics)",
                ));
            }
        }
        {
            use spillway_tower::metrics::series::{MAX_MAX_SERIES, MIN_MAX_SERIES};
            let v = self.max_series_per_family;
            if !(MIN_MAX_SERIES..=MAX_MAX_SERIES).contains(&v) {
                return Err(ConfigError::new(
                    "max_series_per_family",
                    v,
                    "an integer from 100 to 1000000 (each series costs ~100-130 bytes of \
                     /metrics; a histogram label set costs 17)",
                ));
            }
        }
        Ok(())
    }

    /// The warning the proxy logs at start when the admin listener is enabled without a
    /// token; `None` when it has one (or is disabled).
    pub fn no_token_warning(&self) -> Option<String> {
        (self.enabled && self.token.is_none() && self.token_file.is_none()).then(|| {
            format!(
                "the admin API on {} has no token: every local user and process can change \
                 admission, controls and the configuration (web pages cannot: changes need the \
                 admin's own Host/Origin and a non-form request). Set admin.token_file to \
                 require a bearer token.",
                self.listen
            )
        })
    }

    /// The token, from `token` or read from `token_file`; `None` when neither is set.
    pub fn resolve_token(&self) -> Result<Option<String>, ConfigError> {
        let token = match (&self.token, &self.token_file) {
            (Some(t), _) => t.clone(),
            (None, Some(path)) => std::fs::read_to_string(path)
                .map_err(|e| {
                    ConfigError::new(
                        "token_file",
                        format!("{} ({e})", path.display()),
                        "a readable file holding the admin token",
                    )
                })?
                .trim()
                .to_string(),
            (None, None) => return Ok(None),
        };
        let field = if self.token.is_some() {
            "token"
        } else {
            "token_file"
        };
        auth::validate_token(field, &token)?;
        Ok(Some(token))
    }
}
