//! The `spillway` binary: a thin command-line layer over the Spillway crates.
//!
//! Each subcommand lives in its own module with a clap `Args` struct and a `run` function that
//! returns `anyhow::Result<()>`; adding one is a variant in [`Command`] and an arm in `main`.
//! Exit codes: 0 success, 2 bad arguments (clap's own convention, which we follow for errors
//! found after parsing too, via [`UsageError`]), 1 anything else.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

mod backend;
mod calc;
mod demo;
mod docs;
mod load;
mod logging;
mod open_files;
mod proxy;
mod sim;
mod sim_demo;
mod trim;

/// Overload protection: criticality-aware admission, quotas, adaptive throttling, retry budgets.
#[derive(Debug, Parser)]
#[command(name = "spillway", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log lines on stderr as `text` or `json` (one object a line); also the proxy's access
    /// log's form unless `[log.access] format` says otherwise.
    #[arg(long, global = true, value_enum, default_value_t = logging::LogFormat::Text)]
    log_format: logging::LogFormat,
    /// Which events to log: a level (off, error, warn, info, debug, trace) or `RUST_LOG`-style
    /// directives (`info,spillway_proxy=debug`). Default `info`; `RUST_LOG`, when set, wins.
    #[arg(long, global = true, value_name = "FILTER")]
    log_level: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Where the utilisation knee is for your concurrency, and when to start refusing work
    /// (M/M/c queueing arithmetic).
    Calc(calc::CalcArgs),
    /// Offer an open-loop (or, with --connections, closed-loop) load over HTTP or HTTPS to a
    /// loopback target (or, with --allow-remote and a --max-rate cap, another machine) and
    /// report goodput, rejections, timeouts and latency per second, criticality and customer
    /// (JSON and HTML reports).
    Load(load::LoadArgs),
    /// Run a demo backend with the overload pathology: c workers, an unbounded FIFO queue that
    /// serves callers who have left, optional pressure slowdown and capacity drop.
    Backend(backend::BackendArgs),
    /// Unprotected vs Spillway vs Spillway with client throttling under a ramp to 10x capacity
    /// and a sudden surge, on loopback: the goodput table and an HTML report.
    Demo(demo::DemoArgs),
    /// Run the overload-protecting reverse proxy (sidecar or gateway) in front of a service.
    Proxy(proxy::ProxyArgs),
    /// Simulate the policies at fleet scale, deterministically, in simulated time.
    Sim(sim::SimArgs),
    /// Print the shell completion script (bash, elvish, fish, powershell, zsh).
    Completions(docs::CompletionsArgs),
    /// Print the manual page (roff), or write one per command with --out-dir.
    Man(docs::ManArgs),
}

/// A bad argument found after clap parsed the command line: reported like clap's own errors,
/// with exit code 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

fn main() -> ExitCode {
    // Usage errors, --help and --version exit here with clap's codes (2 for errors).
    let cli = Cli::parse();
    let result = logging::init(cli.log_format, cli.log_level.as_deref())
        .map_err(anyhow::Error::from)
        .and_then(|()| {
            // Before any socket: the proxy, the load generator and the demo backend each hold
            // thousands of connections (src/open_files.rs).
            if let Some((before, after)) = open_files::raise() {
                if after > before {
                    tracing::debug!(before, after, "raised the open-file limit (RLIMIT_NOFILE)");
                }
            }
            run(cli.command)
        });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // `spillway calc | head` closing the pipe early is not a failure worth reporting.
        Err(e)
            if e.chain().any(|cause| {
                cause
                    .downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            if e.chain().any(|cause| cause.is::<UsageError>()) {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Calc(args) => calc::run(&args),
        Command::Load(args) => load::run(&args),
        Command::Backend(args) => backend::run(&args),
        Command::Demo(args) => demo::run(&args),
        Command::Proxy(args) => proxy::run(&args),
        Command::Sim(args) => sim::run(&args),
        Command::Completions(args) => docs::completions(&args, Cli::command()),
        Command::Man(args) => docs::man(&args, Cli::command()),
    }
}
