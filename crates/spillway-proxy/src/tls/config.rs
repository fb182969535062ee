//! The `[listen.tls]` and `[upstream.tls]` tables (re-exported by `crate::config`).
//!
//! Why here rather than in `config`: the certificate loaders read these, and validation calls
//! the loaders (a missing or bad file is refused at load); with the types beside the loaders,
//! `tls` imports nothing else of the proxy and `config` can call it.

use serde::{Deserialize, Serialize};

/// TLS on the listener.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain.
    pub cert: String,
    /// PEM private key.
    pub key: String,
}

/// TLS (and mTLS) to the upstream tasks: `[upstream.tls]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamTlsConfig {
    /// Speak TLS to the tasks. Default true (the table's presence turns TLS on; `false`
    /// keeps the settings and speaks plaintext).
    pub enabled: bool,
    /// The name the tasks' certificates are checked against and sent as SNI (a DNS name or an
    /// IP address). Default: the host of each address.
    pub server_name: Option<String>,
    /// PEM bundle of the CA certificates trusted for the tasks. Default: the platform's trust
    /// store (`rustls-native-certs`).
    pub ca_file: Option<String>,
    /// PEM certificate chain presented to tasks that ask for one (mTLS); with
    /// `client_key_file`.
    pub client_cert_file: Option<String>,
    /// PEM private key of `client_cert_file`.
    pub client_key_file: Option<String>,
}

impl Default for UpstreamTlsConfig {
    fn default() -> Self {
        UpstreamTlsConfig {
            enabled: true,
            server_name: None,
            ca_file: None,
            client_cert_file: None,
            client_key_file: None,
        }
    }
}
