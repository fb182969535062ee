//! An open-loop HTTP(S) load generator for loopback targets (others behind `allow_remote` and a
//! rate cap).
//!
//! Why open loop: real users do not wait for each other. A closed-loop generator (a pool of
//! workers each sending its next request when the previous answers) slows down exactly when the
//! target does, so it never offers more than the target serves and never measures the queueing
//! an overloaded service inflicts (Gil Tene, "How NOT to Measure Latency", 2015: *coordinated
//! omission*; Schroeder et al., "Open Versus Closed: A Cautionary Tale", NSDI 2006). Here:
//!
//! - every request's intended send time comes from the rate shape alone ([`Schedule`]); a
//!   scheduler sleeps until it and spawns the request on its own tokio task — no worker pool, no
//!   limit on concurrency other than the timeout;
//! - latency is measured from the **intended** time, so time lost anywhere (generator, socket,
//!   server queue) is counted; the generator's own send lag is reported in `meta` so a reader
//!   can check it stayed small;
//! - a request past its timeout is abandoned and counted as timed out, so at most
//!   `rate × timeout` requests are ever in flight — memory is bounded by construction.
//!
//! Results are per logical request, in the shared [`crate::report`] model.
//!
//! A closed loop is still there on request ([`LoadConfig::connections`]): some clients *are*
//! closed loops (a connection pool, a benchmark like `wrk -c 256`), and a proxy must not serve
//! them worse than no admission would (issue 28, requirement 1). Each of its clients sends its
//! next request the moment the last one ended, with that moment as the intended time.
//!
//! Besides the report's per-second counts, `meta["refusal_ms"]` gives the spread of the time
//! from a refused request's intended send time to its (last) refusal: how early a server says
//! no.

mod cap;
mod client;
mod connect;
mod mix;
mod progress;
mod shape;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;
use spillway_core::retry::{RetryConfig, RetryPolicy};
use spillway_core::throttle::{AdaptiveThrottle, ThrottleConfig};
use spillway_core::PerCriticality;
use tokio::sync::mpsc;

pub use client::Behaviour;
pub use mix::{Mix, TrafficClass, CLASS_ACCEPTS};
pub use progress::Progress;
pub use shape::{Arrivals, RateShape, Schedule, Stage, MAX_RATE, RATE_ACCEPTS};

use crate::report::{Recorder, RequestRecord, RunReport};

/// Longest run accepted (hard cap, whatever `--duration` says).
pub const MAX_DURATION: Duration = Duration::from_secs(3600);
/// Longest timeout accepted.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);
/// Upper bound on `peak rate × timeout`, the most requests that can be in flight at once: each
/// may hold a loopback connection, and the file-descriptor limit is typically 20 000 or less.
pub const MAX_IN_FLIGHT: f64 = 15_000.0;
/// Most closed-loop clients (each may hold a loopback connection, as above).
pub const MAX_CONNECTIONS: u32 = 10_000;

/// A load run's settings.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// Label of the run in reports.
    pub title: String,
    /// The target: loopback, or anything with [`allow_remote`](Self::allow_remote). Every
    /// connection goes to this address, whatever [`authority`](Self::authority) resolves to
    /// later.
    pub target: SocketAddr,
    /// The name and port the target is spoken to by (`staging.example.com:443`): the Host
    /// header and, over HTTPS, the name sent by SNI and checked in the certificate. `None`: the
    /// address.
    pub authority: Option<String>,
    /// Speak HTTPS (needs the `tls` feature). HTTP/1.1 or, with [`http2`](Self::http2), h2
    /// agreed by ALPN.
    pub https: bool,
    /// A PEM bundle of the CAs an HTTPS target's certificate may chain to, instead of the
    /// platform's trust store.
    pub ca_file: Option<PathBuf>,
    /// Send to a non-loopback target. Needs [`max_rate`](Self::max_rate): someone else's
    /// service is on the other end, so the most this run can send is stated up front.
    pub allow_remote: bool,
    /// The cap on attempts per second on the wire (mean): the peak offered rate times the
    /// attempts a request may make must stay under it. Required with `allow_remote`.
    pub max_rate: Option<f64>,
    /// Offered requests/s over time.
    pub shape: RateShape,
    /// Poisson (default) or uniform spacing.
    pub arrivals: Arrivals,
    /// Length of the offering window.
    pub duration: Duration,
    /// What each request carries.
    pub mix: Mix,
    /// Client behaviour.
    pub behaviour: Behaviour,
    /// A request's deadline, from its intended send time; success after it is not goodput.
    pub timeout: Duration,
    /// Per-attempt timeout (default `timeout / retry.max_attempts`).
    pub attempt_timeout: Option<Duration>,
    /// Retry gates (spillway-core); `max_attempts` is also the naive client's attempt limit.
    pub retry: RetryConfig,
    /// Adaptive throttle (spillway-core), for the `throttled` behaviour.
    pub throttle: ThrottleConfig,
    /// Speak HTTP/2 (prior knowledge) instead of HTTP/1.1.
    pub http2: bool,
    /// Seed for arrivals and the mix.
    pub seed: u64,
    /// Closed loop: this many clients, each sending its next request as soon as its last one
    /// ended (the shape and arrivals are then unused). `None`: open loop (the default).
    pub connections: Option<u32>,
}

impl LoadConfig {
    /// A run against `target` with every other setting at its default: constant 100/s for 10 s,
    /// Poisson arrivals, one CRITICAL class, naive clients, 1 s timeout, 3 attempts.
    pub fn new(target: SocketAddr) -> Self {
        LoadConfig {
            title: "load".into(),
            target,
            authority: None,
            https: false,
            ca_file: None,
            allow_remote: false,
            max_rate: None,
            shape: RateShape::Constant(100.0),
            arrivals: Arrivals::Poisson,
            duration: Duration::from_secs(10),
            mix: Mix::new(Vec::new()),
            behaviour: Behaviour::Naive,
            timeout: Duration::from_secs(1),
            attempt_timeout: None,
            retry: RetryConfig::default(),
            throttle: ThrottleConfig::default(),
            http2: false,
            seed: 1,
            connections: None,
        }
    }

    /// The per-attempt timeout in force.
    pub fn effective_attempt_timeout(&self) -> Duration {
        self.attempt_timeout
            .unwrap_or(self.timeout / self.retry.max_attempts.max(1))
            .min(self.timeout)
    }

    /// Checks every setting; the error names the flag.
    pub fn validate(&self) -> Result<(), LoadError> {
        let bad = |flag: &'static str, why: String| Err(LoadError::Config { flag, why });
        // First: an HTTPS target in a build without TLS is refused whatever else is set.
        self.check_tls()?;
        if !self.allow_remote && !crate::units::is_loopback_addr(self.target) {
            return bad(
                "--target",
                format!(
                    "{} is not a loopback address; sending to another machine needs \
                     --allow-remote and --max-rate (the most attempts/s it may receive)",
                    self.target
                ),
            );
        }
        self.check_cap()?;
        if self.duration.is_zero() || self.duration > MAX_DURATION {
            return bad(
                "--duration",
                format!("{:?} is not in (0, 1h]", self.duration),
            );
        }
        if self.timeout.is_zero() || self.timeout > MAX_TIMEOUT {
            return bad(
                "--timeout",
                format!("{:?} is not in (0, 60s]", self.timeout),
            );
        }
        if self.attempt_timeout.is_some_and(|t| t.is_zero()) {
            return bad("--attempt-timeout", "must be > 0".into());
        }
        if !(1..=100).contains(&self.retry.max_attempts) {
            return bad(
                "--attempts",
                format!("{} is not in 1..=100", self.retry.max_attempts),
            );
        }
        if !(0.0..=1.0).contains(&self.retry.budget_ratio) {
            return bad(
                "--retry-budget",
                format!("{} is not in 0..=1 (default 0.1)", self.retry.budget_ratio),
            );
        }
        if let Err(e) = self.retry.validate() {
            return bad("--attempts", e.to_string());
        }
        if let Err(e) = self.throttle.validate() {
            return bad("--throttle-k", e.to_string());
        }
        if let Some(n) = self.connections {
            if !(1..=MAX_CONNECTIONS).contains(&n) {
                return bad(
                    "--connections",
                    format!("{n} is not in 1..={MAX_CONNECTIONS}"),
                );
            }
            return Ok(());
        }
        let in_flight = self.shape.peak() * self.timeout.as_secs_f64();
        if in_flight > MAX_IN_FLIGHT {
            return bad(
                "--rate",
                format!(
                    "peak rate × timeout = {in_flight:.0} requests could be in flight; at most \
                     {MAX_IN_FLIGHT} are allowed (lower --rate or --timeout)"
                ),
            );
        }
        Ok(())
    }
}

/// A run could not start.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A setting is out of range.
    #[error("invalid {flag}: {why}")]
    Config {
        /// The flag.
        flag: &'static str,
        /// What is wrong and what is accepted.
        why: String,
    },
    /// The TLS client could not be set up (an unreadable or empty CA bundle).
    #[error("cannot set up TLS: {0}")]
    Tls(String),
    /// The async runtime could not be started.
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
}

/// Runs `cfg` on a runtime of its own (for callers without one, like the CLI), with a progress
/// bar on the terminal when `progress` is set.
pub fn run_blocking(cfg: LoadConfig, progress: bool) -> Result<RunReport, LoadError> {
    let generator = LoadGenerator::new(cfg)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(LoadError::Runtime)?;
    runtime.block_on(async move {
        let bar = progress.then(|| {
            let cfg = generator.config();
            Progress::start(&cfg.title, generator.live(), cfg.duration)
        });
        let report = generator.run().await;
        if let Some(bar) = bar {
            bar.finish();
        }
        report
    })
}

/// Live counts of a running generator (for progress displays); every field is a running total.
#[derive(Debug, Default)]
pub struct Live {
    /// Requests offered so far.
    pub offered: AtomicU64,
    /// Attempts sent.
    pub sent: AtomicU64,
    /// Requests that succeeded within the timeout.
    pub goodput: AtomicU64,
    /// Requests refused by the server.
    pub rejected: AtomicU64,
    /// Requests that timed out.
    pub timed_out: AtomicU64,
    /// Requests refused locally by the throttle.
    pub throttled: AtomicU64,
    /// Other failures.
    pub errors: AtomicU64,
    /// The first connection-level failure, with its causes (e.g. why a certificate failed).
    pub first_error: std::sync::OnceLock<String>,
}

impl Live {
    /// Requests offered but not finished.
    pub fn in_flight(&self) -> u64 {
        let done = self.goodput.load(Ordering::Relaxed)
            + self.rejected.load(Ordering::Relaxed)
            + self.timed_out.load(Ordering::Relaxed)
            + self.throttled.load(Ordering::Relaxed)
            + self.errors.load(Ordering::Relaxed);
        self.offered.load(Ordering::Relaxed).saturating_sub(done)
    }
}

/// A spread of times: the generator's own timing accuracy, reported in the run's
/// `meta["send_lag"]` (actual first send − intended send), and the time to refusal in
/// `meta["refusal_ms"]` (a refusal's arrival − intended send).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct SendLag {
    /// Requests measured.
    pub count: u64,
    /// Median, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Maximum, ms.
    pub max_ms: f64,
}

/// A configured run.
pub struct LoadGenerator {
    cfg: LoadConfig,
    live: Arc<Live>,
    tls: connect::Tls,
}

impl LoadGenerator {
    /// Validates `cfg` and, for an HTTPS target, reads the CAs it trusts.
    pub fn new(cfg: LoadConfig) -> Result<Self, LoadError> {
        cfg.validate()?;
        let tls = connect::Tls::new(&cfg)?;
        Ok(LoadGenerator {
            cfg,
            live: Arc::new(Live::default()),
            tls,
        })
    }

    /// Live counts, updated while [`run`](Self::run) runs.
    pub fn live(&self) -> Arc<Live> {
        Arc::clone(&self.live)
    }

    /// The settings.
    pub fn config(&self) -> &LoadConfig {
        &self.cfg
    }

    /// Offers the load, waits for the last request to finish or time out, and returns the
    /// report. Takes at most `duration + timeout` (plus a second of grace). Fails only if the
    /// scheduler thread cannot be started.
    pub async fn run(self) -> Result<RunReport, LoadError> {
        let cfg = self.cfg;
        let live = self.live;
        let client = connect::http_client(&cfg, self.tls);
        let origin = Instant::now();
        let policies = Arc::new(client::Policies {
            behaviour: cfg.behaviour,
            max_attempts: cfg.retry.max_attempts,
            // Both configs were validated in `new`; construction only re-validates them.
            retry: RetryPolicy::new(cfg.retry.clone(), origin).unwrap_or_else(|_| {
                RetryPolicy::new(RetryConfig::default(), origin).expect("default retry config")
            }),
            throttles: PerCriticality::from_fn(|_| {
                AdaptiveThrottle::new(cfg.throttle.clone(), origin).unwrap_or_else(|_| {
                    AdaptiveThrottle::new(ThrottleConfig::default(), origin)
                        .expect("default throttle config")
                })
            }),
            task: 1,
        });
        let mix = Arc::new(cfg.mix.clone());
        let base = cfg.target_url();
        let uris: Vec<http::Uri> = mix
            .classes()
            .iter()
            .map(|c| {
                format!("{base}{}", c.path_and_query)
                    .parse()
                    .unwrap_or_else(|_| http::Uri::from_static("http://127.0.0.1/"))
            })
            .collect();
        let mut recorder = Recorder::new(cfg.title.clone(), cfg.duration);
        set_meta(&mut recorder, &cfg);
        // Start a little in the future so the first intended times are not already late.
        let start = Instant::now() + Duration::from_millis(20);
        let one = Arc::new(OneRequest {
            client,
            policies,
            live,
            mix,
            uris,
            recorder: Mutex::new(recorder),
            lag: Mutex::new(histogram()),
            refusal: Mutex::new(histogram()),
            timeout: cfg.timeout,
            attempt_timeout: cfg.effective_attempt_timeout(),
            start,
        });
        match cfg.connections {
            Some(n) => closed_loop(&one, n, start + cfg.duration).await,
            None => open_loop(&one, &cfg).await?,
        }
        if let Some(e) = one.live.first_error.get() {
            set_first_error(&one.recorder, e);
        }
        let send_lag = one.lag.lock().map(|h| spread(&h)).unwrap_or_default();
        let refusal = one.refusal.lock().map(|h| spread(&h)).unwrap_or_default();
        let mut recorder = match Arc::try_unwrap(one) {
            Ok(o) => o.recorder.into_inner().unwrap_or_else(|p| p.into_inner()),
            // A straggler still holds it (past the grace period): take a snapshot.
            Err(shared) => {
                let mut guard = shared.recorder.lock().unwrap_or_else(|p| p.into_inner());
                std::mem::replace(&mut *guard, Recorder::new(cfg.title.clone(), cfg.duration))
            }
        };
        for (key, value) in [("send_lag", send_lag), ("refusal_ms", refusal)] {
            recorder.set_meta(
                key,
                serde_json::to_value(value).unwrap_or(serde_json::Value::Null),
            );
        }
        Ok(recorder.finish())
    }
}

/// What every request of a run shares: the client, the policies, and where outcomes go.
struct OneRequest {
    client: connect::HttpClient,
    policies: Arc<client::Policies>,
    live: Arc<Live>,
    mix: Arc<Mix>,
    uris: Vec<http::Uri>,
    recorder: Mutex<Recorder>,
    lag: Mutex<Histogram<u64>>,
    refusal: Mutex<Histogram<u64>>,
    timeout: Duration,
    attempt_timeout: Duration,
    start: Instant,
}

impl OneRequest {
    /// Runs one logical request of `class` intended at `intended` and records its outcome.
    async fn run(&self, class: usize, intended: Instant) {
        let c = &self.mix.classes()[class];
        let live = &self.live;
        let f = client::execute(
            &self.client,
            &self.policies,
            live,
            &self.uris[class],
            c,
            intended,
            self.timeout,
            self.attempt_timeout,
        )
        .await;
        let counter = match f.outcome {
            crate::report::Outcome::Success => &live.goodput,
            crate::report::Outcome::Rejected => &live.rejected,
            crate::report::Outcome::TimedOut => &live.timed_out,
            crate::report::Outcome::Throttled => &live.throttled,
            crate::report::Outcome::Error => &live.errors,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if let (Some(l), Ok(mut h)) = (f.send_lag, self.lag.lock()) {
            h.saturating_record(micros(l));
        }
        if f.outcome == crate::report::Outcome::Rejected {
            if let Ok(mut h) = self.refusal.lock() {
                h.saturating_record(micros(intended.elapsed()));
            }
        }
        if let Ok(mut r) = self.recorder.lock() {
            r.record(&RequestRecord {
                offered_at: intended.saturating_duration_since(self.start),
                criticality: c.criticality,
                customer: &c.customer,
                attempts: f.attempts,
                outcome: f.outcome,
                latency: f.latency,
                queue_ms: f.queue_ms,
                service_ms: f.service_ms,
            });
        }
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("constant bounds")
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

/// Open loop: each request is spawned at its intended time from the schedule.
async fn open_loop(one: &Arc<OneRequest>, cfg: &LoadConfig) -> Result<(), LoadError> {
    let (done_tx, mut done_rx) = mpsc::channel::<()>(1);
    let mut rng = fastrand::Rng::with_seed(cfg.seed.wrapping_add(0x5eed));
    let schedule = Schedule::new(cfg.shape.clone(), cfg.arrivals, cfg.duration, cfg.seed);
    let runtime = tokio::runtime::Handle::current();
    let (one_s, start) = (Arc::clone(one), one.start);
    let launch = move |intended: Instant| {
        let class = one_s.mix.pick(&mut rng);
        one_s.live.offered.fetch_add(1, Ordering::Relaxed);
        let (one, done) = (Arc::clone(&one_s), done_tx.clone());
        runtime.spawn(async move {
            one.run(class, intended).await;
            drop(done);
        });
    };
    // The schedule runs on a thread of its own: a task on the runtime would queue behind
    // thousands of request tasks and tokio's 1 ms timer, and fall behind at high rates.
    // Each request is spawned onto the runtime at its intended time; any delay until it is
    // actually sent is measured (send lag) and counted in its latency.
    let scheduler = std::thread::Builder::new()
        .name("spillway-load-scheduler".into())
        .spawn(move || {
            let mut launch = launch;
            for t in schedule {
                let intended = start + Duration::from_secs_f64(t);
                let now = Instant::now();
                if intended > now {
                    std::thread::sleep(intended - now);
                }
                launch(intended);
            }
        });
    match scheduler {
        Ok(thread) => {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        Err(e) => return Err(LoadError::Runtime(e)),
    }
    // Every task ends by its deadline; the grace period only covers scheduling delays.
    let _ = tokio::time::timeout(cfg.timeout + Duration::from_secs(1), done_rx.recv()).await;
    Ok(())
}

/// Closed loop: `n` clients, client `i` always sending class `class_at((i + ½) / n)`, each
/// starting its next request when the last one ended, until `end`. Clients start spread over
/// the first 10 ms: all at one instant would be a burst no real pool of clients sends.
async fn closed_loop(one: &Arc<OneRequest>, n: u32, end: Instant) {
    let mut clients = tokio::task::JoinSet::new();
    for i in 0..n {
        let one = Arc::clone(one);
        clients.spawn(async move {
            let class = one.mix.class_at((f64::from(i) + 0.5) / f64::from(n));
            let first = one.start + Duration::from_micros(u64::from(i) * 10_000 / u64::from(n));
            tokio::time::sleep_until(first.into()).await;
            loop {
                let intended = Instant::now();
                if intended >= end {
                    return;
                }
                one.live.offered.fetch_add(1, Ordering::Relaxed);
                one.run(class, intended).await;
            }
        });
    }
    while clients.join_next().await.is_some() {}
}

fn spread(h: &Histogram<u64>) -> SendLag {
    if h.is_empty() {
        return SendLag::default();
    }
    SendLag {
        count: h.len(),
        p50_ms: h.value_at_quantile(0.5) as f64 / 1000.0,
        p99_ms: h.value_at_quantile(0.99) as f64 / 1000.0,
        max_ms: h.max() as f64 / 1000.0,
    }
}

fn set_first_error(recorder: &Mutex<Recorder>, e: &str) {
    if let Ok(mut r) = recorder.lock() {
        r.set_meta("first_error", e);
    }
}

fn set_meta(r: &mut Recorder, cfg: &LoadConfig) {
    r.set_meta("tool", "spillway load");
    r.set_meta("target", cfg.target.to_string());
    r.set_meta("url", cfg.target_url());
    r.set_meta("rate", format!("{:?}", cfg.shape));
    r.set_meta("arrivals", format!("{:?}", cfg.arrivals).to_lowercase());
    r.set_meta("duration_s", cfg.duration.as_secs_f64());
    r.set_meta("behaviour", cfg.behaviour.as_str());
    r.set_meta("timeout_ms", cfg.timeout.as_secs_f64() * 1e3);
    r.set_meta(
        "attempt_timeout_ms",
        cfg.effective_attempt_timeout().as_secs_f64() * 1e3,
    );
    r.set_meta("max_attempts", cfg.retry.max_attempts);
    r.set_meta("seed", cfg.seed);
    if let Some(n) = cfg.connections {
        r.set_meta("connections", n);
    }
    let classes: Vec<serde_json::Value> = cfg
        .mix
        .classes()
        .iter()
        .map(|c| {
            serde_json::json!({
                "criticality": c.criticality.as_str(),
                "customer": c.customer,
                "route": c.route,
                "cost": c.cost,
                "weight": c.weight,
            })
        })
        .collect();
    r.set_meta("classes", classes);
}

#[cfg(test)]
mod tests;
