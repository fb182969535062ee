//! `spillway proxy`: run Spillway as a sidecar or gateway reverse proxy.
//!
//! Why two forms: a TOML file (`--config`) for real deployments — routes, trust, quotas,
//! degradation, reloaded on SIGHUP — and a zero-config form (`--listen` + `--upstream`) that
//! protects a service at once with adaptive defaults, needing no capacity figure.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use crate::UsageError;

/// Arguments of `spillway proxy`.
#[derive(Debug, Args)]
pub struct ProxyArgs {
    /// Configuration file (TOML; see crates/spillway-proxy/CONFIG.md). Re-read on SIGHUP.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["upstream", "threads"])]
    config: Option<PathBuf>,
    /// The address to listen on, e.g. 127.0.0.1:8080: the zero-config form's (with
    /// `--upstream`), or with `--config` in place of the file's `[listen] address`.
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// With `--config`: the admin API's address in place of the file's `[admin] listen` (so
    /// several instances can run from one file on one host).
    #[arg(long, value_name = "ADDR", requires = "config")]
    admin: Option<SocketAddr>,
    /// Zero-config form: an upstream task (host:port); repeat for a gateway over several tasks.
    #[arg(long, value_name = "HOST:PORT", requires = "listen")]
    upstream: Vec<String>,
    /// Zero-config form: data-plane threads (default: one per CPU; `--check` shows the value).
    #[arg(long, value_name = "N", requires = "listen")]
    threads: Option<usize>,
    /// Validate the configuration, print the effective configuration as JSON, and exit.
    #[arg(long)]
    check: bool,
}

/// Runs the proxy (blocks until SIGINT/SIGTERM).
pub fn run(args: &ProxyArgs) -> anyhow::Result<()> {
    use spillway_proxy::run::{load, run, Source};
    let source = match (&args.config, args.listen) {
        (Some(path), listen) if listen.is_some() || args.admin.is_some() => Source::FileWith(
            path.clone(),
            spillway_proxy::config::Overrides {
                listen,
                admin: args.admin,
            },
        ),
        (Some(path), _) => Source::File(path.clone()),
        (None, Some(listen)) if !args.upstream.is_empty() => Source::Flags {
            listen,
            upstreams: args.upstream.clone(),
            threads: args.threads,
        },
        _ => {
            return Err(UsageError(
                "spillway proxy needs --config FILE, or --listen ADDR with at least one --upstream HOST:PORT"
                    .into(),
            )
            .into())
        }
    };
    if args.check {
        let state = load(&source).map_err(|e| UsageError(e.to_string()))?;
        println!("{}", serde_json::to_string_pretty(&*state.config())?);
        return Ok(());
    }
    // Memory freed after a burst of connections goes back to the system (src/trim.rs).
    crate::trim::spawn();
    // A refused configuration is the user's to fix: exit 2 like other argument errors.
    match run(source) {
        Err(spillway_proxy::run::RunError::Config(e)) => Err(UsageError(e.to_string()).into()),
        other => Ok(other?),
    }
}
