//! [`ThrottleLayer`]: configuration and the per-destination throttles it shares with its services.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use http::uri::Authority;
use spillway_core::clock::{Clock, SystemClock};
use spillway_core::throttle::{AdaptiveThrottle, ThrottleConfig};
use spillway_core::ConfigError;
use tower_layer::Layer;

use super::service::Throttle;
use crate::wire::metric as m;

/// Default bound on the number of destinations tracked separately. Past it, new destinations
/// share one overflow throttle, so a client fanning out to unbounded hosts cannot grow memory
/// without limit (a service normally talks to a handful of backends).
pub const DEFAULT_MAX_DESTINATIONS: usize = 1024;

/// How requests are assigned to throttles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThrottleKeying {
    /// One throttle per destination authority (`host:port` of the request URI, else the `Host`
    /// header), created on first use; at most `max_destinations` of them, after which new
    /// destinations share an overflow throttle. Requests with no authority use the default throttle.
    PerDestination {
        /// Bound on separately tracked destinations.
        max_destinations: usize,
    },
    /// One throttle for every request through this layer (e.g. a tonic `Channel` to one service,
    /// whose requests carry only a path).
    Single,
}

/// One destination's throttle and its pre-registered metric handles (registered once, so the
/// hot path does not allocate label strings).
pub(crate) struct Entry {
    pub(crate) throttle: AdaptiveThrottle,
    pub(crate) destination: Option<Authority>,
    pub(crate) throttled: metrics::Counter,
    pub(crate) probability: metrics::Gauge,
}

pub(crate) struct Shared {
    pub(crate) cfg: ThrottleConfig,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) origin: Instant,
    pub(crate) keying: ThrottleKeying,
    pub(crate) default: Arc<Entry>,
    pub(crate) overflow: Arc<Entry>,
    pub(crate) map: RwLock<HashMap<Authority, Arc<Entry>>>,
}

impl Shared {
    fn entry(
        cfg: &ThrottleConfig,
        origin: Instant,
        destination: Option<Authority>,
        label: &str,
    ) -> Result<Entry, ConfigError> {
        let throttle = AdaptiveThrottle::new(cfg.clone(), origin)?;
        let label = label.to_owned();
        Ok(Entry {
            throttle,
            destination,
            throttled: metrics::counter!(m::THROTTLED, m::L_DESTINATION => label.clone()),
            probability: metrics::gauge!(m::THROTTLE_PROBABILITY, m::L_DESTINATION => label),
        })
    }

    /// The throttle for a destination; creates it on first use (bounded, see [`ThrottleKeying`]).
    pub(crate) fn lookup(&self, authority: Option<&Authority>) -> Arc<Entry> {
        let (ThrottleKeying::PerDestination { max_destinations }, Some(authority)) =
            (self.keying, authority)
        else {
            return self.default.clone();
        };
        {
            let map = self.map.read().unwrap_or_else(|p| p.into_inner());
            if let Some(e) = map.get(authority) {
                return e.clone();
            }
        }
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = map.get(authority) {
            return e.clone();
        }
        if map.len() >= max_destinations {
            return self.overflow.clone();
        }
        // The config was validated when the layer was built, so this cannot fail; fall back to
        // the shared default rather than panic if it ever did.
        match Self::entry(
            &self.cfg,
            self.origin,
            Some(authority.clone()),
            authority.as_str(),
        ) {
            Ok(e) => {
                let e = Arc::new(e);
                map.insert(authority.clone(), e.clone());
                e
            }
            Err(_) => self.default.clone(),
        }
    }
}

/// Client-side adaptive throttling (SRE book ch. 21): drops a fraction of requests locally when
/// the backend has been refusing them, with `P = max(0, (requests − K·accepts) / (requests + 1))`
/// computed by [`spillway_core::throttle::AdaptiveThrottle`].
///
/// Every service built from one layer (and its clones) shares the layer's throttles.
/// A local refusal is the error [`super::Throttled`]. What counts as an accept: any response or
/// error except an overload refusal (HTTP 503/429, gRPC UNAVAILABLE/RESOURCE_EXHAUSTED) and
/// except transport errors, which mean the backend did not take the request either.
#[derive(Clone)]
pub struct ThrottleLayer {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for ThrottleLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThrottleLayer")
            .field("cfg", &self.shared.cfg)
            .field("keying", &self.shared.keying)
            .finish_non_exhaustive()
    }
}

impl ThrottleLayer {
    /// Per-destination throttles (bounded by [`DEFAULT_MAX_DESTINATIONS`]) on the system clock.
    pub fn new(cfg: ThrottleConfig) -> Result<Self, ConfigError> {
        Self::with_clock(cfg, Arc::new(SystemClock))
    }

    /// As [`ThrottleLayer::new`] with an injected clock (tests, simulation).
    pub fn with_clock(cfg: ThrottleConfig, clock: Arc<dyn Clock>) -> Result<Self, ConfigError> {
        Self::build(
            cfg,
            clock,
            ThrottleKeying::PerDestination {
                max_destinations: DEFAULT_MAX_DESTINATIONS,
            },
        )
    }

    /// Chooses how requests map to throttles. `max_destinations` must be at least 1.
    pub fn keying(self, keying: ThrottleKeying) -> Result<Self, ConfigError> {
        let s = &self.shared;
        Self::build(s.cfg.clone(), s.clock.clone(), keying)
    }

    fn build(
        cfg: ThrottleConfig,
        clock: Arc<dyn Clock>,
        keying: ThrottleKeying,
    ) -> Result<Self, ConfigError> {
        if let ThrottleKeying::PerDestination { max_destinations } = keying {
            if max_destinations == 0 {
                return Err(ConfigError::new(
                    "throttle.max_destinations",
                    max_destinations,
                    "an integer >= 1 (destinations tracked separately; default 1024)",
                ));
            }
        }
        let origin = clock.now();
        let default = Arc::new(Shared::entry(&cfg, origin, None, "default")?);
        let overflow = Arc::new(Shared::entry(&cfg, origin, None, "overflow")?);
        Ok(Self {
            shared: Arc::new(Shared {
                cfg,
                clock,
                origin,
                keying,
                default,
                overflow,
                map: RwLock::new(HashMap::new()),
            }),
        })
    }

    /// The current refusal probability for a destination (`None`: the default throttle), for
    /// dashboards and tests. Creates the destination's throttle if it does not exist yet.
    pub fn probability(&self, destination: Option<&Authority>) -> f64 {
        let now = self.shared.clock.now();
        self.shared.lookup(destination).throttle.probability(now)
    }

    /// `(requests, accepts)` in the current window for a destination (`None`: the default throttle).
    pub fn counts(&self, destination: Option<&Authority>) -> (u64, u64) {
        let now = self.shared.clock.now();
        self.shared.lookup(destination).throttle.counts(now)
    }
}

impl<S> Layer<S> for ThrottleLayer {
    type Service = Throttle<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Throttle {
            inner,
            shared: self.shared.clone(),
        }
    }
}
