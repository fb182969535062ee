//! The proxy's configuration: one TOML file, every key defaulted, validated before use.
//!
//! Why one file with defaults for everything: an operator putting Spillway in front of a service
//! in another language should need nothing but `--listen` and `--upstream` to be protected
//! (adaptive concurrency, needing no capacity figure), and one place to read when tuning. Every
//! key is documented in `CONFIG.md` with its default; errors name the key and the line
//! ([`parse`]). The admission part (`[admission]`) is `spillway-core`'s own
//! [`AdmissionConfig`](spillway_core::controller::AdmissionConfig), so the proxy cannot drift from the policy it configures.

pub(crate) mod admin;
mod load;
mod log;
mod request;
mod shutdown;
mod types;
mod validate;

pub use admin::{AdminConfig, DEFAULT_LISTEN};
pub use load::{check, parse, ConfigError};
pub use log::{AccessFormat, AccessLogConfig, LogConfig};
pub use request::*;
pub use shutdown::ShutdownConfig;
pub use types::*;
// The TLS tables live beside their loaders (see `crate::tls`).
pub use crate::tls::{TlsConfig, UpstreamTlsConfig};
