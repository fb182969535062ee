//! [`EnvoyGradientConfig`]: the Envoy gradient's parameters, their defaults and their checks
//! (the module docs of `envoy` say what each of this project's additions is for).

use std::time::Duration;

use crate::error::{check_range, ConfigError};

/// Parameters of [`EnvoyGradientLimit`](super::EnvoyGradientLimit). Percentages are fractions
/// (Envoy's `Percent` 15 = 0.15).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct EnvoyGradientConfig {
    /// Time between minRTT measurements (`min_rtt_calc_params.interval`), `≥ 1 ms`. Default 60 s
    /// (Envoy docs example; Envoy has no default).
    #[cfg_attr(
        feature = "serde",
        serde(rename = "interval_ms", with = "crate::queue::millis")
    )]
    pub interval: Duration,
    /// Samples that make one minRTT measurement (`request_count`), `≥ 1`. Default 50 (Envoy).
    pub request_count: u32,
    /// Random delay added to `interval`, as a fraction of it, in `[0, 1]`. Default 0.15 (Envoy).
    pub jitter: f64,
    /// Limit pinned while measuring minRTT, and the floor unless `min_concurrency_limit` is set,
    /// `≥ 1`. Default 3 (Envoy).
    pub min_concurrency: usize,
    /// Separate floor for the calculated limit; when set, minRTT windows do not pin the limit.
    /// Default unset (Envoy).
    pub min_concurrency_limit: Option<usize>,
    /// Tolerance added to minRTT, as a fraction of it, in `[0, 10]`. Default 0.25 (Envoy).
    pub buffer: f64,
    /// Percentile summarising a window of samples, in `(0, 1]`. Default 0.5 (Envoy p50).
    pub sample_percentile: f64,
    /// Length of a sampling window (`concurrency_update_interval`), `> 0`. Default 100 ms (Envoy
    /// docs example; Envoy has no default).
    #[cfg_attr(
        feature = "serde",
        serde(rename = "update_interval_ms", with = "crate::queue::millis")
    )]
    pub update_interval: Duration,
    /// Ceiling (`max_concurrency_limit`), `≥` the floor. Default 1000 (Envoy).
    pub max_concurrency_limit: usize,
    /// Do not raise the limit after a sampling window whose peak in-flight count was below
    /// `limit / f` (see the module docs; Netflix uses 2), `f` in `[1, 100]`. Default unset
    /// (Envoy: the limit grows whenever latency allows).
    pub app_limited_growth: Option<f64>,
    /// After the limit changes, summarise windows only from requests started after the change,
    /// and grow by one at most on a window of fewer than `request_count` answers that closes
    /// sooner after the change than the latency that made it (see the module docs). Default false
    /// (Envoy: every sample counts).
    pub one_change_per_rtt: bool,
    /// When the latency of recent windows whose limit was reached does not follow their limit
    /// (the cuts were futile), re-measure minRTT at the latency seen and take the cuts back (the
    /// host, not our concurrency, is slowing requests; see `futile.rs`). Needs `one_change_per_rtt`. Default
    /// false (Envoy: cut until the floor, then re-measure after 5 windows there).
    pub rebaseline_on_futile_cut: bool,
    /// Measure minRTT on live traffic — from requests that started with at most
    /// `min_concurrency` in flight — and never pin the limit (see `live.rs`). Default false
    /// (Envoy: pin to `min_concurrency` at start and every `interval`).
    pub live_min_rtt: bool,
    /// The limit to start from, within `[floor, max_concurrency_limit]`. Default unset:
    /// `min_concurrency` (Envoy).
    pub initial_limit: Option<usize>,
    /// Latency above minRTT always tolerated, as a fraction in `[0, 1]` of the callers' latency
    /// budget ([`Limit::set_latency_budget`](crate::limit::Limit::set_latency_budget): their deadlines capped at the queue's max wait): the
    /// limit is cut only while the window's latency exceeds both `minRTT·(1 + buffer)` and
    /// `minRTT + latency_slack · budget`. Default 0 (Envoy: only the buffer).
    pub latency_slack: f64,
    /// Cut for real (see the module docs): a window above tolerance lowers the limit by at
    /// least one (Envoy's `√limit` headroom kept small limits where they were), and a window
    /// in which at least half the requests were dropped (timed out: their latency only bounds
    /// the true one from below) halves it, without headroom. Default false (Envoy: headroom
    /// always, dropped requests' latency taken as measured).
    pub exact_cuts: bool,
    /// A sampling window also closes once it holds `request_count` samples and has lasted
    /// minRTT (see the module docs). Default false (Envoy: every `update_interval`).
    pub rtt_windows: bool,
    /// A window that closes with fewer than `request_count` answers grows the limit by that
    /// share of the step the gradient asks (at least one slot); cuts are not scaled (see the
    /// module docs). Default false (Envoy: every window's median counts in full).
    pub proportional_growth: bool,
    /// Cap the limit where more in flight only adds queueing in the upstream (see the module
    /// docs and `knee.rs`): requests are grouped by the in-flight count they were admitted
    /// at; the first group (of at least 100) whose mean latency is confidently more than a
    /// tenth above the lowest group's caps the limit, by Little's law, at 1.1 × what the
    /// upstream runs at once, divided by the lowest level's share of the limit — and only
    /// while the admission controller reports some level's overload sustained (see `knee.rs`).
    /// Default false (Envoy: the gradient alone).
    pub knee_cap: bool,
    /// Cap the limit where more in flight made the upstream deliver less (see `thrash.rs`):
    /// requests are grouped by the in-flight count they were admitted at, and when a level
    /// delivers (by Little's law, level / mean time a slot was held × the share answered)
    /// clearly less than a lower one, the limit is held where in flight stays at the level that
    /// delivered most. Default false
    /// (Envoy: the gradient alone).
    pub throughput_ceiling: bool,
    /// With `throughput_ceiling` (whose levels it reads): a cut does not take the limit below
    /// the highest in-flight level whose mean latency was within a tenth of the lowest
    /// level's — the upstream ran it unqueued — divided by the share of the limit the window
    /// used; at most what the best level delivers × that latency (Little's law), not below 10,
    /// and not in a window with a tenth of its requests dropped (see `floor.rs`). Only a floor
    /// under cuts: the limit never grows by it, and `throughput_ceiling` may still cap below
    /// it. Default false (Envoy: the gradient alone).
    pub unqueued_floor: bool,
    /// With `live_min_rtt`: when latency above tolerance does not rise with the in-flight level
    /// requests were admitted at (Kendall's test over at least 40 of them spanning 2×), the
    /// upstream got slower: the baseline is raised to that latency (at most doubled, once until
    /// a window is back within the measured minRTT's tolerance) instead of cutting; so it is
    /// on a step past latency that ran calm at the same levels, and on a step of a level held
    /// above tolerance (raised by the ratio; the limit not grown past the held one meanwhile)
    /// (see `flat.rs`). Default false (Envoy: cut until the floor, then re-measure).
    pub rebaseline_on_flat_levels: bool,
    /// With `live_min_rtt`: slots slow start adds per answer within minRTT's tolerance, in
    /// `[1, 8]` (see `live.rs`). 1 doubles the limit per round trip when every answer is
    /// fast, as TCP's slow start does; more reaches a large upstream's size in fewer round
    /// trips at the price of a larger overshoot past its knee. Default 1.
    pub slow_start_gain: f64,
    /// Use this minRTT instead of measuring it (Envoy `fixed_value`), `> 0` if set. Default unset.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "fixed_min_rtt_ms", with = "crate::queue::millis::option")
    )]
    pub fixed_min_rtt: Option<Duration>,
}

impl Default for EnvoyGradientConfig {
    fn default() -> Self {
        EnvoyGradientConfig {
            interval: Duration::from_secs(60),
            request_count: 50,
            jitter: 0.15,
            min_concurrency: 3,
            min_concurrency_limit: None,
            buffer: 0.25,
            sample_percentile: 0.5,
            update_interval: Duration::from_millis(100),
            max_concurrency_limit: 1000,
            app_limited_growth: None,
            one_change_per_rtt: false,
            rebaseline_on_futile_cut: false,
            live_min_rtt: false,
            initial_limit: None,
            latency_slack: 0.0,
            exact_cuts: false,
            rtt_windows: false,
            proportional_growth: false,
            knee_cap: false,
            throughput_ceiling: false,
            unqueued_floor: false,
            rebaseline_on_flat_levels: false,
            slow_start_gain: 1.0,
            fixed_min_rtt: None,
        }
    }
}

impl EnvoyGradientConfig {
    /// Checks every field against the ranges in its docs.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        if self.fixed_min_rtt.is_none() && self.interval < Duration::from_millis(1) {
            return Err(ConfigError::new(
                "limit.envoy_gradient.interval_ms",
                ms(self.interval),
                "a duration >= 1 ms (or set fixed_min_rtt_ms)",
            ));
        }
        if self.request_count < 1 {
            return Err(ConfigError::new(
                "limit.envoy_gradient.request_count",
                self.request_count,
                "an integer >= 1",
            ));
        }
        check_range(
            "limit.envoy_gradient.jitter",
            self.jitter,
            0.0,
            1.0,
            "a fraction in [0, 1] (0.15 = 15 % of the interval)",
        )?;
        if self.min_concurrency < 1 {
            return Err(ConfigError::new(
                "limit.envoy_gradient.min_concurrency",
                self.min_concurrency,
                "an integer >= 1",
            ));
        }
        if self.min_concurrency_limit == Some(0) {
            return Err(ConfigError::new(
                "limit.envoy_gradient.min_concurrency_limit",
                0,
                "an integer >= 1, or unset",
            ));
        }
        check_range(
            "limit.envoy_gradient.buffer",
            self.buffer,
            0.0,
            10.0,
            "a fraction in [0, 10] (0.25 = 25 % of minRTT)",
        )?;
        check_range(
            "limit.envoy_gradient.sample_percentile",
            self.sample_percentile,
            f64::MIN_POSITIVE,
            1.0,
            "a fraction in (0, 1] (0.5 = p50)",
        )?;
        if self.update_interval.is_zero() {
            return Err(ConfigError::new(
                "limit.envoy_gradient.update_interval_ms",
                0,
                "a duration > 0 ms",
            ));
        }
        let floor = self.min_concurrency_limit.unwrap_or(self.min_concurrency);
        if self.max_concurrency_limit < floor.max(self.min_concurrency) {
            return Err(ConfigError::new(
                "limit.envoy_gradient.max_concurrency_limit",
                self.max_concurrency_limit,
                "an integer >= min_concurrency and min_concurrency_limit",
            ));
        }
        if let Some(f) = self.app_limited_growth {
            check_range(
                "limit.envoy_gradient.app_limited_growth",
                f,
                1.0,
                100.0,
                "a factor in [1, 100] (2 = grow only while at least half the limit is used), or unset",
            )?;
        }
        if self.rebaseline_on_futile_cut && !self.one_change_per_rtt {
            return Err(ConfigError::new(
                "limit.envoy_gradient.rebaseline_on_futile_cut",
                true,
                "false unless one_change_per_rtt = true (a cut is judged on requests admitted after it)",
            ));
        }
        if let Some(i) = self.initial_limit {
            if i < floor || i > self.max_concurrency_limit {
                return Err(ConfigError::new(
                    "limit.envoy_gradient.initial_limit",
                    i,
                    "an integer within [min_concurrency_limit (or min_concurrency), max_concurrency_limit], or unset",
                ));
            }
        }
        check_range(
            "limit.envoy_gradient.latency_slack",
            self.latency_slack,
            0.0,
            1.0,
            "a fraction in [0, 1] of the callers' latency budget (0 = none)",
        )?;
        check_range(
            "limit.envoy_gradient.slow_start_gain",
            self.slow_start_gain,
            1.0,
            8.0,
            "a number of slots in [1, 8] per fast answer (1 = double per round trip)",
        )?;
        if self.fixed_min_rtt.is_some_and(|d| d.is_zero()) {
            return Err(ConfigError::new(
                "limit.envoy_gradient.fixed_min_rtt_ms",
                0,
                "a duration > 0 ms, or unset",
            ));
        }
        Ok(())
    }
}
