//! The `[admin]` table: the admin listener's address, token and limits, and the checks on
//! them.
//!
//! Why here and not in `admin`: the configuration is read, defaulted and validated before any
//! listener exists, and every part of the proxy reads it, so it sits below them all; the admin
//! listener (`crate::admin`) imports this, never the other way round. The host and token rules
//! the admin listener applies to requests are the same ones checked here, so they live here
//! too and `admin` takes them from this file.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use http::uri::Authority;
use serde::{Deserialize, Serialize};
use spillway_core::ConfigError;
use spillway_tower::metrics::labels::{DEFAULT_MAX_VALUES, MAX_MAX_VALUES};

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
            max_customer_labels: DEFAULT_MAX_VALUES,
            max_operation_labels: DEFAULT_MAX_VALUES,
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
        self.validate_bounds()
    }

    /// The sizes, counts and durations, each within its stated range.
    fn validate_bounds(&self) -> Result<(), ConfigError> {
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
        if self.allowed_hosts.len() > MAX_ALLOWED_HOSTS {
            return Err(ConfigError::new(
                "allowed_hosts",
                format!("({} entries)", self.allowed_hosts.len()),
                "at most 64 entries",
            ));
        }
        for h in &self.allowed_hosts {
            check_allowed_host(h)?;
        }
        for (field, v) in [
            ("max_customer_labels", self.max_customer_labels),
            ("max_operation_labels", self.max_operation_labels),
        ] {
            if v > MAX_MAX_VALUES {
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
        validate_token(field, &token)?;
        Ok(Some(token))
    }
}

/// Longest `admin.allowed_hosts` entry (a DNS name is at most 253 characters, plus a port).
const MAX_HOST_LEN: usize = 260;
/// Most `admin.allowed_hosts` entries.
pub const MAX_ALLOWED_HOSTS: usize = 64;

/// Checks one `admin.allowed_hosts` entry: `name` or `name:port`, a host name or IP literal.
pub fn check_allowed_host(entry: &str) -> Result<(), ConfigError> {
    parse_allowed(entry).map(|_| ())
}

pub(crate) fn parse_allowed(entry: &str) -> Result<(String, Option<u16>), ConfigError> {
    const ACCEPTS: &str = "a host name or IP literal with an optional port, as a client puts it \
                           in the Host header (e.g. \"spillway-admin.internal:9901\", \
                           \"[::1]:9901\"), no scheme or path";
    let bad = || ConfigError::new("allowed_hosts", format!("{entry:?}"), ACCEPTS);
    if entry.is_empty() || entry.len() > MAX_HOST_LEN || entry.contains(['/', '@', '?', '#']) {
        return Err(bad());
    }
    let (host, port) = host_port(entry.as_bytes()).ok_or_else(bad)?;
    Ok((host.to_ascii_lowercase(), port))
}

/// Splits `host[:port]` (as in `Host`; IPv6 in brackets): `None` for anything else, a port
/// that is not a number below 65536 included (the `http` crate's `Authority` reads those as
/// "no port", which would let `host:99999` pass for port 80).
pub(crate) fn host_port(v: &[u8]) -> Option<(&str, Option<u16>)> {
    let a = Authority::try_from(v).ok()?;
    let s = std::str::from_utf8(v).ok()?;
    if a.as_str() != s || s.contains('@') {
        return None; // userinfo, or not exactly an authority
    }
    let host_end = if s.starts_with('[') {
        s.find(']')? + 1
    } else {
        s.find(':').unwrap_or(s.len())
    };
    let (host, rest) = s.split_at(host_end);
    let port = match rest.strip_prefix(':') {
        None if rest.is_empty() => None,
        None => return None,
        Some(p) if !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => {
            Some(p.parse::<u16>().ok()?)
        }
        Some(_) => return None,
    };
    if host.is_empty() || !host.bytes().all(|b| b.is_ascii_graphic()) {
        return None;
    }
    Some((host, port))
}

/// Shortest accepted token: 16 bytes (64 bits even as hex digits, out of reach of guessing
/// over a network; `openssl rand -hex 32` gives 64 characters).
pub const MIN_TOKEN_LEN: usize = 16;

/// What a token may contain: visible ASCII without spaces (RFC 6750 `b64token` is stricter;
/// this is what a header value carries without quoting).
pub const TOKEN_ACCEPTS: &str = "at least 16 visible ASCII characters without spaces \
                                 (e.g. the output of `openssl rand -hex 32`)";

/// Checks a configured token, naming `field` (e.g. `admin.token`) on error.
pub fn validate_token(field: &'static str, token: &str) -> Result<(), ConfigError> {
    let ok = token.len() >= MIN_TOKEN_LEN && token.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(())
    } else {
        // Never echo the token itself into an error or log line.
        Err(ConfigError::new(
            field,
            format!("<{} bytes, redacted>", token.len()),
            TOKEN_ACCEPTS,
        ))
    }
}
