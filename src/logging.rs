//! The process's one `tracing` subscriber: the libraries emit events, only the binary decides
//! where they go (stderr), in which form (`--log-format text|json`) and which pass
//! (`--log-level`, or `RUST_LOG`).
//!
//! Why `RUST_LOG` wins over `--log-level`: the flag is usually baked into a unit file or a
//! container's command, and the environment is what an operator changes for one run to see
//! more of one module (`RUST_LOG=info,spillway_proxy::upstream=debug`).

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;

use crate::UsageError;

/// The form of log lines (and of the proxy's access log unless its `format` says otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable: time, level, target, message, `key=value` fields.
    Text,
    /// One JSON object a line: `timestamp`, `level`, `target`, `fields.message`, other fields.
    Json,
}

/// The filter's default: the operator-facing events, not the per-connection detail.
pub const DEFAULT_LEVEL: &str = "info";

const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// Parses a filter: a bare word must be a level (a typo like `verbos` would otherwise be read as
/// a module name, silencing everything else); anything with `=` or `,` is a `RUST_LOG`-style
/// list of directives.
pub fn filter(spec: &str, from: &str) -> Result<EnvFilter, UsageError> {
    let spec = spec.trim();
    let accepted = "a level (off, error, warn, info, debug, trace) or directives like \
                    `info,spillway_proxy=debug`";
    let is_list = spec.contains('=') || spec.contains(',');
    if spec.is_empty() || (!is_list && !LEVELS.contains(&spec.to_ascii_lowercase().as_str())) {
        return Err(UsageError(format!(
            "{from} {spec:?} is not a log filter: expected {accepted}"
        )));
    }
    EnvFilter::builder()
        .parse(spec)
        .map_err(|e| UsageError(format!("{from} {spec:?}: {e}; expected {accepted}")))
}

/// Installs the subscriber on stderr. `RUST_LOG`, when set and not empty, takes the place of
/// `level`; an invalid filter from either is a usage error naming its source.
pub fn init(format: LogFormat, level: Option<&str>) -> Result<(), UsageError> {
    let env = std::env::var("RUST_LOG")
        .ok()
        .filter(|s| !s.trim().is_empty());
    let filter = match (&env, level) {
        (Some(spec), _) => filter(spec, "RUST_LOG")?,
        (None, Some(spec)) => filter(spec, "--log-level")?,
        (None, None) => filter(DEFAULT_LEVEL, "the default")?,
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    // Already installed (never, in the binary): keep the first.
    drop(installed);
    spillway_proxy::access::set_default_format(match format {
        LogFormat::Text => spillway_proxy::access::AccessFormat::Text,
        LogFormat::Json => spillway_proxy::access::AccessFormat::Json,
    });
    Ok(())
}
