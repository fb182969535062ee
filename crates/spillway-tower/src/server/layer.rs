//! [`SpillwayLayer`]: the configuration of the server side, built once and shared.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Extensions, HeaderName};
use ipnet::IpNet;
use spillway_core::controller::{AdmissionConfig, AdmissionController};
use spillway_core::{ConfigError, Criticality, SystemClock};
use tower_layer::Layer;

use super::classify::{Classifier, CustomerSource, OperationSource, RequestView, Route};
use super::Spillway;
use crate::metrics::labels::{MetricLabels, DEFAULT_MAX_VALUES};

/// State shared by every clone of the service.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) controller: AdmissionController,
    pub(crate) classifier: Classifier,
    pub(crate) measure_cpu: bool,
    pub(crate) cost_headers: bool,
    pub(crate) orca: bool,
    pub(crate) metrics: bool,
    /// The caps on distinct customer and operation label values.
    pub(crate) labels: Arc<MetricLabels>,
    pub(crate) default_retry_after: Duration,
    pub(crate) gauge_every: u64,
    pub(crate) tick: Arc<AtomicU64>,
    /// Last utilisation read from a snapshot (f64 bits), for the ORCA header.
    pub(crate) utilisation: Arc<AtomicU64>,
    /// The fleet lease task, when quotas are shared through a store (`fleet` feature).
    #[cfg(feature = "fleet")]
    pub(crate) fleet: Option<Arc<crate::lease::FleetLease>>,
}

impl Shared {
    /// Takes a controller snapshot every `gauge_every` admissions, publishing the gauges and
    /// caching utilisation for the ORCA header. (A snapshot locks the queue and allocates;
    /// per request it would cost every request for values read every few seconds.)
    pub(crate) fn maybe_snapshot(&self) {
        if (self.metrics || self.orca)
            && self.tick.fetch_add(1, Ordering::Relaxed) % self.gauge_every == 0
        {
            let s = self.controller.snapshot();
            self.utilisation
                .store(s.utilisation.to_bits(), Ordering::Relaxed);
            if self.metrics {
                crate::metrics::gauges(s.in_flight, s.limit, s.utilisation);
            }
        }
    }

    /// Utilisation as of the last snapshot.
    pub(crate) fn utilisation(&self) -> f64 {
        f64::from_bits(self.utilisation.load(Ordering::Relaxed))
    }
}

/// Adds Spillway's admission control to a tower HTTP service (axum, hyper, tonic).
///
/// Per request: classify (criticality, deadline, attempt, customer, operation — trusting
/// headers only from trusted peers) → [`AdmissionController::admit`] → serve, wait in the
/// queue (raced against `give_up_at`), or answer with a rejection mapped for HTTP or gRPC. The
/// permit is held until the response *body* ends. Defaults: nothing trusted, default
/// criticality `CRITICAL` (SRE book ch. 21: the default for production traffic), customer
/// `"default"`, estimated cost 1.0, CPU measuring off, response headers off, metrics on,
/// `Retry-After` 1 s when the controller gives none.
#[derive(Clone)]
pub struct SpillwayLayer {
    shared: Arc<Shared>,
}

impl fmt::Debug for SpillwayLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpillwayLayer")
            .field("classifier", &self.shared.classifier)
            .field("measure_cpu", &self.shared.measure_cpu)
            .field("cost_headers", &self.shared.cost_headers)
            .field("orca", &self.shared.orca)
            .field("metrics", &self.shared.metrics)
            .finish_non_exhaustive()
    }
}

impl Default for SpillwayLayer {
    /// The one-line start: [`AdmissionConfig::default`] (the zero-configuration policy
    /// `spillway proxy` runs: an adaptive limit needing no capacity figure) on the system
    /// clock, and the layer's defaults (nobody trusted, so every request is `CRITICAL` unless a
    /// route says otherwise).
    fn default() -> Self {
        SpillwayLayer::new(default_controller())
    }
}

/// The controller [`SpillwayLayer::default`] uses. The default configuration is a constant the
/// crate's tests validate (`default_layer_builds`), so the error branch is unreachable.
fn default_controller() -> AdmissionController {
    #[allow(clippy::expect_used)]
    AdmissionController::new(AdmissionConfig::default(), Arc::new(SystemClock))
        .expect("the default AdmissionConfig is valid")
}

impl SpillwayLayer {
    /// A layer admitting through `controller`, reading time from the system clock.
    pub fn new(controller: AdmissionController) -> Self {
        SpillwayLayer {
            shared: Arc::new(Shared {
                controller,
                classifier: Classifier::default(),
                measure_cpu: false,
                cost_headers: false,
                orca: false,
                metrics: true,
                labels: Arc::new(MetricLabels::new(DEFAULT_MAX_VALUES, DEFAULT_MAX_VALUES)),
                default_retry_after: Duration::from_secs(1),
                gauge_every: 64,
                tick: Arc::new(AtomicU64::new(0)),
                utilisation: Arc::new(AtomicU64::new(0)),
                #[cfg(feature = "fleet")]
                fleet: None,
            }),
        }
    }

    fn edit(mut self, f: impl FnOnce(&mut Shared)) -> Self {
        f(Arc::make_mut(&mut self.shared));
        self
    }

    /// The classification rules (for tests).
    #[cfg(test)]
    pub(crate) fn classifier(&self) -> &Classifier {
        &self.shared.classifier
    }

    /// The controller (for snapshots, dashboards).
    pub fn controller(&self) -> &AdmissionController {
        &self.shared.controller
    }

    /// Trusts peers in `cidr` (e.g. `10.0.0.0/8`, `::1/128`) to set criticality and customer.
    pub fn trust(self, cidr: &str) -> Result<Self, ConfigError> {
        let net: IpNet = cidr.trim().parse().map_err(|_| {
            ConfigError::new(
                "server.trusted",
                cidr,
                "a CIDR such as 10.0.0.0/8 or ::1/128",
            )
        })?;
        Ok(self.trust_net(net))
    }

    /// Trusts peers in `net`.
    pub fn trust_net(self, net: IpNet) -> Self {
        self.edit(|s| s.classifier.trusted.push(net))
    }

    /// Trusts every caller (only behind a proxy that strips or sets the headers itself).
    /// Without peer information and without this, nobody is trusted.
    pub fn trust_all(self, yes: bool) -> Self {
        self.edit(|s| s.classifier.trust_all = yes)
    }

    /// Criticality for requests that may not or do not say (default `CRITICAL`).
    pub fn default_criticality(self, c: Criticality) -> Self {
        self.edit(|s| s.classifier.default_criticality = c)
    }

    /// A route: paths under `prefix`, on a segment boundary (`/batch` is `/batch` and
    /// `/batch/…`, not `/batchjobs`), default to `criticality` (longest prefix wins; the prefix
    /// is also the operation name under [`OperationSource::Route`]).
    pub fn route(self, prefix: &str, criticality: Criticality) -> Self {
        self.edit(|s| {
            s.classifier.routes.push(Route {
                prefix: Arc::from(prefix),
                criticality,
                cost: None,
            })
        })
    }

    /// A route with its own cost estimate (cost units per request, finite and > 0).
    pub fn route_with_cost(
        self,
        prefix: &str,
        criticality: Criticality,
        cost: f64,
    ) -> Result<Self, ConfigError> {
        check_cost("server.routes.cost", cost)?;
        Ok(self.edit(|s| {
            s.classifier.routes.push(Route {
                prefix: Arc::from(prefix),
                criticality,
                cost: Some(cost),
            })
        }))
    }

    /// A path (exact match) answered as a health check: it bypasses shedding.
    pub fn health_path(self, path: &str) -> Self {
        self.edit(|s| s.classifier.health_paths.push(Arc::from(path)))
    }

    /// A predicate marking health checks.
    pub fn health_check(
        self,
        f: impl Fn(&RequestView<'_>) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.edit(|s| s.classifier.health_fn = Some(Arc::new(f)))
    }

    /// Where customer identity comes from (default: the customer header from trusted peers).
    pub fn customer(self, source: CustomerSource) -> Self {
        self.edit(|s| s.classifier.customer = source)
    }

    /// Customers from an API-key header: `keys` maps key → customer name.
    pub fn customer_api_keys<K, C>(
        self,
        header: HeaderName,
        keys: impl IntoIterator<Item = (K, C)>,
    ) -> Self
    where
        K: Into<String>,
        C: AsRef<str>,
    {
        let keys: HashMap<String, Arc<str>> = keys
            .into_iter()
            .map(|(k, c)| (k.into(), Arc::from(c.as_ref())))
            .collect();
        self.customer(CustomerSource::ApiKey { header, keys })
    }

    /// The customer charged when none is identified (default `"default"`).
    pub fn default_customer(self, name: &str) -> Self {
        self.edit(|s| s.classifier.default_customer = Arc::from(name))
    }

    /// How the operation name is chosen (default: the matching route prefix, else `other`).
    pub fn operation(self, source: OperationSource) -> Self {
        self.edit(|s| s.classifier.operation = source)
    }

    /// How to find the peer's address in request extensions (default: a `SocketAddr`
    /// extension). For axum: `|e| e.get::<ConnectInfo<SocketAddr>>().map(|c| c.0)`.
    pub fn peer_addr(
        self,
        f: impl Fn(&Extensions) -> Option<SocketAddr> + Send + Sync + 'static,
    ) -> Self {
        self.edit(|s| s.classifier.peer = Arc::new(f))
    }

    /// Estimated cost of a request in cost units (finite, > 0; default 1.0). With
    /// [`measure_cpu`](Self::measure_cpu) cost units are CPU-seconds, so estimate in those.
    pub fn estimated_cost(self, cost: f64) -> Result<Self, ConfigError> {
        check_cost("server.estimated_cost", cost)?;
        Ok(self.edit(|s| s.classifier.estimated_cost = cost))
    }

    /// Measure each request's CPU time (handler polls and body polls) and report it as the
    /// actual cost (CPU-seconds). Two thread-clock reads per poll.
    pub fn measure_cpu(self, yes: bool) -> Self {
        self.edit(|s| s.measure_cpu = yes)
    }

    /// Add `x-spillway-cost`, `x-spillway-queue-ms`, `x-spillway-service-ms` to responses.
    /// The cost is the CPU measured up to the response head (if measuring), else the estimate.
    pub fn cost_headers(self, yes: bool) -> Self {
        self.edit(|s| s.cost_headers = yes)
    }

    /// Add the ORCA `endpoint-load-metrics` header with the controller's utilisation as
    /// `application_utilization` (as of the latest snapshot, taken every 64 requests).
    pub fn orca(self, yes: bool) -> Self {
        self.edit(|s| s.orca = yes)
    }

    /// Emit metrics through the `metrics` facade (default on).
    pub fn metrics(self, yes: bool) -> Self {
        self.edit(|s| s.metrics = yes)
    }

    /// At most `max` distinct customers get metric series of their own (default 100); later
    /// ones are counted under `other`, so callers that choose their customer (a trusted
    /// header, peer addresses) cannot grow the metrics without bound. The first `max` seen keep
    /// their series for good (`metrics::labels` says why). Values seen before this call start
    /// afresh.
    pub fn max_customer_labels(self, max: usize) -> Self {
        self.edit(|s| {
            s.labels = Arc::new(MetricLabels::new(max, s.labels.operations.max()));
        })
    }

    /// At most `max` distinct operations get metric series of their own (default 100), as
    /// [`SpillwayLayer::max_customer_labels`] for customers: an operation taken from the path
    /// or a header is whatever callers send.
    pub fn max_operation_labels(self, max: usize) -> Self {
        self.edit(|s| {
            s.labels = Arc::new(MetricLabels::new(s.labels.customers.max(), max));
        })
    }

    /// Shares the controller's customer quotas with every other instance leasing from the
    /// Redis store at `url` (`redis://host:port/db`), instead of each enforcing the static
    /// `global / tasks` split: every lease interval (500 ms) this instance reports its demand
    /// per customer × criticality and takes its max-min fair share of the global quota,
    /// computed in Redis (the [`lease`](crate::lease) module; the proxy's
    /// `[admission.quota] store` speaks the same protocol, so proxies and services can share
    /// a quota). The request path never waits on the store; when it is unreachable, the last
    /// lease holds and then decays to the static split. Must be called inside the tokio
    /// runtime that serves: the lease task runs on it, and leaves the fleet once the last clone
    /// of the layer (and its services) is dropped. Calling it again replaces the store.
    #[cfg(feature = "fleet")]
    pub fn fleet_store(self, url: &str) -> Result<Self, ConfigError> {
        self.fleet_store_with(crate::lease::FleetStore::new(url)?)
    }

    /// [`fleet_store`](Self::fleet_store) with every store setting (lease interval, password
    /// file).
    #[cfg(feature = "fleet")]
    pub fn fleet_store_with(self, store: crate::lease::FleetStore) -> Result<Self, ConfigError> {
        let lease = crate::lease::FleetLease::start(self.shared.controller.clone(), store)?;
        Ok(self.edit(|s| s.fleet = Some(lease)))
    }

    /// Where this instance's quota rates come from, as of the last lease round (`None`: no
    /// store, or no round yet).
    #[cfg(feature = "fleet")]
    pub fn fleet_status(&self) -> Option<crate::lease::LeaseStatus> {
        self.shared.fleet.as_ref().and_then(|f| f.status())
    }

    /// `Retry-After` when the controller gives none (rounded up to whole seconds, ≥ 1 s).
    pub fn default_retry_after(self, d: Duration) -> Self {
        self.edit(|s| s.default_retry_after = d)
    }
}

fn check_cost(field: &'static str, cost: f64) -> Result<(), ConfigError> {
    if cost.is_finite() && cost > 0.0 {
        Ok(())
    } else {
        Err(ConfigError::new(field, cost, "a finite number > 0"))
    }
}

impl<S> Layer<S> for SpillwayLayer {
    type Service = Spillway<S>;

    fn layer(&self, inner: S) -> Spillway<S> {
        Spillway {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}
