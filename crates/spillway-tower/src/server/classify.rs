//! Classification: who sent a request, how critical it is, when its caller gives up, which
//! attempt it is, and what it is (operation) — from headers the layer may or may not trust.
//!
//! Why trust matters: criticality and customer identity are what shedding and quotas key on. If
//! any client could send `x-spillway-criticality: CRITICAL_PLUS` or claim another customer's
//! name, shedding and per-customer limits would protect nobody (SRE book ch. 21: criticality is
//! set by the *service*, and quotas are per authenticated client). So those two headers are
//! honoured only from configured trusted sources (peer address in a trusted CIDR, or `trust_all`
//! for deployments behind an authenticating proxy); everyone else gets the route's default.
//! Deadline and attempt count are honoured from anyone: a caller can only hurt its own request
//! with them (an earlier give-up, or a faster refusal of its own retry).

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Extensions, HeaderMap, HeaderName, HeaderValue, Method, Uri};
use ipnet::IpNet;
use metrics::SharedString;
use spillway_core::Criticality;

use crate::wire::{self, HeaderError};

/// What the classifier may look at (borrowed from the request; nothing is copied).
#[derive(Debug)]
pub struct RequestView<'a> {
    /// Request method.
    pub method: &'a Method,
    /// Request URI.
    pub uri: &'a Uri,
    /// Request headers.
    pub headers: &'a HeaderMap,
    /// Request extensions (connection info lives here).
    pub extensions: &'a Extensions,
    /// The peer's address, if the server recorded it.
    pub peer: Option<SocketAddr>,
    /// Whether the peer is a trusted source.
    pub trusted: bool,
}

/// Finds the peer's address in the request's extensions.
pub type PeerFn = Arc<dyn Fn(&Extensions) -> Option<SocketAddr> + Send + Sync>;
/// Decides whether a request is a health check.
pub type HealthFn = Arc<dyn Fn(&RequestView<'_>) -> bool + Send + Sync>;
/// Names a request's customer; `None` falls back to the default customer.
pub type CustomerFn = Arc<dyn Fn(&RequestView<'_>) -> Option<Arc<str>> + Send + Sync>;
/// Names a request's operation (a metric label: keep the set of values small).
pub type OperationFn = Arc<dyn Fn(&RequestView<'_>) -> SharedString + Send + Sync>;

/// Where a request's customer identity comes from.
#[derive(Clone)]
pub enum CustomerSource {
    /// The [`wire::CUSTOMER`] header, from trusted peers only (default). Allocates the name
    /// once per request (an `Arc<str>`).
    Header,
    /// An API key in `header`, looked up in `keys` (key → customer). Honoured from anyone (the
    /// key is the credential); an unknown or missing key is the default customer. No allocation.
    ApiKey {
        /// The header carrying the key, e.g. `x-api-key`.
        header: HeaderName,
        /// Known keys and the customer each belongs to.
        keys: HashMap<String, Arc<str>>,
    },
    /// The peer's IP address (one customer per client host). Allocates the rendered address.
    PeerIp,
    /// A closure.
    Fn(CustomerFn),
}

impl fmt::Debug for CustomerSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CustomerSource::Header => f.write_str("Header"),
            CustomerSource::ApiKey { header, keys } => f
                .debug_struct("ApiKey")
                .field("header", header)
                .field("keys", &keys.len())
                .finish(),
            CustomerSource::PeerIp => f.write_str("PeerIp"),
            CustomerSource::Fn(_) => f.write_str("Fn(..)"),
        }
    }
}

/// How a request's operation name (metric label and `AdmissionRequest::operation`) is chosen.
#[derive(Clone)]
pub enum OperationSource {
    /// The longest configured route prefix that matches, else `"other"` (default; bounded
    /// label set, no allocation).
    Route,
    /// The full path (fine for gRPC, whose paths are method names; unbounded for REST paths
    /// with IDs in them). Allocates a copy of the path.
    Path,
    /// A closure.
    Fn(OperationFn),
}

impl fmt::Debug for OperationSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OperationSource::Route => f.write_str("Route"),
            OperationSource::Path => f.write_str("Path"),
            OperationSource::Fn(_) => f.write_str("Fn(..)"),
        }
    }
}

/// A path prefix with its own default criticality (for untrusted callers and callers that say
/// nothing) and optionally its own cost estimate.
#[derive(Debug, Clone)]
pub struct Route {
    /// Path prefix, e.g. `/api/batch/`; matched on segment boundaries (`/api/batch` takes
    /// `/api/batch` and `/api/batch/…`, not `/api/batchjobs`).
    pub prefix: Arc<str>,
    /// Criticality of requests that do not (or may not) say.
    pub criticality: Criticality,
    /// Estimated cost of one request, overriding the layer's default.
    pub cost: Option<f64>,
}

/// The classification rules (part of the layer's configuration).
#[derive(Clone)]
pub struct Classifier {
    pub(crate) trusted: Vec<IpNet>,
    pub(crate) trust_all: bool,
    pub(crate) default_criticality: Criticality,
    pub(crate) routes: Vec<Route>,
    pub(crate) health_paths: Vec<Arc<str>>,
    pub(crate) health_fn: Option<HealthFn>,
    pub(crate) customer: CustomerSource,
    pub(crate) default_customer: Arc<str>,
    pub(crate) operation: OperationSource,
    pub(crate) peer: PeerFn,
    pub(crate) estimated_cost: f64,
    /// Set once the "trust configured but no peer address" warning has been given.
    pub(crate) warned_no_peer: Arc<AtomicBool>,
}

impl fmt::Debug for Classifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Classifier")
            .field("trusted", &self.trusted)
            .field("trust_all", &self.trust_all)
            .field("default_criticality", &self.default_criticality)
            .field("routes", &self.routes)
            .field("health_paths", &self.health_paths)
            .field("customer", &self.customer)
            .field("default_customer", &self.default_customer)
            .field("operation", &self.operation)
            .field("estimated_cost", &self.estimated_cost)
            .finish_non_exhaustive()
    }
}

/// The default peer lookup: a `SocketAddr` extension (hyper-util/your accept loop can insert
/// one per connection). For axum use
/// `.peer_addr(|e| e.get::<ConnectInfo<SocketAddr>>().map(|c| c.0))`; for tonic,
/// `TcpConnectInfo::remote_addr`.
pub fn socket_addr_extension(ext: &Extensions) -> Option<SocketAddr> {
    ext.get::<SocketAddr>().copied()
}

impl Default for Classifier {
    fn default() -> Self {
        Classifier {
            trusted: Vec::new(),
            trust_all: false,
            default_criticality: Criticality::default(),
            routes: Vec::new(),
            health_paths: Vec::new(),
            health_fn: None,
            customer: CustomerSource::Header,
            default_customer: Arc::from("default"),
            operation: OperationSource::Route,
            peer: Arc::new(socket_addr_extension),
            estimated_cost: 1.0,
            warned_no_peer: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// The outcome of classifying one request.
#[derive(Debug, Clone)]
pub struct Classified {
    /// Criticality to admit (and propagate) with.
    pub criticality: Criticality,
    /// Absolute deadline, from the remaining time the caller sent.
    pub deadline: Option<Instant>,
    /// 1-based attempt number.
    pub attempt: u32,
    /// Customer charged.
    pub customer: Arc<str>,
    /// Operation name.
    pub operation: SharedString,
    /// Health checks bypass shedding.
    pub health_check: bool,
    /// Estimated cost in cost units.
    pub estimated_cost: f64,
    /// Whether the peer was trusted.
    pub trusted: bool,
}

/// Whether `path` is under the route `prefix`, on a segment boundary: `/batch` takes `/batch`
/// and `/batch/…` but not `/batchjobs` (a route that also caught its neighbours would give them
/// its criticality); a prefix ending in `/` takes what is below it. Case-sensitive, as the
/// routers it sits in front of (axum, tonic) are.
pub(crate) fn on_prefix(path: &str, prefix: &str) -> bool {
    path.starts_with(prefix)
        && (prefix.ends_with('/')
            || path.len() == prefix.len()
            || path.as_bytes()[prefix.len()] == b'/')
}

impl Classifier {
    fn route(&self, path: &str) -> Option<&Route> {
        self.routes
            .iter()
            .filter(|r| on_prefix(path, &r.prefix))
            .max_by_key(|r| r.prefix.len())
    }

    /// Trusted CIDRs with no peer address trust nobody: every caller silently gets the route's
    /// default criticality, and a bad criticality header is ignored instead of refused. That is
    /// almost always a server not giving the address (axum without
    /// `into_make_service_with_connect_info`), so say so once, where operators look.
    fn warn_no_peer(&self) {
        if !self.trust_all
            && !self.trusted.is_empty()
            && !self.warned_no_peer.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                trusted = ?self.trusted,
                "spillway: trusted sources are configured but a request came with no peer \
                 address, so nobody is trusted and criticality/customer headers are ignored; \
                 axum: serve with into_make_service_with_connect_info::<SocketAddr>() and set \
                 .peer_addr(|e| e.get::<ConnectInfo<SocketAddr>>().map(|c| c.0))"
            );
        }
    }

    /// Whether the no-peer warning has been given (for tests).
    #[cfg(test)]
    pub(crate) fn warned_no_peer(&self) -> bool {
        self.warned_no_peer.load(Ordering::Relaxed)
    }

    fn is_trusted(&self, peer: Option<SocketAddr>) -> bool {
        self.trust_all
            || peer.is_some_and(|p| {
                let ip = p.ip().to_canonical();
                self.trusted.iter().any(|net| net.contains(&ip))
            })
    }

    /// Classifies a request that arrived at `now`. Errors name the offending header: a
    /// malformed criticality/customer from a trusted peer, or a malformed deadline/attempt from
    /// anyone (those are honoured from anyone).
    pub fn classify(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        extensions: &Extensions,
        now: Instant,
    ) -> Result<Classified, HeaderError> {
        let peer = (self.peer)(extensions);
        if peer.is_none() {
            self.warn_no_peer();
        }
        let trusted = self.is_trusted(peer);
        let view = RequestView {
            method,
            uri,
            headers,
            extensions,
            peer,
            trusted,
        };
        let route = self.route(uri.path());

        let mut criticality = route.map_or(self.default_criticality, |r| r.criticality);
        let fields = wire::RequestFields::read(headers);
        if trusted {
            if let Some(v) = fields.criticality {
                criticality = wire::parse_criticality(v)?;
            }
        }
        let deadline = fields.timeout()?.map(|left| add_saturating(now, left));
        let attempt = fields.attempt()?;
        let customer = self.customer(&view, fields.customer)?;
        let operation = match &self.operation {
            OperationSource::Route => route.map_or(SharedString::const_str("other"), |r| {
                SharedString::from(Arc::clone(&r.prefix))
            }),
            OperationSource::Path => SharedString::from(uri.path().to_owned()),
            OperationSource::Fn(f) => f(&view),
        };
        let health_check = self.health_paths.iter().any(|p| **p == *uri.path())
            || self.health_fn.as_ref().is_some_and(|f| f(&view));
        Ok(Classified {
            criticality,
            deadline,
            attempt,
            customer,
            operation,
            health_check,
            estimated_cost: route.and_then(|r| r.cost).unwrap_or(self.estimated_cost),
            trusted,
        })
    }

    /// The request's customer; `field`: its [`wire::CUSTOMER`] field, if any.
    fn customer(
        &self,
        view: &RequestView<'_>,
        field: Option<&HeaderValue>,
    ) -> Result<Arc<str>, HeaderError> {
        let found = match &self.customer {
            CustomerSource::Header if view.trusted => match field {
                Some(v) => Some(Arc::from(wire::parse_customer(v)?)),
                None => None,
            },
            CustomerSource::Header => None,
            CustomerSource::ApiKey { header, keys } => view
                .headers
                .get(header)
                .and_then(|v| v.to_str().ok())
                .and_then(|k| keys.get(k))
                .cloned(),
            CustomerSource::PeerIp => view
                .peer
                .map(|p| Arc::from(p.ip().to_canonical().to_string())),
            CustomerSource::Fn(f) => f(view),
        };
        Ok(found.unwrap_or_else(|| Arc::clone(&self.default_customer)))
    }
}

/// `now + d`, saturating at a far-future instant instead of panicking on hostile input
/// (`grpc-timeout: 99999999H` is ~11,400 years).
fn add_saturating(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 86_400)))
        .unwrap_or(now)
}
