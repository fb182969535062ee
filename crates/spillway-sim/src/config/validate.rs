//! Checking a scenario, and deriving its variants and scaled copies.
//!
//! Why here and not in serde: the checks need context serde does not have (a fault names a
//! layer; a zone must exist; thresholds must keep their order), and each error must name the
//! key as the user wrote it (`layer[backend].workers`) with the value and what is accepted.

use spillway_core::Criticality;

use super::{
    shed_config, ConfigError, FaultConfig, LayerConfig, QuotaSettings, Scenario, ServiceDist,
    VariantConfig,
};

/// Largest simulated offering window: one day (more is a unit mistake).
const MAX_DURATION_S: f64 = 86_400.0;
/// Largest number of tasks in one layer, and of client instances.
const MAX_TASKS: u32 = 1_000_000;
/// Most shards a fleet can be simulated in.
const MAX_SHARDS: u32 = 64;
/// Largest time setting (timeouts, backoff, latency), ms: one hour.
const MAX_MS: f64 = 3_600_000.0;

impl Scenario {
    /// Parses TOML text; `source_name` names it in errors. Validates too.
    pub fn from_toml(text: &str, source_name: &str) -> Result<Scenario, ConfigError> {
        let s: Scenario = toml::from_str(text).map_err(|e| ConfigError::Parse {
            source_name: source_name.to_owned(),
            message: e.to_string(),
        })?;
        s.validate()?;
        Ok(s)
    }

    fn invalid(&self, key: String, value: impl ToString, expected: &str) -> ConfigError {
        ConfigError::Invalid {
            scenario: self.name.clone(),
            key,
            value: value.to_string(),
            expected: expected.to_owned(),
        }
    }

    /// `shards` in range, and every layer with the network delay sharding needs.
    fn check_shards(&self) -> Result<(), ConfigError> {
        if !(1..=MAX_SHARDS).contains(&self.shards) {
            return Err(self.invalid("shards".into(), self.shards, "an integer in 1..=64"));
        }
        if self.shards > 1 {
            if let Some(l) = self.layers.iter().find(|l| l.network_ms <= 0.0) {
                return Err(self.invalid(
                    format!("layer[{}].network_ms", l.name),
                    l.network_ms,
                    "ms > 0 when shards > 1 (the delay is what lets shards run apart)",
                ));
            }
        }
        Ok(())
    }

    /// Index of the layer called `name`.
    pub fn layer_index(&self, name: &str) -> Option<usize> {
        self.layers.iter().position(|l| l.name == name)
    }

    /// Checks every value; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let num = |key: String, v: f64, lo: f64, hi: f64, what: &str| {
            if v.is_finite() && v >= lo && v <= hi {
                Ok(())
            } else {
                Err(self.invalid(key, v, what))
            }
        };
        num(
            "duration_s".into(),
            self.duration_s,
            0.001,
            MAX_DURATION_S,
            "seconds in [0.001, 86400]",
        )?;
        if self.clients.is_empty() {
            return Err(self.invalid("client".into(), "none", "at least one [[client]]"));
        }
        if self.layers.is_empty() {
            return Err(self.invalid("layer".into(), "none", "at least one [[layer]]"));
        }
        if self.layers.len() > 64 {
            return Err(self.invalid("layer".into(), self.layers.len(), "at most 64 layers"));
        }
        if self.clients.len() > 1024 {
            return Err(self.invalid("client".into(), self.clients.len(), "at most 1024 clients"));
        }
        for c in &self.clients {
            let k = |f: &str| format!("client[{}].{f}", c.name);
            c.criticality
                .parse::<Criticality>()
                .map_err(|e| self.invalid(k("criticality"), &c.criticality, &e.to_string()))?;
            if c.customer.as_deref() == Some("") {
                return Err(self.invalid(k("customer"), "\"\"", "a non-empty name"));
            }
            num(
                k("timeout_ms"),
                c.timeout_ms,
                0.001,
                MAX_MS,
                "ms in [0.001, 3600000]",
            )?;
            if let Some(d) = c.deadline_ms {
                num(k("deadline_ms"), d, 0.001, MAX_MS, "ms in [0.001, 3600000]")?;
            }
            self.check_retry(
                &k,
                c.max_attempts,
                c.backoff_ms,
                c.backoff_max_ms,
                c.throttle_k,
            )?;
            num(
                k("throttle_min_rps"),
                c.throttle_min_rps,
                0.0,
                1e9,
                "requests/s >= 0",
            )?;
            if !(1..=MAX_TASKS).contains(&c.instances) {
                return Err(self.invalid(k("instances"), c.instances, "an integer in 1..=1000000"));
            }
            c.load
                .validate()
                .map_err(|(key, v, what)| self.invalid(k(&format!("load.{key}")), v, what))?;
        }
        let mut names = std::collections::BTreeSet::new();
        for l in &self.layers {
            let k = |f: &str| format!("layer[{}].{f}", l.name);
            if !names.insert(l.name.as_str()) {
                return Err(self.invalid("layer.name".into(), &l.name, "unique layer names"));
            }
            if !(1..=MAX_TASKS).contains(&l.tasks) {
                return Err(self.invalid(k("tasks"), l.tasks, "an integer in 1..=1000000"));
            }
            if !(1..=100_000).contains(&l.workers) {
                return Err(self.invalid(k("workers"), l.workers, "an integer in 1..=100000"));
            }
            if !(1..=l.tasks).contains(&l.zones) {
                return Err(self.invalid(k("zones"), l.zones, "an integer in 1..=tasks"));
            }
            if l.calls > 100 {
                return Err(self.invalid(k("calls"), l.calls, "an integer in 0..=100"));
            }
            self.check_service(&k, &l.service)?;
            self.check_retry(
                &k,
                l.max_attempts,
                l.backoff_ms,
                l.backoff_max_ms,
                l.throttle_k,
            )?;
            num(
                k("throttle_min_rps"),
                l.throttle_min_rps,
                0.0,
                1e9,
                "requests/s >= 0",
            )?;
            num(
                k("timeout_ms"),
                l.timeout_ms,
                0.001,
                MAX_MS,
                "ms in [0.001, 3600000]",
            )?;
            if l.hot_tasks > l.tasks {
                return Err(self.invalid(k("hot_tasks"), l.hot_tasks, "an integer in 0..=tasks"));
            }
            num(
                k("hot_share"),
                l.hot_share,
                0.0,
                1.0,
                "a fraction in [0, 1]",
            )?;
            num(
                k("reject_cost_ms"),
                l.reject_cost_ms,
                0.0,
                MAX_MS,
                "ms in [0, 3600000]",
            )?;
            num(
                k("network_ms"),
                l.network_ms,
                0.0,
                MAX_MS,
                "ms in [0, 3600000]",
            )?;
            self.check_admission(&k, l)?;
        }
        for (i, f) in self.faults.iter().enumerate() {
            self.check_fault(i, f)?;
        }
        self.check_shards()?;
        let mut vnames = std::collections::BTreeSet::new();
        for v in &self.variants {
            if v.name.is_empty() || !vnames.insert(v.name.as_str()) {
                return Err(self.invalid("variant.name".into(), &v.name, "unique non-empty names"));
            }
        }
        Ok(())
    }

    fn check_retry(
        &self,
        k: &dyn Fn(&str) -> String,
        attempts: u32,
        base: f64,
        max: f64,
        kk: f64,
    ) -> Result<(), ConfigError> {
        if !(1..=100).contains(&attempts) {
            return Err(self.invalid(k("max_attempts"), attempts, "an integer in 1..=100"));
        }
        if !(base.is_finite() && (0.0..=MAX_MS).contains(&base)) {
            return Err(self.invalid(k("backoff_ms"), base, "ms in [0, 3600000]"));
        }
        if !(max.is_finite() && max >= base && max <= MAX_MS) {
            return Err(self.invalid(k("backoff_max_ms"), max, "ms in [backoff_ms, 3600000]"));
        }
        if !(kk.is_finite() && kk > 0.0 && kk <= 1000.0) {
            return Err(self.invalid(k("throttle_k"), kk, "a number in (0, 1000] (default 2)"));
        }
        Ok(())
    }

    fn check_service(
        &self,
        k: &dyn Fn(&str) -> String,
        d: &ServiceDist,
    ) -> Result<(), ConfigError> {
        let mean = d.mean_ms();
        if !(mean.is_finite() && mean > 0.0 && mean <= MAX_MS) {
            return Err(self.invalid(k("service.mean_ms"), mean, "ms in (0, 3600000]"));
        }
        match *d {
            ServiceDist::Uniform { spread_ms, .. }
                if !(spread_ms.is_finite() && (0.0..=mean).contains(&spread_ms)) =>
            {
                Err(self.invalid(k("service.spread_ms"), spread_ms, "ms in [0, mean_ms]"))
            }
            ServiceDist::Lognormal { sigma, .. }
                if !(sigma.is_finite() && sigma > 0.0 && sigma <= 3.0) =>
            {
                Err(self.invalid(k("service.sigma"), sigma, "a number in (0, 3]"))
            }
            _ => Ok(()),
        }
    }

    fn check_admission(
        &self,
        k: &dyn Fn(&str) -> String,
        l: &LayerConfig,
    ) -> Result<(), ConfigError> {
        let a = &l.admission;
        let ak = |f: &str| k(&format!("admission.{f}"));
        if let Some(limit) = &a.limit {
            limit.validate().map_err(|e| {
                self.invalid(ak("limit"), format_args!("{limit:?}"), &e.to_string())
            })?;
        }
        a.queue.validate().map_err(|e| {
            self.invalid(ak("queue"), format_args!("{:?}", a.queue), &e.to_string())
        })?;
        if a.shed_thresholds.len() > Criticality::COUNT {
            return Err(self.invalid(
                ak("shed_thresholds"),
                format_args!("{:?}", a.shed_thresholds),
                "at most 4 thresholds, SHEDDABLE first",
            ));
        }
        let shed = shed_config(a);
        shed.validate().map_err(|e| {
            self.invalid(
                ak("shed_thresholds"),
                format_args!("{:?}", a.shed_thresholds),
                &e.to_string(),
            )
        })?;
        spillway_core::limiter::validate_headroom(&spillway_core::PerCriticality(a.headroom))
            .map_err(|e| {
                self.invalid(
                    ak("headroom"),
                    format_args!("{:?}", a.headroom),
                    &e.to_string(),
                )
            })?;
        if !(1..=100).contains(&a.max_attempts) {
            return Err(self.invalid(ak("max_attempts"), a.max_attempts, "an integer in 1..=100"));
        }
        let q = &l.quota;
        let qk = |f: &str| k(&format!("quota.{f}"));
        for (name, v) in q
            .customers
            .iter()
            .map(|(n, v)| (n.as_str(), *v))
            .chain(q.default.map(|v| ("default", v)))
        {
            if !(v.is_finite() && v >= 0.0) {
                return Err(self.invalid(qk(name), v, "CPU-seconds per second >= 0"));
            }
        }
        if !(q.burst_ms.is_finite() && q.burst_ms > 0.0 && q.burst_ms <= 86_400_000.0) {
            return Err(self.invalid(qk("burst_ms"), q.burst_ms, "ms in (0, 86400000]"));
        }
        Ok(())
    }

    fn check_fault(&self, i: usize, f: &FaultConfig) -> Result<(), ConfigError> {
        let k = |f: &str| format!("fault[{i}].{f}");
        let (layer, at, dur) = match f {
            FaultConfig::TaskDown {
                layer, at_s, for_s, ..
            }
            | FaultConfig::ZoneDown {
                layer, at_s, for_s, ..
            }
            | FaultConfig::Capacity {
                layer, at_s, for_s, ..
            }
            | FaultConfig::Slow {
                layer, at_s, for_s, ..
            } => (layer, *at_s, *for_s),
        };
        let Some(li) = self.layer_index(layer) else {
            return Err(self.invalid(k("layer"), layer, "the name of a [[layer]]"));
        };
        let l = &self.layers[li];
        if !(at.is_finite() && (0.0..=MAX_DURATION_S).contains(&at)) {
            return Err(self.invalid(k("at_s"), at, "seconds in [0, 86400]"));
        }
        if !(dur.is_finite() && dur > 0.0 && dur <= MAX_DURATION_S) {
            return Err(self.invalid(k("for_s"), dur, "seconds in (0, 86400]"));
        }
        match *f {
            FaultConfig::TaskDown { task, .. } if task >= l.tasks => {
                Err(self.invalid(k("task"), task, "a task index below the layer's tasks"))
            }
            FaultConfig::ZoneDown { zone, .. } if zone >= l.zones => {
                Err(self.invalid(k("zone"), zone, "a zone index below the layer's zones"))
            }
            FaultConfig::Capacity { factor, .. }
                if !(factor.is_finite() && (0.01..=100.0).contains(&factor)) =>
            {
                Err(self.invalid(k("factor"), factor, "a speed factor in [0.01, 100]"))
            }
            FaultConfig::Slow { extra_ms, .. }
                if !(extra_ms.is_finite() && (0.0..=MAX_MS).contains(&extra_ms)) =>
            {
                Err(self.invalid(k("extra_ms"), extra_ms, "ms in [0, 3600000]"))
            }
            _ => Ok(()),
        }
    }

    /// The scenario as one variant would run it: overrides applied, variants cleared.
    pub fn apply(&self, v: &VariantConfig) -> Scenario {
        let mut s = self.clone();
        s.variants.clear();
        if let Some(p) = v.protected {
            s.protected = p;
        }
        for c in &mut s.clients {
            if let Some(r) = v.retry {
                c.retry = r;
            }
            if let Some(r) = v.client_retry {
                c.retry = r;
            }
        }
        for l in &mut s.layers {
            if let Some(r) = v.retry {
                l.retry = r;
            }
            if let Some(r) = v.layer_retry {
                l.retry = r;
            }
            if v.quotas == Some(false) {
                l.quota = QuotaSettings::default();
            }
        }
        s
    }

    /// The variants to run: the declared ones, or the scenario itself under its own name.
    pub fn runs(&self) -> Vec<(String, Scenario)> {
        if self.variants.is_empty() {
            return vec![(self.name.clone(), self.clone())];
        }
        self.variants
            .iter()
            .map(|v| (v.name.clone(), self.apply(v)))
            .collect()
    }

    /// Scales the fleet, its global quotas and the offered load by `factor` (tasks, hot tasks,
    /// zones and client instances rounded, at least 1), keeping the load per task; for fast
    /// tests. Faults naming a task or zone that no longer exists are dropped.
    pub fn scaled(&self, factor: f64) -> Scenario {
        let mut s = self.clone();
        let round = |n: u32| ((f64::from(n) * factor).round() as u32).max(1);
        for l in &mut s.layers {
            l.tasks = round(l.tasks);
            l.zones = l.zones.min(l.tasks);
            if l.hot_tasks > 0 {
                l.hot_tasks = round(l.hot_tasks).min(l.tasks);
            }
            // Global quotas are absolute rates: they scale with the fleet.
            let q = &mut l.quota;
            q.default = q.default.map(|v| v * factor);
            q.customers.values_mut().for_each(|v| *v *= factor);
        }
        for c in &mut s.clients {
            c.instances = round(c.instances);
            c.load = c.load.scaled(factor);
        }
        s.faults.retain(|f| match f {
            FaultConfig::TaskDown { layer, task, .. } => {
                s.layers.iter().any(|l| &l.name == layer && *task < l.tasks)
            }
            FaultConfig::ZoneDown { layer, zone, .. } => {
                s.layers.iter().any(|l| &l.name == layer && *zone < l.zones)
            }
            _ => true,
        });
        s
    }
}
