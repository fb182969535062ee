//! The admin listener's socket side: HTTP/1.1 on hyper 1, a connection cap with accept
//! back-pressure, header-read and send timeouts, metrics upkeep, and graceful shutdown.
//!
//! Why HTTP/1.1 only: the admin API is `curl`, Prometheus and a browser dashboard, all of which
//! speak it; a second protocol would be surface without a user. Why a cap: the admin port is
//! outside admission control, so it bounds itself (a scrape storm must not starve the proxy).

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use super::api::AdminApi;
use super::stall::stalled;
use super::AdminConfig;
use crate::progress::{Progress, Watched};
use crate::state::ProxyState;

/// How often the Prometheus recorder's histograms are drained (its own default upkeep period).
const UPKEEP_EVERY: Duration = Duration::from_secs(5);
/// How long open admin connections get to finish after shutdown is asked for.
const DRAIN_FOR: Duration = Duration::from_secs(5);

/// The admin listener could not start.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// A value in `[admin]` is not accepted.
    #[error("[admin] {0}")]
    Config(#[from] spillway_core::ConfigError),
    /// The address could not be bound.
    #[error("cannot listen on admin.listen = {addr}: {source}")]
    Bind {
        /// The configured address.
        addr: SocketAddr,
        /// Why.
        source: io::Error,
    },
}

/// A bound admin listener, not yet serving (bind first to learn the port when it is 0).
#[derive(Debug)]
pub struct AdminServer {
    listener: TcpListener,
    api: Arc<AdminApi>,
    cfg: AdminConfig,
}

impl AdminServer {
    /// Validates `cfg`, installs the metrics recorder and binds `cfg.listen`.
    pub async fn bind(state: Arc<ProxyState>, cfg: AdminConfig) -> Result<Self, AdminError> {
        let mut api = AdminApi::new(state, &cfg)?;
        let bind_err = |source| AdminError::Bind {
            addr: cfg.listen,
            source,
        };
        let listener = TcpListener::bind(cfg.listen).await.map_err(bind_err)?;
        api.set_bound_addr(listener.local_addr().map_err(bind_err)?, &cfg.allowed_hosts);
        Ok(AdminServer {
            listener,
            api: Arc::new(api),
            cfg,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The API behind the listener.
    pub fn api(&self) -> &Arc<AdminApi> {
        &self.api
    }

    /// Serves until `shutdown` completes, then lets open connections finish their current
    /// request (at most 5 s) and returns.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> Result<(), AdminError> {
        let AdminServer { listener, api, cfg } = self;
        let max = cfg.max_connections.clamp(1, Semaphore::MAX_PERMITS);
        let slots = Arc::new(Semaphore::new(max));
        let (stop_tx, stop_rx) = watch::channel(false);
        let header_timeout = Duration::from_millis(cfg.header_read_timeout_ms);
        let send_timeout = Duration::from_millis(cfg.send_timeout_ms);
        let mut upkeep = tokio::time::interval(UPKEEP_EVERY);
        upkeep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut shutdown = pin!(shutdown);
        // The dashboard's 1 s sampler lives as long as the listener.
        let sampler = api.dashboard().spawn_sampler();

        loop {
            // Back-pressure: at the cap, stop accepting; the kernel's backlog holds the rest.
            let slot = tokio::select! {
                biased;
                () = &mut shutdown => break,
                _ = upkeep.tick() => {
                    if let Some(h) = api.metrics() {
                        h.run_upkeep();
                    }
                    continue;
                }
                s = Arc::clone(&slots).acquire_owned() => match s {
                    Ok(s) => s,
                    Err(_) => break, // closed: cannot happen while we hold `slots`
                },
            };
            let (stream, peer) = tokio::select! {
                biased;
                () = &mut shutdown => break,
                r = listener.accept() => match r {
                    Ok(x) => x,
                    Err(e) => {
                        // EMFILE and friends: wait a little instead of spinning.
                        tracing::error!(error = %e, "admin listener: accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let api = Arc::clone(&api);
            let mut stop = stop_rx.clone();
            tokio::spawn(async move {
                let _slot = slot;
                let svc = service_fn(move |req| {
                    let api = Arc::clone(&api);
                    async move { Ok::<_, Infallible>(api.handle(req, Some(peer)).await) }
                });
                let mut builder = http1::Builder::new();
                builder
                    .timer(TokioTimer::new())
                    .header_read_timeout(header_timeout)
                    .keep_alive(true);
                let progress = Arc::new(Progress::default());
                let io = TokioIo::new(Watched::new(stream, Arc::clone(&progress)));
                let mut conn = pin!(builder.serve_connection(io, svc));
                tokio::select! {
                    _ = conn.as_mut() => {}
                    // A client taking none of its answers: dropped, which closes the socket.
                    () = stalled(&progress, send_timeout) => {
                        tracing::warn!(
                            %peer,
                            send_timeout_ms = send_timeout.as_millis() as u64,
                            "admin listener: closed a connection that took no byte of its \
                             answer for admin.send_timeout_ms"
                        );
                    }
                    // (The watch guard is dropped inside, before the await below.)
                    () = async { let _ = stop.wait_for(|s| *s).await; } => {
                        conn.as_mut().graceful_shutdown();
                        let _ = conn.await;
                    }
                }
            });
        }

        drop(listener);
        sampler.abort();
        let _ = stop_tx.send(true);
        // Every connection holds a slot: all slots back means all connections are done.
        let all = u32::try_from(max).unwrap_or(u32::MAX);
        let _ = tokio::time::timeout(DRAIN_FOR, slots.acquire_many(all)).await;
        Ok(())
    }
}

/// Binds `cfg.listen` and serves the admin API for `state` until `shutdown` completes.
///
/// ```no_run
/// # async fn demo(state: std::sync::Arc<spillway_proxy::state::ProxyState>) {
/// use spillway_proxy::admin::{serve_admin, AdminConfig};
/// let cfg = AdminConfig::default(); // 127.0.0.1:9901, no token
/// let result = serve_admin(state, cfg, async { let _ = tokio::signal::ctrl_c().await; }).await;
/// # let _ = result; }
/// ```
pub async fn serve_admin(
    state: Arc<ProxyState>,
    cfg: AdminConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), AdminError> {
    AdminServer::bind(state, cfg).await?.serve(shutdown).await
}
