//! Running the proxy as a process: listeners, signals, reload, graceful shutdown.
//!
//! Why a blocking entry point in the library: the `spillway` binary stays a thin CLI (it needs
//! no async runtime of its own), and tests and benchmarks can start the same thing in-process
//! with [`start`].
//!
//! Why thread-per-core in [`run`]: on tokio's work-stealing runtime a request's tasks (client
//! connection, upstream connection) wake each other across worker threads, a futex call each
//! time (about 0.64 per request measured with `strace -c`, BENCHMARKS.md), and a proxy's work per
//! request is small enough for that to show. So the CLI runs `[listen] threads` single-threaded
//! runtimes, each with its own listening socket (`SO_REUSEPORT`) and its own upstream
//! connections: a request is accepted, admitted, forwarded and answered on one thread. What
//! must be seen by every request — the admission controller, quotas, throttles, balancing
//! counts, metrics — is shared through `Arc`s and atomics as before. The admin listener,
//! signals, reloads and health checks run on one more small runtime on the calling thread.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use crate::config::{self, ConfigError, ProxyConfig};
use crate::state::ProxyState;

/// Where the configuration comes from.
#[derive(Debug, Clone)]
pub enum Source {
    /// `--config FILE` (re-read on SIGHUP).
    File(PathBuf),
    /// `--config FILE` with `--listen` / `--admin` replacing the file's addresses (on every
    /// reload too): several instances from one file on one host.
    FileWith(PathBuf, crate::config::Overrides),
    /// The zero-config form: `--listen ADDR --upstream ADDR [--upstream ADDR ...]`, every other
    /// key at its default (adaptive concurrency; no capacity figure).
    Flags {
        /// Client-facing address.
        listen: SocketAddr,
        /// Upstream tasks.
        upstreams: Vec<String>,
        /// Data-plane threads (`--threads`; `None`: one per CPU).
        threads: Option<usize>,
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
        Source::FileWith(path, overrides) => ProxyState::from_file_with(path.clone(), *overrides),
        Source::Flags {
            listen,
            upstreams,
            threads,
        } => {
            let mut cfg = ProxyConfig::default();
            cfg.listen.address = *listen;
            cfg.upstream.addresses = upstreams.clone();
            if let Some(n) = threads {
                cfg.listen.threads = *n;
            }
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
    /// Stops accepting, drains open connections (up to `[shutdown] drain_timeout_ms`) and
    /// waits.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        self.state.leases().stop();
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
    let tls = crate::tls::serving(state.tls_reloader(), state.config().listen.tls.as_ref())
        .map_err(RunError::Tls)?;
    state.runtime().pool.start_health_checks();
    let (stop, mut rx) = tokio::sync::watch::channel(false);
    let st = Arc::clone(&state);
    let task = tokio::spawn(async move {
        let shutdown = async move {
            let _ = rx.wait_for(|v| *v).await;
        };
        let drain = st.config().shutdown.timeout();
        crate::listener::serve(listener, st, tls, shutdown, drain).await;
    });
    Ok(Running {
        addr,
        state,
        stop,
        task,
    })
}

/// Runs the proxy until SIGINT/SIGTERM: `[listen] threads` data-plane threads (see the module
/// doc), the admin listener (if enabled); SIGHUP reloads the `--config` file (an invalid file
/// is refused and the old configuration kept). On SIGTERM `/ready` turns 503 and the proxy
/// keeps serving for `[shutdown] drain_delay_ms` (SIGINT or a second SIGTERM cut it short),
/// then stops accepting and drains (see `crate::drain`); the admin listener answers until
/// the data plane is done.
pub fn run(source: Source) -> Result<(), RunError> {
    let io = |what: &str| {
        let what = what.to_string();
        move |source| RunError::Io { what, source }
    };
    // The control runtime: admin API, signals, reloads, health checks, host CPU sampling.
    let control = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("spillway-control")
        .build()
        .map_err(io("cannot start the async runtime"))?;
    // Loaded inside the runtime (health checks and samplers start on it); the admin listener
    // is bound before anything serves, so a taken port stops the start with its reason.
    let (state, admin) = control.block_on(async {
        let state = load(&source)?;
        let admin_cfg = state.config().admin.clone();
        let admin = if admin_cfg.enabled {
            if let Some(w) = admin_cfg.no_token_warning() {
                tracing::warn!("{w}");
            }
            let listen = admin_cfg.listen;
            let server = crate::admin::AdminServer::bind(Arc::clone(&state), admin_cfg)
                .await
                .map_err(|e| RunError::Admin(e.to_string()))?;
            Some((server, listen))
        } else {
            None
        };
        Ok::<_, RunError>((state, admin))
    })?;
    let data = start_threads(&state)?;
    started(&state.config(), data.addr, &data.layout);
    crate::open_files::check(state.config().listen.max_connections);

    let result = control.block_on(async move {
        let (admin_stop, admin_rx) = tokio::sync::watch::channel(false);
        let admin = if let Some((server, listen)) = admin {
            tracing::debug!(%listen, "admin API serving");
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
        let signal = wait_for_signals(&state).await;
        state.begin_draining();
        let delay = state.config().shutdown.delay();
        if signal == Stop::Terminate && !delay.is_zero() {
            tracing::info!(
                "SIGTERM: /ready now answers 503; serving for shutdown.drain_delay_ms = {} \
                 before closing the listener (SIGINT or another SIGTERM: close now)",
                delay.as_millis()
            );
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                _ = wait_for_signals(&state) => {
                    tracing::info!("second signal: drain delay cut short");
                }
            }
        }
        tracing::info!("shutting down: draining connections");
        // The data plane first, while the admin listener still answers /ready and /metrics.
        let drained = tokio::task::spawn_blocking(move || data.shutdown()).await;
        if drained.is_err() {
            tracing::error!("the data plane's drain panicked");
        }
        state.leases().stop();
        let _ = admin_stop.send(true);
        if let Some(a) = admin {
            if let Ok(Err(e)) = a.await {
                return Err(RunError::Admin(e));
            }
        }
        Ok(())
    });
    result
}

/// Which signal ended [`run`]'s wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// SIGTERM: an orchestrator; the drain delay applies.
    Terminate,
    /// SIGINT (Ctrl-C), or no signal handling: stop now.
    Interrupt,
}

/// The data plane of [`run`]: `[listen] threads` threads, each serving its own listener on its
/// own single-threaded runtime.
#[derive(Debug)]
pub struct DataPlane {
    /// The bound address (the real port when port 0 was asked for).
    pub addr: SocketAddr,
    /// How the threads listen, for the start-up log line: one `SO_REUSEPORT` socket each, or
    /// one shared socket and why.
    pub layout: String,
    /// Whether each thread has a listening socket of its own.
    pub reuseport: bool,
    stop: tokio::sync::watch::Sender<bool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    work_stealing: Option<(tokio::runtime::Runtime, Running)>,
}

impl DataPlane {
    /// Number of data-plane threads (0 under the work-stealing benchmark switch, whose workers
    /// belong to tokio).
    pub fn threads(&self) -> usize {
        self.threads.len()
    }

    /// Stops accepting, lets each thread drain its open connections (up to `[shutdown]
    /// drain_timeout_ms`) and joins the threads (blocking).
    pub fn shutdown(self) {
        if let Some((rt, running)) = self.work_stealing {
            rt.block_on(running.shutdown());
        }
        let _ = self.stop.send(true);
        for t in self.threads {
            if t.join().is_err() {
                tracing::error!("a data-plane thread panicked while draining");
            }
        }
    }
}

/// The one start-up line (info): where the proxy listens and sends, and its policy in brief, so
/// an operator reading the log knows what this process does without `/config`.
fn started(cfg: &ProxyConfig, listen: SocketAddr, layout: &str) {
    let admin = if cfg.admin.enabled {
        cfg.admin.listen.to_string()
    } else {
        "off".into()
    };
    let limit = serde_json::to_value(&cfg.admission.limit)
        .ok()
        .and_then(|v| {
            v.get("algorithm")
                .and_then(|a| a.as_str())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "?".into());
    let queue = match cfg.admission.queue.max_len {
        Some(0) => "off".to_string(),
        Some(n) => format!("{n} max, {} ms", cfg.admission.queue.max_wait.as_millis()),
        None => format!(
            "half the limit, {} ms",
            cfg.admission.queue.max_wait.as_millis()
        ),
    };
    let trusted = if cfg.classify.trusted.is_empty() {
        "nobody".to_string()
    } else {
        cfg.classify.trusted.join(",")
    };
    let on = |b: bool| if b { "on" } else { "off" };
    let token = cfg.admin.enabled && (cfg.admin.token.is_some() || cfg.admin.token_file.is_some());
    let access = &cfg.log.access;
    tracing::info!(
        %listen,
        %admin,
        upstreams = %cfg.upstream.addresses.join(","),
        threads = ?layout,
        limit = %limit,
        queue = ?queue,
        trusted = %trusted,
        quota_store = %on(cfg.admission.quota.store.is_some()),
        admin_token = %on(token),
        access_log = %on(access.enabled),
        open_files = %crate::open_files::soft_limit().map_or("unlimited".into(), |l| l.to_string()),
        "spillway proxy started"
    );
}

/// Binds the configured listener once per data-plane thread and starts the threads (what
/// [`run`] does; tests call it in-process). The admin listener is not started. Health checks
/// and samplers run on the runtime current when `state` was built.
pub fn start_threads(state: &Arc<ProxyState>) -> Result<DataPlane, RunError> {
    let io = |what: &str| {
        let what = what.to_string();
        move |source| RunError::Io { what, source }
    };
    let listen = state.config().listen.clone();
    if std::env::var_os(WORK_STEALING_ENV).is_some_and(|v| v == "1") {
        return start_work_stealing(state, listen.threads);
    }
    let bound = crate::listener::bind_per_thread(listen.address, listen.threads)
        .map_err(io(&format!("cannot listen on {}", listen.address)))?;
    let tls = crate::tls::serving(state.tls_reloader(), state.config().listen.tls.as_ref())
        .map_err(RunError::Tls)?;
    let cap = Arc::new(tokio::sync::Semaphore::new(listen.max_connections));
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    // Read at start: the threads' drain is fixed when they begin serving.
    let drain = state.config().shutdown.timeout();

    // Every fallible step (runtimes, registering the sockets) before any thread starts.
    let mut workers = Vec::with_capacity(listen.threads);
    for i in 0..listen.threads {
        // I/O and timers only: signals and child processes are the control runtime's (the
        // process driver would try a process-wide lock on every park).
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(io("cannot start a data-plane runtime"))?;
        // With one shared socket, each thread accepts from its own handle on it.
        let std_listener = bound
            .sockets
            .get(i)
            .or_else(|| bound.sockets.first())
            .ok_or_else(|| std::io::Error::other("no listening socket was bound"))
            .and_then(std::net::TcpListener::try_clone)
            .map_err(io("cannot share the listening socket"))?;
        let listener = {
            let _in_rt = rt.enter();
            tokio::net::TcpListener::from_std(std_listener)
                .map_err(io("cannot register the listening socket"))?
        };
        workers.push((rt, listener));
    }
    drop(bound.sockets);
    let mut threads = Vec::with_capacity(workers.len());
    for (i, (rt, listener)) in workers.into_iter().enumerate() {
        let (state, tls, cap, mut rx) = (
            Arc::clone(state),
            tls.clone(),
            Arc::clone(&cap),
            stop_rx.clone(),
        );
        let t = std::thread::Builder::new()
            .name(format!("spillway-data-{i}"))
            .spawn(move || {
                rt.block_on(async move {
                    let shutdown = async move {
                        let _ = rx.wait_for(|v| *v).await;
                    };
                    crate::listener::serve_capped(listener, state, tls, cap, shutdown, drain).await;
                });
            })
            .map_err(io("cannot start a data-plane thread"))?;
        threads.push(t);
    }
    let n = threads.len();
    let layout = match &bound.shared_because {
        None if n > 1 => format!("{n} data-plane threads, one SO_REUSEPORT listener each"),
        None => "1 data-plane thread".to_string(),
        Some(why) => format!("{n} data-plane threads sharing one listener: {why}"),
    };
    Ok(DataPlane {
        addr: bound.addr,
        layout,
        reuseport: bound.shared_because.is_none() && n > 1,
        stop,
        threads,
        work_stealing: None,
    })
}

/// Benchmark switch: `SPILLWAY_PROXY_WORK_STEALING=1` serves the data plane on one tokio
/// work-stealing runtime with `[listen] threads` workers and one listener (the layout before
/// thread-per-core), so `bench/proxy-overhead.sh` can compare the two side by side in one run.
/// Not a production setting (hence not in the configuration).
pub const WORK_STEALING_ENV: &str = "SPILLWAY_PROXY_WORK_STEALING";

fn start_work_stealing(state: &Arc<ProxyState>, threads: usize) -> Result<DataPlane, RunError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_io()
        .enable_time()
        .build()
        .map_err(|source| RunError::Io {
            what: "cannot start the data-plane runtime".into(),
            source,
        })?;
    let running = rt.block_on(start(Arc::clone(state), None))?;
    let (stop, _) = tokio::sync::watch::channel(false);
    Ok(DataPlane {
        addr: running.addr,
        layout: format!(
            "one work-stealing runtime with {threads} workers and one listener \
             ({WORK_STEALING_ENV}=1, for comparison)"
        ),
        reuseport: false,
        stop,
        threads: Vec::new(),
        work_stealing: Some((rt, running)),
    })
}

#[cfg(unix)]
async fn wait_for_signals(state: &Arc<ProxyState>) -> Stop {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut hup), Ok(mut term)) = (
        signal(SignalKind::hangup()),
        signal(SignalKind::terminate()),
    ) else {
        let _ = tokio::signal::ctrl_c().await;
        return Stop::Interrupt;
    };
    loop {
        tokio::select! {
            _ = hup.recv() => {
                // reload_from_file logs success or the refusal itself.
                let _ = state.reload_from_file();
            }
            _ = term.recv() => return Stop::Terminate,
            _ = tokio::signal::ctrl_c() => return Stop::Interrupt,
        }
    }
}

#[cfg(not(unix))]
async fn wait_for_signals(_state: &Arc<ProxyState>) -> Stop {
    let _ = tokio::signal::ctrl_c().await;
    Stop::Interrupt
}
