//! Classification: which route a request is on, how critical it is, who pays, what it costs.
//!
//! Why the proxy classifies instead of trusting the client: criticality and customer identity
//! are what shedding and quotas key on (SRE book ch. 21), and a client that could name its own
//! criticality would always say CRITICAL_PLUS. So the *route* (method, path prefix or glob,
//! header match) gives the default — matched on the normalised path (`crate::path`), prefixes on
//! segment boundaries and ASCII case ignored by default, so that spelling a path differently
//! cannot move a request off its route — and the criticality/customer headers are honoured
//! only from trusted CIDRs; API keys identify customers from anyone (the key is the credential).
//! Header parsing is `spillway_tower::wire`'s, so the proxy and the tower layers accept exactly
//! the same spellings and give the same errors.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{HeaderName, HeaderValue, Method};
use ipnet::IpNet;
use spillway_core::Criticality;
use spillway_tower::wire::{self, HeaderError};

use crate::config::{CustomerFrom, DegradeConfig, HeadersWithUnderscores, ProxyConfig};
use crate::path::{self, PathPolicy};

/// The operation name given to a request that matches no route.
pub const UNMATCHED_OPERATION: &str = "other";

/// A compiled route.
#[derive(Debug)]
pub struct Route {
    /// Operation name.
    pub name: Arc<str>,
    methods: Vec<Method>,
    path: PathMatch,
    headers: Vec<(HeaderName, HeaderValue)>,
    /// Default criticality.
    pub criticality: Criticality,
    /// Cost units per request.
    pub cost: f64,
    /// Degraded mode, if configured.
    pub degrade: Option<DegradeConfig>,
}

#[derive(Debug)]
enum PathMatch {
    Prefix(String),
    Glob(Vec<String>),
}

/// The classification rules of one configuration.
#[derive(Debug)]
pub struct Router {
    routes: Vec<Arc<Route>>,
    trusted: Vec<IpNet>,
    default_criticality: Criticality,
    default_cost: f64,
    default_customer: Arc<str>,
    /// The default customer as a header value, made once (forwarding writes it on every request
    /// from a customer that is not named otherwise).
    default_customer_value: Option<HeaderValue>,
    /// The operation name of a request no route matches (`other`), allocated once here so
    /// classifying such a request is a reference-count bump, not an allocation.
    unmatched: Arc<str>,
    customer_from: CustomerFrom,
    api_key_header: HeaderName,
    api_keys: HashMap<String, Arc<str>>,
    health_paths: Vec<String>,
    /// How paths are made normal before matching (`[request]`).
    path_policy: PathPolicy,
    /// Whether routes and health paths compare ASCII case (`request.case_sensitive_paths`).
    case_sensitive: bool,
    /// `request.headers_with_underscores`.
    underscores: HeadersWithUnderscores,
}

/// What a request is.
#[derive(Debug, Clone)]
pub struct Classified {
    /// The matching route, if any.
    pub route: Option<Arc<Route>>,
    /// Operation name (`other` when no route matches).
    pub operation: Arc<str>,
    /// Criticality to admit and forward with.
    pub criticality: Criticality,
    /// When the caller gives up, from `grpc-timeout` / `x-spillway-deadline-ms`.
    pub deadline: Option<Instant>,
    /// 1-based attempt number.
    pub attempt: u32,
    /// Customer charged.
    pub customer: Arc<str>,
    /// A health check (never refused, never degraded).
    pub health_check: bool,
    /// Estimated cost in cost units.
    pub cost: f64,
    /// Whether the peer is trusted.
    pub trusted: bool,
}

impl Router {
    /// Compiles the rules; errors name the key (validation already checked the values).
    pub fn new(cfg: &ProxyConfig) -> Result<Self, (String, String)> {
        let c = &cfg.classify;
        let mut routes = Vec::with_capacity(cfg.routes.len());
        for (i, r) in cfg.routes.iter().enumerate() {
            let methods = r
                .methods
                .iter()
                .map(|m| Method::from_bytes(m.to_ascii_uppercase().as_bytes()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| (format!("routes[{i}].methods"), e.to_string()))?;
            let mut headers = Vec::new();
            for (k, v) in &r.headers {
                let name = HeaderName::from_bytes(k.as_bytes())
                    .map_err(|e| (format!("routes[{i}].headers"), e.to_string()))?;
                let value = HeaderValue::from_str(v)
                    .map_err(|e| (format!("routes[{i}].headers.{k}"), e.to_string()))?;
                headers.push((name, value));
            }
            let path = if r.path.contains('*') {
                PathMatch::Glob(r.path.split('/').map(str::to_string).collect())
            } else {
                PathMatch::Prefix(r.path.clone())
            };
            routes.push(Arc::new(Route {
                name: Arc::from(r.name.as_str()),
                methods,
                path,
                headers,
                criticality: r.criticality.unwrap_or(c.default_criticality),
                cost: r.cost.unwrap_or(c.default_cost),
                degrade: r.degrade.clone(),
            }));
        }
        let trusted = c
            .trusted
            .iter()
            .enumerate()
            .map(|(i, s)| {
                s.trim()
                    .parse::<IpNet>()
                    .map_err(|e| (format!("classify.trusted[{i}]"), e.to_string()))
            })
            .collect::<Result<_, _>>()?;
        Ok(Router {
            routes,
            trusted,
            default_criticality: c.default_criticality,
            default_cost: c.default_cost,
            default_customer: Arc::from(c.default_customer.as_str()),
            default_customer_value: HeaderValue::from_str(&c.default_customer).ok(),
            unmatched: Arc::from(UNMATCHED_OPERATION),
            customer_from: c.customer_from,
            api_key_header: HeaderName::from_bytes(c.api_key_header.as_bytes())
                .map_err(|e| ("classify.api_key_header".to_string(), e.to_string()))?,
            api_keys: c
                .api_keys
                .iter()
                .map(|(k, v)| (k.clone(), Arc::from(v.as_str())))
                .collect(),
            health_paths: c.health_paths.clone(),
            path_policy: cfg.request.path_policy(),
            case_sensitive: cfg.request.case_sensitive_paths,
            underscores: cfg.request.headers_with_underscores,
        })
    }

    /// How request paths are made normal before [`classify`](Self::classify) matches them.
    pub fn path_policy(&self) -> &PathPolicy {
        &self.path_policy
    }

    /// What to do with request header fields whose names contain `_`.
    pub fn underscores(&self) -> HeadersWithUnderscores {
        self.underscores
    }

    /// The header value for `customer`, when it is the default customer (the same `Arc` that
    /// [`classify`](Self::classify) handed out): a clone of a value made once.
    pub fn customer_value(&self, customer: &Arc<str>) -> Option<HeaderValue> {
        if customer.is_empty() || !Arc::ptr_eq(customer, &self.default_customer) {
            return None;
        }
        self.default_customer_value.clone()
    }

    /// The routes, in match order.
    pub fn routes(&self) -> impl Iterator<Item = &Arc<Route>> {
        self.routes.iter()
    }

    /// Whether `peer` may set criticality and customer headers.
    pub fn is_trusted(&self, peer: Option<SocketAddr>) -> bool {
        peer.is_some_and(|p| {
            let ip = p.ip().to_canonical();
            self.trusted.iter().any(|n| n.contains(&ip))
        })
    }

    /// Classifies a request head from `peer` that arrived at `now`; its path is matched as it
    /// stands, so it is made normal first ([`path_policy`](Self::path_policy)). Errors name the header
    /// (malformed criticality/customer from a trusted peer, malformed deadline/attempt from
    /// anyone — those only ever shorten the caller's own request).
    pub fn classify(
        &self,
        parts: &http::request::Parts,
        peer: Option<SocketAddr>,
        now: Instant,
    ) -> Result<Classified, HeaderError> {
        let trusted = self.is_trusted(peer);
        let path = parts.uri.path();
        let cs = self.case_sensitive;
        let route = self.routes.iter().find(|r| r.matches(parts, cs)).cloned();
        let mut criticality = route
            .as_ref()
            .map_or(self.default_criticality, |r| r.criticality);
        let fields = wire::RequestFields::read(&parts.headers);
        if trusted {
            if let Some(v) = fields.criticality {
                criticality = wire::parse_criticality(v)?;
            }
        }
        let deadline = fields.timeout()?.map(|left| {
            now.checked_add(left)
                .unwrap_or(now + Duration::from_secs(86_400 * 365))
        });
        let attempt = fields.attempt()?;
        let customer = match self.customer_from {
            CustomerFrom::Header if trusted => match fields.customer {
                Some(v) => Some(Arc::from(wire::parse_customer(v)?)),
                None => None,
            },
            CustomerFrom::Header => None,
            CustomerFrom::ApiKey => wire::find(&parts.headers, &self.api_key_header)
                .and_then(|v| v.to_str().ok())
                .and_then(|k| self.api_keys.get(k))
                .cloned(),
        }
        .unwrap_or_else(|| Arc::clone(&self.default_customer));
        let health_check = self
            .health_paths
            .iter()
            .any(|p| p.len() == path.len() && path::same(p.as_bytes(), path.as_bytes(), cs));
        Ok(Classified {
            operation: route
                .as_ref()
                .map_or_else(|| Arc::clone(&self.unmatched), |r| Arc::clone(&r.name)),
            cost: route.as_ref().map_or(self.default_cost, |r| r.cost),
            route,
            criticality,
            deadline,
            attempt,
            customer,
            health_check,
            trusted,
        })
    }
}

impl Route {
    fn matches(&self, parts: &http::request::Parts, case_sensitive: bool) -> bool {
        (self.methods.is_empty() || self.methods.contains(&parts.method))
            && self.path.matches(parts.uri.path(), case_sensitive)
            && self
                .headers
                .iter()
                .all(|(k, v)| parts.headers.get_all(k).iter().any(|x| x == v))
    }
}

impl PathMatch {
    /// Prefixes match on segment boundaries (`/api/export` is not `/api/exports`); globs segment
    /// by segment. ASCII case is ignored unless `cs`.
    fn matches(&self, path: &str, cs: bool) -> bool {
        match self {
            PathMatch::Prefix(p) => path::prefix_matches(path, p, cs),
            PathMatch::Glob(pattern) => {
                // On the stack for paths of up to 16 segments (a `Vec` was an allocation per
                // request on a glob route).
                let segs: smallvec::SmallVec<[&str; 16]> = path.split('/').collect();
                glob(pattern, &segs, cs)
            }
        }
    }
}

/// Segment-wise glob: `**` matches any number of segments (zero included), a segment with
/// `*` matches one segment with `*` standing for any run of characters.
fn glob(pattern: &[String], segs: &[&str], cs: bool) -> bool {
    match pattern.split_first() {
        None => segs.is_empty(),
        Some((p, rest)) if p == "**" => (0..=segs.len()).any(|i| glob(rest, &segs[i..], cs)),
        Some((p, rest)) => match segs.split_first() {
            Some((s, srest)) => segment(p.as_bytes(), s.as_bytes(), cs) && glob(rest, srest, cs),
            None => false,
        },
    }
}

/// One segment against one pattern segment whose `*`s stand for any run of characters. No
/// allocation: it runs for every request on a glob route.
fn segment(p: &[u8], s: &[u8], cs: bool) -> bool {
    let mut parts = p.split(|&b| b == b'*');
    let first = parts.next().unwrap_or_default();
    let Some(head) = s.get(..first.len()) else {
        return false;
    };
    if !path::same(head, first, cs) {
        return false;
    }
    let mut rest = &s[first.len()..];
    let mut parts = parts.peekable();
    if parts.peek().is_none() {
        return rest.is_empty();
    }
    while let Some(piece) = parts.next() {
        if parts.peek().is_none() {
            // The last piece ends the segment.
            return rest.len() >= piece.len()
                && path::same(&rest[rest.len() - piece.len()..], piece, cs);
        }
        if piece.is_empty() {
            continue;
        }
        match rest
            .windows(piece.len())
            .position(|w| path::same(w, piece, cs))
        {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests;
