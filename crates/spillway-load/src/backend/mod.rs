//! A backend with the overload pathology built in: `c` workers behind an unbounded FIFO queue
//! that serves every request it accepted — including those whose caller has long given up.
//!
//! Why: this is the service Spillway exists to protect. Past its capacity (`c / mean service
//! time`) its queue grows without bound, every request waits longer than its caller's timeout,
//! and all the work it does is for callers who have left: goodput falls to zero while the
//! backend is 100% busy (SRE book ch. 21; AWS Builders' Library, "Using load shedding to avoid
//! overload", the "goodput" figure). With retrying clients the abandoned work is multiplied, and
//! with [`Slowdown`] or a [`CapacityDrop`] it can stay down after the trigger has passed — a
//! metastable failure (Bronson et al., HotOS 2021).
//!
//! HTTP interface (HTTP/1.1 and HTTP/2, loopback only):
//! - `GET /healthz` → `200 ok`, answered at once (not queued).
//! - `GET /stats` → JSON [`BackendStats`], answered at once.
//! - any other request → queued, served, then `200` with headers
//!   [`wire::QUEUE_MS`](spillway_tower::wire::QUEUE_MS) (time queued),
//!   [`wire::SERVICE_MS`](spillway_tower::wire::SERVICE_MS) (time served),
//!   [`wire::COST`](spillway_tower::wire::COST) (service seconds: the request's cost in
//!   CPU-second-equivalent units) and
//!   [`wire::ENDPOINT_LOAD_METRICS`](spillway_tower::wire::ENDPOINT_LOAD_METRICS)
//!   (`TEXT application_utilization=<busy worker-time / c over the last 1–2 s>,
//!   cpu_utilization=<same, in spin mode>, rps_fractional=<served in the last whole second>`;
//!   workers sitting out a capacity drop count as busy). A `cost=<x>` query parameter (default 1,
//!   accepted `(0, 1000]`) multiplies the request's service time; a bad value gets `400`
//!   naming `cost`.
//!
//! Criticality, customer and deadline headers are ignored: this backend protects nothing.

mod config;
mod server;
mod util;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::{mpsc, oneshot, watch, Mutex};

pub use config::{
    BackendConfig, BackendConfigError, CapacityDrop, CpuMode, ServiceTime, Slowdown, MAX_WORKERS,
};

/// Counters of a running backend (also served as JSON at `/stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct BackendStats {
    /// Requests accepted into the queue.
    pub accepted: u64,
    /// Requests served to completion.
    pub served: u64,
    /// Served requests whose caller had already gone when the work finished (wasted work).
    pub served_abandoned: u64,
    /// Requests waiting in the queue now.
    pub queued: usize,
    /// Workers busy now.
    pub busy: usize,
    /// Configured workers.
    pub workers: usize,
    /// Seconds since start.
    pub uptime_s: f64,
}

/// What a worker hands back for a served request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Served {
    pub queue: Duration,
    pub service: Duration,
    pub utilisation: f64,
    pub rps: f64,
}

pub(crate) struct Job {
    pub enqueued: Instant,
    pub cost: f64,
    pub reply: oneshot::Sender<Served>,
}

pub(crate) struct Shared {
    pub cfg: BackendConfig,
    pub start: Instant,
    pub accepted: AtomicU64,
    pub served: AtomicU64,
    pub abandoned: AtomicU64,
    pub queued: AtomicUsize,
    pub busy: AtomicUsize,
    /// Busy worker-time over the last second or two (the ORCA utilisation).
    pub util: util::Utilisation,
    /// Completions per whole second since start: (second, count) packed for a cheap rate.
    pub rate: std::sync::Mutex<(u64, u64, u64)>,
    pub queue: mpsc::UnboundedSender<Job>,
}

impl Shared {
    pub(crate) fn stats(&self) -> BackendStats {
        BackendStats {
            accepted: self.accepted.load(Ordering::Relaxed),
            served: self.served.load(Ordering::Relaxed),
            served_abandoned: self.abandoned.load(Ordering::Relaxed),
            queued: self.queued.load(Ordering::Relaxed),
            busy: self.busy.load(Ordering::Relaxed),
            workers: self.cfg.workers,
            uptime_s: self.start.elapsed().as_secs_f64(),
        }
    }

    /// Is the capacity drop in force at `now`?
    fn drop_active(&self, now: Instant) -> Option<CapacityDrop> {
        let d = self.cfg.drop?;
        let since = now.saturating_duration_since(self.start);
        (since >= d.at && since < d.at + d.duration).then_some(d)
    }

    /// Counts one completion and returns the completions in the last whole second.
    fn completed(&self, now: Instant) -> f64 {
        let sec = now.saturating_duration_since(self.start).as_secs();
        let Ok(mut r) = self.rate.lock() else {
            return 0.0;
        };
        // (current second, count in it, count in the previous second)
        if r.0 != sec {
            r.2 = if r.0 + 1 == sec { r.1 } else { 0 };
            r.0 = sec;
            r.1 = 0;
        }
        r.1 += 1;
        r.2 as f64
    }
}

/// Starts backends in-process (tests, the demo) — see the module docs for its behaviour.
pub struct Backend;

/// A running backend; dropping it (or [`shutdown`](Self::shutdown)) stops accepting
/// connections and stops the workers.
pub struct BackendHandle {
    local_addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
}

impl BackendHandle {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Current counters.
    pub fn stats(&self) -> BackendStats {
        self.shared.stats()
    }

    /// Requests per second at full capacity (`workers / mean`), before slowdown and drops.
    pub fn capacity_rps(&self) -> f64 {
        self.shared.cfg.capacity_rps()
    }

    /// Stops accepting and serving. Requests still queued are answered `503`.
    pub fn shutdown(self) {
        drop(self);
    }
}

impl Drop for BackendHandle {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// Why a backend could not start.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// A setting is out of range.
    #[error(transparent)]
    Config(#[from] BackendConfigError),
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The async runtime could not be started.
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
}

impl Backend {
    /// Validates `cfg`, binds, and spawns the accept loop and the workers on the current tokio
    /// runtime.
    pub async fn start(cfg: BackendConfig) -> Result<BackendHandle, BackendError> {
        cfg.validate()?;
        let listener = tokio::net::TcpListener::bind(cfg.listen)
            .await
            .map_err(|source| BackendError::Bind {
                addr: cfg.listen,
                source,
            })?;
        let local_addr = listener.local_addr().map_err(|source| BackendError::Bind {
            addr: cfg.listen,
            source,
        })?;
        let (tx, rx) = mpsc::unbounded_channel();
        let (stop, stopped) = watch::channel(false);
        let shared = Arc::new(Shared {
            start: Instant::now(),
            accepted: AtomicU64::new(0),
            served: AtomicU64::new(0),
            abandoned: AtomicU64::new(0),
            queued: AtomicUsize::new(0),
            busy: AtomicUsize::new(0),
            rate: std::sync::Mutex::new((0, 0, 0)),
            util: util::Utilisation::new(cfg.workers, Instant::now()),
            queue: tx,
            cfg,
        });
        let rx = Arc::new(Mutex::new(rx));
        for index in 0..shared.cfg.workers {
            let seed = shared.cfg.seed.wrapping_add(index as u64);
            tokio::spawn(worker(
                index,
                Arc::clone(&shared),
                Arc::clone(&rx),
                stopped.clone(),
                seed,
            ));
        }
        tokio::spawn(server::accept_loop(listener, Arc::clone(&shared), stopped));
        Ok(BackendHandle {
            local_addr,
            shared,
            stop,
        })
    }
}

/// Runs a backend on a runtime of its own until Ctrl-C (or `run_for`, if given), calling
/// `on_ready` once it listens; returns its final counters.
pub fn serve_blocking(
    cfg: BackendConfig,
    run_for: Option<Duration>,
    on_ready: impl FnOnce(&BackendHandle),
) -> Result<BackendStats, BackendError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(BackendError::Runtime)?;
    runtime.block_on(async move {
        let handle = Backend::start(cfg).await?;
        on_ready(&handle);
        let limit = run_for.unwrap_or(Duration::MAX);
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = tokio::time::sleep(limit.min(Duration::from_secs(366 * 86400))) => {}
        }
        let stats = handle.stats();
        handle.shutdown();
        Ok(stats)
    })
}

/// One of the `c` workers: takes the oldest queued request (FIFO) and serves it whether or not
/// its caller is still waiting.
async fn worker(
    index: usize,
    shared: Arc<Shared>,
    rx: Arc<Mutex<mpsc::UnboundedReceiver<Job>>>,
    mut stopped: watch::Receiver<bool>,
    seed: u64,
) {
    let mut rng = fastrand::Rng::with_seed(seed);
    // Sleep overshoot still owed (see `sleep_target`).
    let mut owed = Duration::ZERO;
    loop {
        if *stopped.borrow() {
            return;
        }
        // During a capacity drop, workers beyond the reduced count sit out until it ends.
        if let Some(d) = shared.drop_active(Instant::now()) {
            if index >= d.workers {
                let end = shared.start + d.at + d.duration;
                shared.util.change(Instant::now(), true);
                let stop = tokio::select! {
                    _ = tokio::time::sleep_until(end.into()) => false,
                    _ = stopped.changed() => true,
                };
                shared.util.change(Instant::now(), false);
                if stop {
                    return;
                }
                continue;
            }
        }
        // A worker that will sit out the next drop stops waiting for work when it starts.
        let sits_out_at = shared
            .cfg
            .drop
            .filter(|d| index >= d.workers)
            .map(|d| shared.start + d.at)
            .filter(|at| *at > Instant::now());
        let job = tokio::select! {
            job = async { rx.lock().await.recv().await } => job,
            _ = async {
                match sits_out_at {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            } => continue,
            _ = stopped.changed() => return,
        };
        let Some(job) = job else { return };
        shared.queued.fetch_sub(1, Ordering::Relaxed);
        let busy = shared.busy.fetch_add(1, Ordering::Relaxed) + 1;
        let started = Instant::now();
        shared.util.change(started, true);
        let queue = started.saturating_duration_since(job.enqueued);
        let mut factor = job.cost;
        if let Some(s) = shared.cfg.slowdown {
            let in_flight = shared.queued.load(Ordering::Relaxed) + busy;
            factor *= 1.0 + s.alpha * in_flight.saturating_sub(s.threshold) as f64;
        }
        if let Some(d) = shared.drop_active(started) {
            factor *= d.slowdown;
        }
        let base = shared.cfg.distribution.sample(shared.cfg.mean, &mut rng);
        // Capped at 10 minutes whatever the multipliers: a worker must come back eventually.
        let target = Duration::from_secs_f64((base.as_secs_f64() * factor).min(600.0));
        match shared.cfg.cpu {
            CpuMode::Sleep => {
                let asked = target.saturating_sub(owed);
                tokio::time::sleep(asked).await;
                owed = overshoot_owed(owed, target, started.elapsed());
            }
            CpuMode::Spin => {
                let _ = tokio::task::spawn_blocking(move || spin(target)).await;
            }
        }
        let service = started.elapsed();
        let finished = Instant::now();
        let utilisation = shared.util.value(finished);
        shared.util.change(finished, false);
        shared.busy.fetch_sub(1, Ordering::Relaxed);
        shared.served.fetch_add(1, Ordering::Relaxed);
        let rps = shared.completed(Instant::now());
        let served = Served {
            queue,
            service,
            utilisation,
            rps,
        };
        if job.reply.send(served).is_err() {
            shared.abandoned.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Most sleep overshoot a worker carries into its next request: a few timer ticks. More than
/// that is not timer rounding but the process being descheduled, which a real service would
/// not make up for either.
const MAX_OWED: Duration = Duration::from_millis(3);

/// What a sleeping worker owes after serving a request drawn as `target` that took `took`,
/// having owed `owed` before it: tokio's timer rounds every sleep *up* to its next 1 ms tick
/// (tokio docs, `time::sleep`: "millisecond granularity"), so 40 ms drawn took about 41 ms —
/// measured in `spillway demo`: mean service time 41.9 ms for a configured 40 ms, i.e. the
/// backend ran at 95% of the capacity the demo states. The next sleep is shortened by what is
/// owed, so the service times' mean is the configured one and the capacity `workers / mean`
/// holds; each request's reported service time is still what it really took.
fn overshoot_owed(owed: Duration, target: Duration, took: Duration) -> Duration {
    (owed + took).saturating_sub(target).min(MAX_OWED)
}

/// Burns `target` of this thread's CPU time (wall time if the platform has no thread clock).
fn spin(target: Duration) {
    let start = cpu_time::ThreadTime::try_now().ok();
    let wall = Instant::now();
    loop {
        let used = match start {
            Some(t) => t.try_elapsed().unwrap_or_else(|_| wall.elapsed()),
            None => wall.elapsed(),
        };
        if used >= target {
            return;
        }
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overshoot_is_paid_back_on_the_next_sleep() {
        let ms = Duration::from_millis;
        // A 40 ms request that took 41 ms: 1 ms owed; the next asks 39 ms of a 40 ms draw.
        let owed = overshoot_owed(Duration::ZERO, ms(40), ms(41));
        assert_eq!(owed, ms(1));
        assert_eq!(ms(40).saturating_sub(owed), ms(39));
        // It took 40 ms (39 rounded up): still 1 ms owed, and the mean stays 40 ms.
        assert_eq!(overshoot_owed(owed, ms(40), ms(40)), ms(1));
        // Paid back when a sleep lands on time.
        assert_eq!(overshoot_owed(owed, ms(40), ms(39)), Duration::ZERO);
        // A long stall (descheduled) is not carried beyond MAX_OWED.
        assert_eq!(overshoot_owed(Duration::ZERO, ms(40), ms(140)), MAX_OWED);
    }
}
