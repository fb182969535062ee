//! Fleet-wide quotas: the lease client that shares each global quota among the live instances
//! (proxies or tower services) through Redis. Behind the `fleet` feature.
//!
//! Why leases and not a store call per request: Envoy's global rate limit service answers every
//! request with a round trip to a service in front of Redis, so every request waits on the
//! network and the store's load grows with traffic. Google's Doorman instead hands each client
//! a *lease* on a share of a global capacity, renewed periodically, and the client enforces it
//! locally. That is what this does: the token buckets stay in `spillway-core`'s [`QuotaBook`]
//! (the request path is unchanged and never waits), and one task per process, every lease
//! interval,
//!
//! 1. reads each shared bucket's demand — the cost offered to it per second, admitted or
//!    refused, smoothed while steady and followed when it shifts, over the last eight
//!    seconds for a bucket with a few requests a second ([`QuotaBook::offered`],
//!    [`DemandEstimate`]);
//! 2. sends the buckets with traffic (an idle one once more, as leaving it; [`IDLE_AFTER`]),
//!    each with its demand and the upper bound of it this instance asks for itself
//!    ([`DemandEstimate::upper`]),
//!    in one `EVALSHA` of `share.lua`, which renews this instance's membership (a TTL
//!    of two lease intervals, so an instance that stops renewing drops out within two
//!    intervals and its share returns to the others), stores the demand, and computes this
//!    instance's share max-min fair over the live instances' demands, atomically;
//! 3. re-rates the buckets with the shares ([`QuotaBook::set_rate`]).
//!
//! So the store sees one round trip per instance per interval, whatever the request rate, and
//! each bucket's level is computed about twice per interval, whatever the fleet's size (the
//! script keeps it for half an interval; `share.lua` says why).
//! The proxy (`[admission.quota] store`) and the tower layer
//! ([`SpillwayLayer::fleet_store`](crate::server::SpillwayLayer::fleet_store)) run the same
//! [`Leaser`] against the same keys, so proxies and tower services can share one quota.
//!
//! Failure is never worse than the static split (Doorman's "safe capacity"): every store call
//! is bounded by half an interval; while the store cannot be reached the last lease is kept for
//! two intervals (as long as the others still count this instance), then each rate moves
//! linearly to the static `global / tasks` over two more intervals, and stays there. The first
//! failure of an outage is logged once, each one counted in [`STORE_ERRORS`]; the mode is the
//! gauge [`LEASE_MODE`] and [`LeaseStatus::mode`]. When the store answers again the next
//! interval's lease applies: back within one or two intervals. An instance that stops leaves
//! the member set at once ([`Leaser::leave`]; a crashed one by the TTL).
//!
//! Keys (all under one hash tag, so a Redis Cluster keeps them in one slot for the script):
//! `{spillway}:quota:members` (sorted set: instance id → expiry) and
//! `{spillway}:quota:demand:<CRITICALITY>:c:<customer>` / `…:<CRITICALITY>:default` (hash:
//! instance id → demand), all expiring after four intervals unused. Instances agree on a
//! customer's global quota through their configurations; the store holds no configuration.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use serde::Serialize;
use spillway_core::controller::AdmissionController;
use spillway_core::quota::{DemandEstimate, QuotaBook, QuotaConfig, DEFAULT_LEASE_INTERVAL};
use spillway_core::ConfigError;

mod book;
mod client;
#[cfg(test)]
mod tests;

pub use book::{LeaseBook, Report, IDLE_AFTER};
pub use client::{check_store_url, parse_reply, redacted, Client};

/// Counter: lease round trips that failed (unreachable, timed out, refused).
pub const STORE_ERRORS: &str = "spillway_quota_store_errors_total";
/// Counter: lease round trips made (one per interval per instance while a store is set).
pub const STORE_CALLS: &str = "spillway_quota_store_calls_total";
/// Gauge: 0 static split (no store, or fallen back), 1 leased, 2 holding the last lease, 3
/// decaying from it to the static split.
pub const LEASE_MODE: &str = "spillway_quota_lease_mode";
/// Gauge: live instances sharing the quotas at the last lease.
pub const LEASE_MEMBERS: &str = "spillway_quota_lease_members";

/// The member set's key.
pub const MEMBERS_KEY: &str = "{spillway}:quota:members";

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
    /// The value of the [`LEASE_MODE`] gauge.
    pub fn gauge(self) -> f64 {
        match self {
            LeaseMode::Static => 0.0,
            LeaseMode::Leased => 1.0,
            LeaseMode::Holding => 2.0,
            LeaseMode::Decaying => 3.0,
        }
    }
}

/// One shared bucket in a status page.
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

/// Where this instance's quota rates come from (the proxy's `/status` `quota_lease`).
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

/// Registers the lease metrics' descriptions with the installed recorder.
pub fn describe() {
    metrics::describe_counter!(STORE_ERRORS, "Fleet quota lease round trips that failed.");
    metrics::describe_counter!(STORE_CALLS, "Fleet quota lease round trips made.");
    metrics::describe_gauge!(
        LEASE_MODE,
        "Where quota rates come from: 0 static split, 1 leased, 2 holding, 3 decaying."
    );
    metrics::describe_gauge!(LEASE_MEMBERS, "Live instances at the last quota lease.");
}

/// A random id for this process's membership (a restart joins as a new member; the old one
/// expires with its TTL). One per process and role: the proxy also records it as the setter of
/// the fleet controls it sets, so the two are one identity.
pub fn instance_id() -> String {
    format!("{}-{:016x}", std::process::id(), fastrand::u64(..))
}

/// The store key of a bucket's demand hash (see the module docs).
pub fn demand_key(customer: Option<&str>, c: spillway_core::Criticality) -> String {
    match customer {
        Some(name) => format!("{{spillway}}:quota:demand:{c}:c:{name}"),
        None => format!("{{spillway}}:quota:demand:{c}:default"),
    }
}

/// Where a fleet's shares are agreed and how often: the store part of a [`QuotaConfig`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetStore {
    /// `redis://host:port/db` (or `rediss://…` with the `fleet-tls` feature).
    pub url: String,
    /// File holding the store's password (its first line).
    pub password_file: Option<String>,
    /// How often an instance reports its demand and takes its share.
    pub lease_interval: Duration,
}

impl FleetStore {
    /// The store at `url` with the default lease interval ([`DEFAULT_LEASE_INTERVAL`]).
    pub fn new(url: &str) -> Result<FleetStore, ConfigError> {
        let store = FleetStore {
            url: url.to_string(),
            password_file: None,
            lease_interval: DEFAULT_LEASE_INTERVAL,
        };
        store.validate()?;
        Ok(store)
    }

    /// The store a quota configuration names, if any.
    pub fn from_quota(cfg: &QuotaConfig) -> Option<FleetStore> {
        Some(FleetStore {
            url: cfg.store.clone()?,
            password_file: cfg.store_password_file.clone(),
            lease_interval: cfg.lease_interval,
        })
    }

    /// This store with another lease interval (50 ms ..= 10 s).
    pub fn lease_interval(mut self, d: Duration) -> Result<FleetStore, ConfigError> {
        self.lease_interval = d;
        self.validate()?;
        Ok(self)
    }

    /// This store with its password read from the first line of `path` (at each connection).
    pub fn password_file(mut self, path: impl Into<String>) -> FleetStore {
        self.password_file = Some(path.into());
        self
    }

    /// Checks the URL and the interval, as `[admission.quota]` would.
    pub fn validate(&self) -> Result<(), ConfigError> {
        QuotaConfig {
            store: Some(self.url.clone()),
            store_password_file: self.password_file.clone(),
            lease_interval: self.lease_interval,
            ..QuotaConfig::default()
        }
        .validate()?;
        check_store_url(&self.url).map_err(|why| {
            ConfigError::new(
                "quota.store",
                format!("{:?}: {why}", self.url),
                "a redis://host:port/db URL (rediss:// in a build with TLS)",
            )
        })
    }
}

/// One instance's lease client: the connection, the instance id and the [`LeaseBook`]. The
/// caller owns the cadence (one [`Leaser::step`] per lease interval) and the book to re-rate;
/// the proxy follows its configuration through reloads, the tower layer has one book for good.
pub struct Leaser {
    instance: String,
    client: Option<(FleetStore, Client)>,
    lease: LeaseBook,
    failing: bool,
    errors: u64,
}

impl std::fmt::Debug for Leaser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leaser")
            .field("instance", &self.instance)
            .field("mode", &self.lease.mode)
            .finish_non_exhaustive()
    }
}

impl Leaser {
    /// A client that joins the fleet as `instance` (see [`instance_id`]).
    pub fn new(instance: String) -> Leaser {
        Leaser {
            instance,
            client: None,
            lease: LeaseBook::default(),
            failing: false,
            errors: 0,
        }
    }

    /// This instance's id in the store.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The open connection, if any (for other small commands on the same store).
    pub fn client(&mut self) -> Option<&mut Client> {
        self.client.as_mut().map(|(_, c)| c)
    }

    /// Drops the connection (the store setting went away); the next step reconnects.
    pub fn disconnect(&mut self) {
        self.client = None;
    }

    /// One lease round against `store` for `book`: read the demand, connect if needed, call
    /// the script within half an interval, re-rate the buckets (or fall back), and say how it
    /// went. Never fails: a store that does not answer is a mode of the status.
    pub async fn step(&mut self, book: &QuotaBook, store: &FleetStore) -> LeaseStatus {
        let now = Instant::now();
        let reports = self.lease.demands(book, now, store.lease_interval);
        let budget = store.lease_interval / 2;
        let same = |k: &FleetStore| k.url == store.url && k.password_file == store.password_file;
        if !matches!(&self.client, Some((k, _)) if same(k)) {
            self.client = None;
            match Client::connect(&store.url, store.password_file.as_deref(), budget).await {
                Ok(c) => self.client = Some((store.clone(), c)),
                Err(e) => return self.failed(book, store, now, e),
            }
        }
        let ttl = store.lease_interval * 2;
        let result = match self.client.as_mut() {
            // Half an interval: each bucket's level is computed about twice per interval
            // whatever the fleet's size, and no share rests on a level older than that. A
            // call whose demand just shifted has the levels computed afresh (and kept for the
            // others), so a shift is not applied to a level from before it.
            Some((_, c)) => {
                let reuse = if self.lease.shifted {
                    Duration::ZERO
                } else {
                    budget
                };
                c.lease(&self.instance, ttl, reuse, &reports, budget).await
            }
            None => Err("no connection".into()),
        };
        metrics::counter!(STORE_CALLS).increment(1);
        match result {
            Ok((members, shares)) => {
                if std::mem::take(&mut self.failing) {
                    tracing::info!(
                        store = %redacted(&store.url),
                        "quota store answers again: leased shares apply"
                    );
                }
                self.lease.granted(book, &reports, members, &shares, now);
                self.status(book, store, None)
            }
            Err(e) => {
                // A fresh connection at the next step rather than the manager's: after a
                // failed call it holds the failed reconnect attempt and hands it to the next
                // call too, so a store that came back was seen an interval later than needed
                // (rejoining took three intervals, not two).
                self.client = None;
                self.failed(book, store, now, e)
            }
        }
    }

    fn failed(
        &mut self,
        book: &QuotaBook,
        store: &FleetStore,
        now: Instant,
        e: String,
    ) -> LeaseStatus {
        self.lease.fail(book, store.lease_interval, now);
        self.errors += 1;
        metrics::counter!(STORE_ERRORS).increment(1);
        if !std::mem::replace(&mut self.failing, true) {
            tracing::warn!(
                store = %redacted(&store.url),
                error = %e,
                "quota store unreachable: keeping the last lease, then the static global / \
                 tasks split until it answers (logged once per outage)"
            );
        }
        self.status(book, store, Some(e))
    }

    fn status(&self, book: &QuotaBook, store: &FleetStore, err: Option<String>) -> LeaseStatus {
        let lease = &self.lease;
        metrics::gauge!(LEASE_MODE).set(lease.mode.gauge());
        metrics::gauge!(LEASE_MEMBERS).set(lease.members as f64);
        let shares = book
            .shared_buckets()
            .into_iter()
            .map(|b| ShareStatus {
                customer: b.customer.map(str::to_string),
                criticality: b.criticality,
                global: b.global,
                demand: lease.demand.get(&b.index).map_or(0.0, DemandEstimate::get),
                rate: b.rate,
            })
            .collect();
        LeaseStatus {
            store: redacted(&store.url),
            instance: self.instance.clone(),
            mode: lease.mode,
            members: lease.members,
            last_lease_ms_ago: lease.last.map(|t| t.elapsed().as_millis() as u64),
            errors: self.errors,
            last_error: err,
            shares,
        }
    }

    /// Leaves the member set now (best effort, within `budget`), so the others' next leases
    /// share this instance's part out rather than waiting for its TTL.
    pub async fn leave(&mut self, budget: Duration) {
        if let Some((_, c)) = self.client.as_mut() {
            c.leave(&self.instance, budget).await;
        }
    }
}

/// The tower layer's lease task and what it last saw (shared by every clone of the layer;
/// the task ends, leaving the fleet, once the last clone is dropped).
#[derive(Debug)]
pub(crate) struct FleetLease {
    status: Mutex<Option<LeaseStatus>>,
}

impl FleetLease {
    /// Starts leasing `controller`'s quotas through `store` on the current tokio runtime.
    pub(crate) fn start(
        controller: AdmissionController,
        store: FleetStore,
    ) -> Result<Arc<FleetLease>, ConfigError> {
        store.validate()?;
        let handle = tokio::runtime::Handle::try_current().map_err(|_| {
            ConfigError::new(
                "server.fleet_store",
                "called outside a tokio runtime",
                "a call from inside the runtime that serves (the lease task runs on it)",
            )
        })?;
        describe();
        let me = Arc::new(FleetLease {
            status: Mutex::new(None),
        });
        handle.spawn(run(Arc::downgrade(&me), controller, store));
        Ok(me)
    }

    pub(crate) fn status(&self) -> Option<LeaseStatus> {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

async fn run(weak: Weak<FleetLease>, controller: AdmissionController, store: FleetStore) {
    let mut leaser = Leaser::new(instance_id());
    let interval = store.lease_interval;
    loop {
        let started = tokio::time::Instant::now();
        if weak.strong_count() == 0 {
            leaser.leave(interval / 2).await;
            return;
        }
        let status = leaser.step(controller.quota(), &store).await;
        let Some(me) = weak.upgrade() else {
            leaser.leave(interval / 2).await;
            return;
        };
        *me.status.lock().unwrap_or_else(|p| p.into_inner()) = Some(status);
        drop(me);
        tokio::time::sleep_until(started + interval).await;
    }
}
