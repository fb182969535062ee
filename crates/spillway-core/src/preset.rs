//! The proxy's zero-config policy as one named preset: what `spillway proxy` runs with when its
//! configuration file says nothing, for everything that has to agree with it.
//!
//! Why here and not in the proxy: the simulator models "the proxy in its zero-config form" (the
//! simulated `spillway demo`, the robustness sweep's cells, scenarios with `proxy_admission`).
//! Reading `ProxyConfig::default()` made the pure simulator depend on the proxy and, through it,
//! on hyper and tokio. The proxy's configuration defaults now read this preset, and a test in
//! the proxy (`config/load.rs`) checks that `ProxyConfig::default()` still agrees with it.

use std::time::Duration;

use crate::controller::AdmissionConfig;
use crate::throttle::ThrottleConfig;

/// The part of the proxy's default configuration that decides what happens to a request:
/// how it is admitted, and how long the proxy waits for an answer from the upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyPreset {
    /// The admission policy: [`AdmissionConfig::zero_config`] (its documentation says what it
    /// does and why), the same policy `spillway-tower` gets from `AdmissionConfig::default()`.
    pub admission: AdmissionConfig,
    /// The wait for an upstream's response head before the proxy answers 504 (the proxy's
    /// `upstream.request_timeout_ms`): 30 s, long enough for any ordinary request; overload is
    /// handled by admission, not by this timer.
    pub request_timeout: Duration,
    /// The client throttle the proxy keeps per upstream task and criticality (its
    /// `[upstream.throttle]`): the SRE book's (K = 2 over 120 s) with a floor of 1 request/s
    /// (120 requests in the window) below which it never refuses — a task that has answered
    /// for a handful of requests has too little history to judge (one refused first request
    /// reads as P = 1/2).
    pub throttle: ThrottleConfig,
}

/// The proxy's zero-config policy (see [`ProxyPreset`]).
pub fn proxy_default() -> ProxyPreset {
    ProxyPreset {
        admission: AdmissionConfig::zero_config(),
        request_timeout: Duration::from_secs(30),
        throttle: ThrottleConfig {
            min_requests_per_sec: 1.0,
            ..ThrottleConfig::default()
        },
    }
}
