//! Fleet-wide quotas: the lease client that shares each global quota among the live proxies
//! through Redis (`[admission.quota] store`).
//!
//! Why leases and not a store call per request: Envoy's global rate limit service answers every
//! request with a round trip to a service in front of Redis, so every request waits on the
//! network and the store's load grows with traffic. Google's Doorman instead hands each client
//! a *lease* on a share of a global capacity, renewed periodically, and the client enforces it
//! locally. That is what this does: the token buckets stay in `spillway-core`'s [`QuotaBook`]
//! (the request path is unchanged and never waits), and one task per process, every
//! `lease_interval_ms`,
//!
//! 1. reads each shared bucket's demand — the cost offered to it per second, admitted or
//!    refused, smoothed over about a second ([`QuotaBook::offered`]);
//! 2. sends it in one `EVALSHA` of `share.lua`, which renews this instance's membership (a TTL
//!    of two lease intervals, so an instance that stops renewing drops out within two
//!    intervals and its share returns to the others), stores the demand, and computes this
//!    instance's share max-min fair over the live instances' demands, atomically;
//! 3. re-rates the buckets with the shares ([`QuotaBook::set_rate`]).
//!
//! So the store sees one round trip per instance per interval, whatever the request rate. The
//! script's own work is about (shared buckets × live instances) per call: a few hundred
//! microseconds for four buckets and three instances (bench/results/fleet-quotas.md); fleets of
//! thousands of instances with large customer tables would want the share computed once per
//! interval rather than per call (not done here).
//!
//! Failure is never worse than the static split (Doorman's "safe capacity"): every store call
//! is bounded by half an interval; while the store cannot be reached the last lease is kept for
//! two intervals (as long as the others still count this instance), then each rate moves
//! linearly to the static `global / tasks` over two more intervals, and stays there. The first
//! failure of an outage is logged once, each one counted in `spillway_quota_store_errors_total`;
//! the mode is the gauge `spillway_quota_lease_mode` and `/status`'s `quota_lease`. When the
//! store answers again the next interval's lease applies: back within one or two intervals. A
//! proxy that shuts down leaves the member set at once (a crashed one by the TTL).
//!
//! Keys (all under one hash tag, so a Redis Cluster keeps them in one slot for the script):
//! `{spillway}:quota:members` (sorted set: instance id → expiry) and
//! `{spillway}:quota:demand:<CRITICALITY>:c:<customer>` / `…:<CRITICALITY>:default` (hash:
//! instance id → demand), all expiring after four intervals unused. Instances agree on a
//! customer's global quota through their configurations; the store holds no configuration.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use serde::Serialize;
use spillway_core::quota::{QuotaBook, QuotaConfig};

use crate::state::ProxyState;

pub(crate) mod client;
#[cfg(test)]
mod tests;

/// Counter: lease round trips that failed (unreachable, timed out, refused).
pub const STORE_ERRORS: &str = "spillway_quota_store_errors_total";
/// Counter: lease round trips made (one per interval per instance while a store is set).
pub const STORE_CALLS: &str = "spillway_quota_store_calls_total";
/// Gauge: 0 static split (no store, or fallen back), 1 leased, 2 holding the last lease, 3
/// decaying from it to the static split.
pub const LEASE_MODE: &str = "spillway_quota_lease_mode";
/// Gauge: live instances sharing the quotas at the last lease.
pub const LEASE_MEMBERS: &str = "spillway_quota_lease_members";

/// Where an instance's quota rates come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseMode {
    /// `global / tasks`: no store configured, or no lease for four intervals.
    Static,
    /// The store's latest share.
    Leased,
    /// The store is unreachable; the last lease still applies (for two intervals).
    Holding,
    /// The store is unreachable; rates move from the last lease to the static split.
    Decaying,
}

impl LeaseMode {
    fn gauge(self) -> f64 {
        match self {
            LeaseMode::Static => 0.0,
            LeaseMode::Leased => 1.0,
            LeaseMode::Holding => 2.0,
            LeaseMode::Decaying => 3.0,
        }
    }
}

/// One shared bucket in `/status`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShareStatus {
    /// The customer; `None` for the default slot.
    pub customer: Option<String>,
    /// The criticality.
    pub criticality: spillway_core::Criticality,
    /// Global quota, cost units/s.
    pub global: f64,
    /// This instance's demand as last reported, cost units/s.
    pub demand: f64,
    /// The rate enforced now, cost units/s.
    pub rate: f64,
}

/// `/status`'s `quota_lease`: where this instance's quota rates come from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LeaseStatus {
    /// The store, without credentials (`redis://host:port/db`).
    pub store: String,
    /// This instance's id in the store.
    pub instance: String,
    /// Where the rates come from now.
    pub mode: LeaseMode,
    /// Live instances at the last lease.
    pub members: u64,
    /// Milliseconds from the last lease to the last attempt (`None`: none yet).
    pub last_lease_ms_ago: Option<u64>,
    /// Failed round trips since start.
    pub errors: u64,
    /// The last failure, if the store is failing now.
    pub last_error: Option<String>,
    /// Each shared bucket.
    pub shares: Vec<ShareStatus>,
}

/// The lease client's state shared with `/status` (kept across reloads).
#[derive(Debug, Default)]
pub struct Leases {
    status: Mutex<Option<LeaseStatus>>,
    stopped: std::sync::atomic::AtomicBool,
}

impl Leases {
    /// What `/status` shows (`None`: no store configured).
    pub fn status(&self) -> Option<LeaseStatus> {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Stops renewing: the instance drops out of the fleet within two lease intervals and its
    /// share returns to the others (called once the data plane has stopped serving).
    pub fn stop(&self) {
        self.stopped
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn stopped(&self) -> bool {
        self.stopped.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn set(&self, s: Option<LeaseStatus>) {
        *self.status.lock().unwrap_or_else(|p| p.into_inner()) = s;
    }
}

/// Starts the lease client on the current tokio runtime, if there is one; it follows the
/// configuration through reloads (no store: it idles) and ends when `state` is dropped.
pub fn spawn(state: &Arc<ProxyState>) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    describe();
    let weak = Arc::downgrade(state);
    handle.spawn(run(weak));
}

pub(crate) fn describe() {
    metrics::describe_counter!(STORE_ERRORS, "Fleet quota lease round trips that failed.");
    metrics::describe_counter!(STORE_CALLS, "Fleet quota lease round trips made.");
    metrics::describe_gauge!(
        LEASE_MODE,
        "Where quota rates come from: 0 static split, 1 leased, 2 holding, 3 decaying."
    );
    metrics::describe_gauge!(LEASE_MEMBERS, "Live instances at the last quota lease.");
}

/// The store settings a client was built from (a change rebuilds it).
#[derive(Debug, Clone, PartialEq)]
struct StoreKey {
    url: String,
    password_file: Option<String>,
}

async fn run(weak: Weak<ProxyState>) {
    let instance = instance_id();
    let mut client: Option<(StoreKey, client::Client)> = None;
    let mut lease = LeaseBook::default();
    let mut failing = false;
    let mut errors = 0u64;
    loop {
        let Some(state) = weak.upgrade() else { return };
        if state.leases().stopped() {
            // Leave at once rather than by TTL, so the share returns to the others now.
            if let Some((_, c)) = client.as_mut() {
                let budget = state.config().admission.quota.lease_interval / 2;
                c.leave(&instance, budget).await;
            }
            return;
        }
        let rt = state.runtime();
        let qcfg = rt.config.admission.quota.clone();
        let interval = qcfg.lease_interval;
        let Some(url) = qcfg.store.clone() else {
            if client.take().is_some() {
                state.leases().set(None);
            }
            // Every interval, not only on a change: the recorder may be installed after the
            // first pass, and dashboards and alerts on the mode need a sample without a store.
            metrics::gauge!(LEASE_MODE).set(LeaseMode::Static.gauge());
            drop((rt, state));
            tokio::time::sleep(interval).await;
            continue;
        };
        let key = StoreKey {
            url: url.clone(),
            password_file: qcfg.store_password_file.clone(),
        };
        let started = tokio::time::Instant::now();
        let book = rt.controller.quota();
        let now = Instant::now();
        let reports = lease.demands(book, now);
        let budget = interval / 2;
        if !matches!(&client, Some((k, _)) if *k == key) {
            client = match client::Client::connect(&url, key.password_file.as_deref(), budget).await
            {
                Ok(c) => Some((key.clone(), c)),
                Err(e) => {
                    lease.fail(book, &qcfg, now);
                    errors += 1;
                    report_error(&mut failing, &url, &e);
                    publish(&state, &instance, &url, &lease, book, errors, Some(e));
                    drop((rt, state));
                    sleep_rest(started, interval).await;
                    continue;
                }
            };
        }
        let ttl = interval * 2;
        let result = match client.as_mut() {
            Some((_, c)) => c.lease(&instance, ttl, &reports, budget).await,
            None => Err("no connection".into()),
        };
        metrics::counter!(STORE_CALLS).increment(1);
        let err = match result {
            Ok((members, shares)) => {
                if failing {
                    failing = false;
                    tracing::info!(
                        store = %client::redacted(&url),
                        "quota store answers again: leased shares apply"
                    );
                }
                lease.granted(book, &reports, members, &shares, now);
                None
            }
            Err(e) => {
                lease.fail(book, &qcfg, now);
                errors += 1;
                report_error(&mut failing, &url, &e);
                Some(e)
            }
        };
        publish(&state, &instance, &url, &lease, book, errors, err);
        drop((rt, state));
        sleep_rest(started, interval).await;
    }
}

async fn sleep_rest(started: tokio::time::Instant, interval: Duration) {
    tokio::time::sleep_until(started + interval).await;
}

fn report_error(failing: &mut bool, url: &str, e: &str) {
    metrics::counter!(STORE_ERRORS).increment(1);
    if !*failing {
        *failing = true;
        tracing::warn!(
            store = %client::redacted(url),
            error = %e,
            "quota store unreachable: keeping the last lease, then the static global / tasks \
             split until it answers (logged once per outage)"
        );
    }
}

fn publish(
    state: &ProxyState,
    instance: &str,
    url: &str,
    lease: &LeaseBook,
    book: &QuotaBook,
    errors: u64,
    err: Option<String>,
) {
    let mode = lease.mode;
    metrics::gauge!(LEASE_MODE).set(mode.gauge());
    metrics::gauge!(LEASE_MEMBERS).set(lease.members as f64);
    let shares = book
        .shared_buckets()
        .into_iter()
        .map(|b| ShareStatus {
            customer: b.customer.map(str::to_string),
            criticality: b.criticality,
            global: b.global,
            demand: lease.demand.get(&b.index).copied().unwrap_or(0.0),
            rate: b.rate,
        })
        .collect();
    state.leases().set(Some(LeaseStatus {
        store: client::redacted(url),
        instance: instance.to_string(),
        mode,
        members: lease.members,
        last_lease_ms_ago: lease.last.map(|t| t.elapsed().as_millis() as u64),
        errors,
        last_error: err,
        shares,
    }));
}

/// A random id for this process's membership (a restart joins as a new member; the old one
/// expires with its TTL).
fn instance_id() -> String {
    format!("{}-{:016x}", std::process::id(), fastrand::u64(..))
}

/// One bucket's report: the store key and what goes with it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Report {
    /// Bucket index in the book.
    pub index: usize,
    /// Redis key of the bucket's demand hash.
    pub key: String,
    /// Global quota, cost units/s.
    pub global: f64,
    /// This instance's demand, cost units/s.
    pub demand: f64,
}

/// The client's memory of demand and leases, and the fallback arithmetic (no I/O: unit-tested).
#[derive(Debug)]
pub(crate) struct LeaseBook {
    /// Which book the counts below belong to (a reload may build a new controller).
    book: usize,
    /// Per bucket: offered total at the last reading.
    offered: HashMap<usize, f64>,
    /// Per bucket: smoothed demand, cost units/s.
    demand: HashMap<usize, f64>,
    /// Per bucket: the last leased share.
    share: HashMap<usize, f64>,
    read_at: Option<Instant>,
    /// When the last lease was granted.
    last: Option<Instant>,
    members: u64,
    mode: LeaseMode,
    /// Buckets with a first measured rate (the first is taken as it is, not smoothed from 0).
    measured: std::collections::HashSet<usize>,
    /// The store failed since the last lease: the next lease may lower rates, not raise them.
    recovering: bool,
}

impl Default for LeaseBook {
    fn default() -> Self {
        LeaseBook {
            book: 0,
            offered: HashMap::new(),
            demand: HashMap::new(),
            share: HashMap::new(),
            read_at: None,
            last: None,
            members: 0,
            mode: LeaseMode::Static,
            measured: std::collections::HashSet::new(),
            recovering: false,
        }
    }
}

/// Demand is smoothed over this (an exponential average): a second of a 15 requests/s customer
/// is few enough arrivals that one interval's count alone would swing the shares.
const DEMAND_SMOOTHING: Duration = Duration::from_secs(1);

impl LeaseBook {
    /// Reads each shared bucket's demand from `book` at `now`, for the store.
    pub(crate) fn demands(&mut self, book: &QuotaBook, now: Instant) -> Vec<Report> {
        let id = book as *const QuotaBook as usize;
        if id != self.book {
            // A new book (controller rebuilt on reload): its counts start again at 0.
            *self = LeaseBook {
                book: id,
                last: self.last,
                members: self.members,
                recovering: self.recovering,
                ..LeaseBook::default()
            };
        }
        let dt = self
            .read_at
            .map_or(0.0, |t| now.saturating_duration_since(t).as_secs_f64());
        self.read_at = Some(now);
        let alpha = if dt > 0.0 {
            1.0 - (-dt / DEMAND_SMOOTHING.as_secs_f64()).exp()
        } else {
            0.0
        };
        book.shared_buckets()
            .into_iter()
            .map(|b| {
                let total = book.offered(b.index);
                let prev = self.offered.insert(b.index, total);
                let d = self.demand.entry(b.index).or_insert(0.0);
                if let (Some(prev), true) = (prev, dt > 0.0) {
                    let rate = (total - prev).max(0.0) / dt;
                    // Smoothing from 0 would under-report a busy instance for a second or
                    // more after it starts (the simulation's cold start took three intervals
                    // instead of two): the first reading stands as it is.
                    if self.measured.insert(b.index) {
                        *d = rate;
                    } else {
                        *d += alpha * (rate - *d);
                    }
                }
                Report {
                    index: b.index,
                    key: demand_key(b.customer, b.criticality),
                    global: b.global,
                    demand: *d,
                }
            })
            .collect()
    }

    /// A lease arrived: apply the shares. The first one after a failure may come from a store
    /// that restarted empty and so far counts only the first instances back (the first one
    /// alone would get the whole quota): it may lower rates but not raise them; the next
    /// lease, an interval later, counts everyone again.
    pub(crate) fn granted(
        &mut self,
        book: &QuotaBook,
        reports: &[Report],
        members: u64,
        shares: &[f64],
        now: Instant,
    ) {
        let cap: HashMap<usize, f64> = if std::mem::take(&mut self.recovering) {
            book.shared_buckets()
                .into_iter()
                .map(|b| (b.index, b.rate))
                .collect()
        } else {
            HashMap::new()
        };
        for (r, &s) in reports.iter().zip(shares) {
            let s = cap.get(&r.index).map_or(s, |&c| s.min(c));
            book.set_rate(r.index, s);
            self.share.insert(r.index, s);
        }
        self.last = Some(now);
        self.members = members;
        self.mode = LeaseMode::Leased;
    }

    /// No lease this interval: hold the last one for two intervals, then move linearly to
    /// the static split over two more.
    pub(crate) fn fail(&mut self, book: &QuotaBook, cfg: &QuotaConfig, now: Instant) {
        self.recovering = true;
        let hold = cfg.lease_interval * 2;
        let Some(last) = self.last else {
            self.mode = LeaseMode::Static;
            return self.to_static(book);
        };
        let age = now.saturating_duration_since(last);
        if age <= hold {
            self.mode = LeaseMode::Holding;
            return;
        }
        let f = ((age - hold).as_secs_f64() / hold.as_secs_f64()).min(1.0);
        self.mode = if f >= 1.0 {
            LeaseMode::Static
        } else {
            LeaseMode::Decaying
        };
        for b in book.shared_buckets() {
            let fixed = book.static_rate(b.index).unwrap_or(b.rate);
            let from = self.share.get(&b.index).copied().unwrap_or(fixed);
            book.set_rate(b.index, from + (fixed - from) * f);
        }
    }

    fn to_static(&self, book: &QuotaBook) {
        for b in book.shared_buckets() {
            if let Some(r) = book.static_rate(b.index) {
                book.set_rate(b.index, r);
            }
        }
    }
}

/// Whether the lease client can use `url`: it parses as a Redis URL, and `rediss://` only in a
/// build with the `tls` feature. The error says what is accepted.
pub fn check_store_url(url: &str) -> Result<(), String> {
    use redis::IntoConnectionInfo;
    if url.starts_with("rediss://") && !cfg!(feature = "tls") {
        return Err(
            "redis://host:port/db (rediss:// needs a build with the `tls` feature: \
             cargo build --features spillway-proxy/tls)"
                .into(),
        );
    }
    url.into_connection_info()
        .map(|_| ())
        .map_err(|e| format!("a redis://host:port/db or rediss://host:port/db URL ({e})"))
}

/// The store key of a bucket's demand hash (see the module docs).
pub(crate) fn demand_key(customer: Option<&str>, c: spillway_core::Criticality) -> String {
    match customer {
        Some(name) => format!("{{spillway}}:quota:demand:{c}:c:{name}"),
        None => format!("{{spillway}}:quota:demand:{c}:default"),
    }
}

/// The member set's key.
pub(crate) const MEMBERS_KEY: &str = "{spillway}:quota:members";
