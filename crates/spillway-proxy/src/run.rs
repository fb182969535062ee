//! Running the proxy as a process: listeners, signals, reload, graceful shutdown.
//!
//! Why a blocking entry point in the library: the `spillway` binary stays a thin CLI (it needs
//! no async runtime of its own), and tests and benchmarks can start the same thing in-process
//! with [`start`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{self, ConfigError, ProxyConfig};
use crate::state::ProxyState;

/// Where the configuration comes from.
#[derive(Debug, Clone)]
pub enum Source {
    /// `--config FILE` (re-read on SIGHUP).
    File(PathBuf),
    /// The zero-config form: `--listen ADDR --upstream ADDR [--upstream ADDR ...]`, every other
    /// key at its default (adaptive concurrency; no capacity figure).
    Flags {
        /// Client-facing address.
        listen: SocketAddr,
        /// Upstream tasks.
        upstreams: Vec<String>,
    },
}

/// Why the proxy could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The configuration was refused.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// A socket could not be bound or a runtime started.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// TLS could not be set up (names the file and the problem).
    #[error("{0}")]
    Tls(String),
    /// The admin listener failed.
    #[error("admin listener: {0}")]
    Admin(String),
}

/// Builds the state from `source`.
pub fn load(source: &Source) -> Result<Arc<ProxyState>, ConfigError> {
    match source {
        Source::File(path) => ProxyState::from_file(path.clone()),
        Source::Flags { listen, upstreams } => {
            let mut cfg = ProxyConfig::default();
            cfg.listen.address = *listen;
            cfg.upstream.addresses = upstreams.clone();
            config::check(&cfg, "command line")?;
            ProxyState::new(cfg, "command line", None)
        }
    }
}

/// A proxy started in-process.
#[derive(Debug)]
pub struct Running {
    /// The bound data-plane address.
    pub addr: SocketAddr,
    /// The shared state.
    pub state: Arc<ProxyState>,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stops accepting, drains open connections (up to 5 s) and waits.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Binds the data listener of `state` (on the configured address, or `addr` if given) and
/// serves it on the current runtime. The admin listener is not started (see [`run`]).
pub async fn start(state: Arc<ProxyState>, addr: Option<SocketAddr>) -> Result<Running, RunError> {
    let addr = addr.unwrap_or(state.config().listen.address);
    let listener = crate::listener::bind(addr)
        .await
        .map_err(|source| RunError::Io {
            what: format!("cannot listen on {addr}"),
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| RunError::Io {
        what: "local address".into(),
        source,
    })?;
    let tls = crate::tls::acceptor(&state.config().listen).map_err(RunError::Tls)?;
    state.runtime().pool.start_health_checks();
    let (stop, mut rx) = tokio::sync::watch::channel(false);
    let st = Arc::clone(&state);
    let task = tokio::spawn(async move {
        let shutdown = async move {
            let _ = rx.wait_for(|v| *v).await;
        };
        crate::listener::serve(listener, st, tls, shutdown, Duration::from_secs(5)).await;
    });
    Ok(Running {
        addr,
        state,
        stop,
        task,
    })
}

/// Runs the proxy until SIGINT/SIGTERM: data listener, admin listener (if enabled), SIGHUP
/// reloads the `--config` file (an invalid file is refused and the old configuration kept).
pub fn run(source: Source) -> Result<(), RunError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|source| RunError::Io {
            what: "cannot start the async runtime".into(),
            source,
        })?;
    rt.block_on(async move {
        let state = load(&source)?;
        let running = start(Arc::clone(&state), None).await?;
        crate::metrics::log(&format!(
            "listening on {} -> {}",
            running.addr,
            state.config().upstream.addresses.join(", ")
        ));
        let admin_cfg = state.config().admin.clone();
        let (admin_stop, admin_rx) = tokio::sync::watch::channel(false);
        let admin = if admin_cfg.enabled {
            // Bound before serving so that a taken port stops the start with its reason.
            let listen = admin_cfg.listen;
            let server = crate::admin::AdminServer::bind(Arc::clone(&state), admin_cfg)
                .await
                .map_err(|e| RunError::Admin(e.to_string()))?;
            crate::metrics::log(&format!("admin API on {listen}"));
            let mut rx = admin_rx.clone();
            Some(tokio::spawn(async move {
                server
                    .serve(async move {
                        let _ = rx.wait_for(|v| *v).await;
                    })
                    .await
                    .map_err(|e| e.to_string())
            }))
        } else {
            None
        };
        wait_for_signals(&state).await;
        crate::metrics::log("shutting down: draining connections");
        let _ = admin_stop.send(true);
        running.shutdown().await;
        if let Some(a) = admin {
            if let Ok(Err(e)) = a.await {
                return Err(RunError::Admin(e));
            }
        }
        Ok(())
    })
}

#[cfg(unix)]
async fn wait_for_signals(state: &Arc<ProxyState>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut hup), Ok(mut term)) = (
        signal(SignalKind::hangup()),
        signal(SignalKind::terminate()),
    ) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    loop {
        tokio::select! {
            _ = hup.recv() => {
                // reload_from_file logs success or the refusal itself.
                let _ = state.reload_from_file();
            }
            _ = term.recv() => return,
            _ = tokio::signal::ctrl_c() => return,
        }
    }
}

#[cfg(not(unix))]
async fn wait_for_signals(_state: &Arc<ProxyState>) {
    let _ = tokio::signal::ctrl_c().await;
}
