//! The fleet quota lease protocol at scale, simulated (`spillway sim --lease FILE`).
//!
//! Why a model of its own rather than the request-level engine: the question is how well a
//! *global* quota holds across 10 to 10,000 instances — quota accuracy (what the fleet admits
//! against what it should) and how fast the shares converge after the demand moves or the store
//! comes back — and that depends on the lease protocol's timing, not on individual requests.
//! Demand is fluid (each instance offers a rate; it admits `min(offered, leased rate)`), so
//! 10,000 instances over a minute take well under a second per run.
//!
//! What is modelled, as the lease client (`spillway_tower::lease`) does it:
//!
//! * each instance calls the store once per lease interval, at its own random phase; the call
//!   reports its demand (the arrivals counted since the last reading — a Poisson count of the
//!   offered rate unless `arrivals = "fluid"` — smoothed exponentially over `smoothing_s`
//!   while steady and followed when they show a shift: [`DemandEstimate`], the lease client's
//!   own), asks for its demand's upper bound ([`DemandEstimate::upper`]) and renews its
//!   membership for two intervals; an instance is up from 0, so its first reading runs from
//!   there, one under a quarter interval is not taken (it reports its static rate), and its
//!   first lease may lower the static split but not raise it, as the lease client does;
//! * as the lease client, an instance sends the bucket only once a reading has counted an
//!   arrival (until then it keeps the static split), and one idle for `IDLE_AFTER` whose
//!   demand is under the store's floor once as leaving (the store drops its demand; it keeps
//!   its rate) and then not until an arrival;
//! * the store computes the share with the script's own arithmetic
//!   ([`spillway_core::quota::fair`], tested against `share.lua` on a real Redis) over the
//!   demands it holds for live members (its floor over every live member), and keeps the
//!   water level for half an interval, as the script does; calls in the same time step (a tenth of an interval by default) see each other's
//!   reports, a small departure from Redis's one-at-a-time order;
//! * the reply arrives a store round trip later (`store_latency_ms`);
//! * during a store outage calls fail: an instance holds its last lease for two intervals, then
//!   moves linearly to the static `global / tasks` split over two more; an outage with
//!   `loses_state` (a restart without persistence) also empties the member set and demands.
//!
//! Demand is uneven: instance `i` offers a share proportional to `1 / (i + 1)^skew` of the
//! fleet's total; at `shift_at_s` the ranks reverse (the busiest becomes the quietest), which is
//! the hardest move for leases based on past demand.

use serde::Deserialize;
use spillway_core::quota::fair::FairLevel;
use spillway_core::quota::DemandEstimate;

#[cfg(test)]
#[path = "lease_tests.rs"]
mod tests;

#[path = "lease_trace.rs"]
pub mod trace;
use trace::Trace;

#[path = "lease_report.rs"]
mod report;
use report::measure;
pub use report::{row, table, TABLE_HEADER};

/// A lease simulation scenario (TOML; see `examples/sim/fleet-lease.toml`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseScenario {
    /// Short name.
    pub name: String,
    /// One line on what it shows.
    #[serde(default)]
    pub description: String,
    /// Seed for the instances' lease phases.
    #[serde(default = "one")]
    pub seed: u64,
    /// Simulated seconds.
    pub duration_s: f64,
    /// The global quota, cost units/s.
    pub global: f64,
    /// The fleet's total offered rate, cost units/s.
    pub demand: f64,
    /// Unevenness of demand over instances (Zipf exponent; 0 = even).
    #[serde(default = "one_f")]
    pub skew: f64,
    /// When the demand ranks reverse, seconds (none: never).
    #[serde(default)]
    pub shift_at_s: Option<f64>,
    /// Fleet sizes to run (one run per size × interval).
    pub instances: Vec<usize>,
    /// Lease intervals to run, ms.
    pub lease_ms: Vec<f64>,
    /// Store round trip, ms.
    #[serde(default = "one_f")]
    pub store_latency_ms: f64,
    /// Demand smoothing, seconds (the proxy's is 1 s).
    #[serde(default = "one_f")]
    pub smoothing_s: f64,
    /// The static split's divisor (`[admission.quota] tasks`); default: the fleet size.
    #[serde(default)]
    pub tasks: Option<usize>,
    /// A store outage.
    #[serde(default)]
    pub outage: Option<Outage>,
    /// Accuracy band for convergence (0.05 = ±5%).
    #[serde(default = "tolerance")]
    pub tolerance: f64,
    /// Time steps per lease interval.
    #[serde(default = "steps")]
    pub steps_per_interval: u32,
    /// How a reading counts arrivals (each request costs 1 unit): `"poisson"` (the default)
    /// draws a Poisson count of the offered units, as real requests arrive, so low-traffic
    /// instances read as noisily as they would; `"fluid"` counts exactly what was offered.
    #[serde(default)]
    pub arrivals: Arrivals,
}

/// How a reading counts arrivals (see [`LeaseScenario::arrivals`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arrivals {
    /// A Poisson count of the offered units.
    #[default]
    Poisson,
    /// Exactly the offered units.
    Fluid,
}

/// A window in which the store does not answer.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outage {
    /// Start, seconds.
    pub from_s: f64,
    /// End, seconds.
    pub to_s: f64,
    /// The store comes back empty (a restart without persistence).
    #[serde(default = "yes")]
    pub loses_state: bool,
}

fn one() -> u64 {
    1
}
fn one_f() -> f64 {
    1.0
}
fn yes() -> bool {
    true
}
fn tolerance() -> f64 {
    0.05
}
fn steps() -> u32 {
    10
}

impl LeaseScenario {
    /// Parses and checks a scenario; the error names the key.
    pub fn from_toml(text: &str, source: &str) -> Result<LeaseScenario, String> {
        let sc: LeaseScenario =
            toml::from_str(text).map_err(|e| format!("lease scenario {source}: {e}"))?;
        sc.validate()?;
        Ok(sc)
    }

    /// Checks every value's range.
    pub fn validate(&self) -> Result<(), String> {
        let bad = |key: &str, v: &dyn std::fmt::Debug, want: &str| {
            Err(format!(
                "lease scenario {}: {key} = {v:?}: expected {want}",
                self.name
            ))
        };
        let pos = |x: f64| x.is_finite() && x > 0.0;
        if !pos(self.duration_s) || self.duration_s > 86_400.0 {
            return bad(
                "duration_s",
                &self.duration_s,
                "seconds above 0, at most 86400",
            );
        }
        if !pos(self.global) {
            return bad("global", &self.global, "a rate above 0");
        }
        if !pos(self.demand) {
            return bad("demand", &self.demand, "a rate above 0");
        }
        if !(self.skew.is_finite() && (0.0..=4.0).contains(&self.skew)) {
            return bad("skew", &self.skew, "an exponent from 0 to 4");
        }
        if self.instances.is_empty() || self.instances.iter().any(|&n| !(1..=100_000).contains(&n))
        {
            return bad("instances", &self.instances, "fleet sizes from 1 to 100000");
        }
        if self.lease_ms.is_empty()
            || self
                .lease_ms
                .iter()
                .any(|&l| !(10.0..=10_000.0).contains(&l))
        {
            return bad("lease_ms", &self.lease_ms, "intervals from 10 to 10000 ms");
        }
        if !(self.store_latency_ms.is_finite() && self.store_latency_ms >= 0.0) {
            return bad("store_latency_ms", &self.store_latency_ms, "ms, 0 or more");
        }
        if !pos(self.smoothing_s) {
            return bad("smoothing_s", &self.smoothing_s, "seconds above 0");
        }
        if self.tasks == Some(0) {
            return bad("tasks", &self.tasks, "at least 1");
        }
        if !(self.tolerance > 0.0 && self.tolerance < 1.0) {
            return bad("tolerance", &self.tolerance, "a fraction between 0 and 1");
        }
        if !(1..=1000).contains(&self.steps_per_interval) {
            return bad("steps_per_interval", &self.steps_per_interval, "1 to 1000");
        }
        if let Some(o) = self.outage {
            if !(o.from_s >= 0.0 && o.to_s > o.from_s && o.to_s < self.duration_s) {
                return bad(
                    "outage",
                    &(o.from_s, o.to_s),
                    "0 <= from_s < to_s < duration_s",
                );
            }
        }
        Ok(())
    }
}

/// One run's results (one fleet size × one lease interval).
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseRun {
    /// Fleet size.
    pub instances: usize,
    /// Lease interval, ms.
    pub lease_ms: f64,
    /// Fleet admitted / `min(global, demand)` over the settled seconds (outside the first
    /// three seconds after each event and outside the outage).
    pub accuracy: f64,
    /// The worst settled second's accuracy (furthest from 1).
    pub worst_second: f64,
    /// Seconds from the start until the fleet stays within the tolerance.
    pub converge_start_s: Option<f64>,
    /// Seconds from the demand shift until it stays within the tolerance again.
    pub converge_shift_s: Option<f64>,
    /// Seconds from the store's return until it stays within the tolerance again.
    pub converge_outage_s: Option<f64>,
    /// Fleet admitted / target during the outage.
    pub outage_accuracy: Option<f64>,
    /// Highest fleet admitted / target in the two intervals after the store's return.
    pub peak_after_outage: Option<f64>,
    /// Store calls made.
    pub store_calls: u64,
}

struct Inst {
    phase: u64,
    est: DemandEstimate,
    offered: f64,
    since: Option<f64>,
    /// The store failed since the last lease: the next lease may not raise the rate.
    recovering: bool,
    rate: f64,
    share: Option<f64>,
    last_lease: Option<f64>,
    /// A reply on its way: when it arrives, and this bucket's share (`None`: the call did not
    /// send the bucket, or sent it as leaving, and the rate stays).
    pending: Option<(f64, Option<f64>)>,
    /// What the call sends for this bucket ([`Send`]).
    send: Send,
    /// A reading has counted an arrival (a bucket never used is not sent: `LeaseBook`).
    used: bool,
    /// When a reading last counted an arrival, and whether the store was told it is idle.
    seen_at: f64,
    told_idle: bool,
}

/// What a lease call sends for the bucket (`LeaseBook::demands`).
#[derive(Clone, Copy, PartialEq)]
enum Send {
    Nothing,
    Demand,
    Leave,
}

/// Runs every fleet size × lease interval of `sc`.
pub fn run(sc: &LeaseScenario) -> Vec<LeaseRun> {
    let mut out = Vec::new();
    for &n in &sc.instances {
        for &l in &sc.lease_ms {
            out.push(run_one(sc, n, l));
        }
    }
    out
}

/// One run.
pub fn run_one(sc: &LeaseScenario, n: usize, lease_ms: f64) -> LeaseRun {
    simulate(sc, n, lease_ms, None)
}

/// One run, traced by demand band over the phases between events ([`trace`]).
pub fn run_traced(sc: &LeaseScenario, n: usize, lease_ms: f64) -> (LeaseRun, Trace) {
    let mut phases = Vec::new();
    let mut events = vec![0.0, sc.duration_s];
    events.extend(sc.shift_at_s);
    if let Some(o) = sc.outage {
        events.push(o.from_s);
        events.push(o.to_s);
    }
    events.sort_by(f64::total_cmp);
    for w in events.windows(2) {
        if w[1] - w[0] > 3.0 {
            phases.push((w[0] + 3.0, w[1]));
        }
    }
    let mut tr = Trace::new(n, &phases);
    let r = simulate(sc, n, lease_ms, Some(&mut tr));
    (r, tr)
}

fn simulate(
    sc: &LeaseScenario,
    n: usize,
    lease_ms: f64,
    mut trace: Option<&mut Trace>,
) -> LeaseRun {
    let interval = lease_ms / 1000.0;
    let spi = u64::from(sc.steps_per_interval);
    let dt = interval / spi as f64;
    let steps = (sc.duration_s / dt).ceil() as u64;
    let target = sc.global.min(sc.demand);
    let tasks = sc.tasks.unwrap_or(n) as f64;
    let fixed = sc.global / tasks;
    let latency = sc.store_latency_ms / 1000.0;
    let mut rng = fastrand::Rng::with_seed(sc.seed);
    let raw: Vec<f64> = (0..n)
        .map(|i| 1.0 / ((i + 1) as f64).powf(sc.skew))
        .collect();
    let sum: f64 = raw.iter().sum();
    let weights: Vec<f64> = raw.iter().map(|w| w / sum).collect();
    let truth: Vec<f64> = weights.iter().map(|w| w * sc.demand).collect();
    let mut inst: Vec<Inst> = (0..n)
        .map(|_| Inst {
            phase: rng.u64(..spi),
            est: DemandEstimate::default(),
            offered: 0.0,
            // Every instance is up from 0: its book counts from there (its first reading
            // runs from the origin, as the lease client's does).
            since: Some(0.0),
            // The first lease may lower the static split, not raise it (`LeaseBook`).
            recovering: true,
            rate: fixed,
            share: None,
            last_lease: None,
            pending: None,
            send: Send::Nothing,
            used: false,
            seen_at: 0.0,
            told_idle: false,
        })
        .collect();
    // The store: each instance's last report and membership expiry.
    let mut reported = vec![0.0f64; n];
    let mut member_until = vec![f64::NEG_INFINITY; n];
    // The bucket's demand hash: which members it holds a demand for.
    let mut in_bucket = vec![false; n];
    let mut callers: Vec<usize> = Vec::new();
    let mut demands: Vec<f64> = Vec::with_capacity(n);
    let mut kept: Option<(f64, FairLevel)> = None;
    let mut series: Vec<f64> = Vec::with_capacity(steps as usize);
    let mut calls = 0u64;
    let mut wiped = false;
    for k in 0..steps {
        let t = k as f64 * dt;
        let shifted = sc.shift_at_s.is_some_and(|s| t >= s);
        let down = sc.outage.is_some_and(|o| t >= o.from_s && t < o.to_s);
        if down && !wiped && sc.outage.is_some_and(|o| o.loses_state) {
            reported.iter_mut().for_each(|r| *r = 0.0);
            member_until.iter_mut().for_each(|m| *m = f64::NEG_INFINITY);
            in_bucket.iter_mut().for_each(|b| *b = false);
            wiped = true;
            kept = None;
        }
        let demand = |i: usize| {
            let j = if shifted { n - 1 - i } else { i };
            sc.demand * weights[j]
        };
        let mut admitted = 0.0;
        callers.clear();
        if let Some(tr) = trace.as_deref_mut() {
            let level = kept.map_or(0.0, |(_, l)| l.share(f64::MAX).min(sc.global));
            tr.begin(t, sc.global, level, &truth);
        }
        for (i, me) in inst.iter_mut().enumerate() {
            let d = demand(i);
            if let Some((at, share)) = me.pending {
                if at <= t {
                    me.pending = None;
                    // The first lease after an outage may come from a store that restarted
                    // empty and counts only the first callers: it may lower the rate, not
                    // raise it, until the next one (the proxy's `LeaseBook::granted`). A
                    // bucket not sent, or sent as leaving, keeps its rate.
                    if let Some(share) = share {
                        me.rate = if me.recovering {
                            share.min(me.rate)
                        } else {
                            share
                        };
                        me.share = Some(share);
                    }
                    me.recovering = false;
                    me.last_lease = Some(at);
                }
            }
            if k % spi == me.phase {
                // The lease client's demand: the last interval's offered rate, smoothed while
                // steady and followed when it shifts, by the lease client's own estimator.
                // A reading shorter than a quarter interval tells nothing and is not taken
                // (`LeaseBook::demands`): the next one runs from the same point.
                let mut arrived = false;
                if let Some(since) = me.since.filter(|&s| t - s >= interval / 4.0 - 1e-9) {
                    let dt_call = t - since;
                    let k = match sc.arrivals {
                        Arrivals::Poisson => poisson(&mut rng, me.offered),
                        Arrivals::Fluid => me.offered.round() as u64,
                    };
                    let units = match sc.arrivals {
                        Arrivals::Poisson => k as f64,
                        Arrivals::Fluid => me.offered,
                    };
                    me.est
                        .update_with(units / dt_call, dt_call, Some(k), sc.smoothing_s);
                    me.offered = 0.0;
                    me.since = Some(t);
                    arrived = k > 0;
                } else if !me.used {
                    // A reading too short to take still sees whether anything arrived (the
                    // lease client's counters run all along): a bucket with arrivals is sent.
                    arrived = rng.f64() < 1.0 - (-me.offered).exp();
                }
                if arrived {
                    me.used = true;
                    me.seen_at = t;
                    me.told_idle = false;
                }
                // As `LeaseBook::demands`: a bucket never used is not sent, an idle one (no
                // arrival for `IDLE_AFTER` and a demand under the store's floor) once as
                // leaving, then not until an arrival.
                let floor = sc.global / n as f64 / 100.0;
                me.send = if !me.used || (me.told_idle && !arrived) {
                    Send::Nothing
                } else if arrived
                    || t - me.seen_at < IDLE_AFTER_S
                    || me.est.value().is_some_and(|v| v >= floor)
                {
                    Send::Demand
                } else {
                    me.told_idle = true;
                    Send::Leave
                };
                calls += 1;
                if down {
                    me.recovering = true;
                    me.told_idle = false;
                    fall_back(me, t, interval, fixed);
                } else {
                    callers.push(i);
                }
            }
            me.offered += d * dt;
            admitted += d.min(me.rate);
            if let Some(tr) = trace.as_deref_mut() {
                let rank = if shifted { n - 1 - i } else { i };
                tr.instance(i, rank, d, me.rate, reported[i]);
            }
        }
        if !callers.is_empty() {
            for &i in &callers {
                member_until[i] = t + 2.0 * interval;
                match inst[i].send {
                    // Before its first reading an instance reports the rate it enforces.
                    Send::Demand => {
                        reported[i] = inst[i].est.value().unwrap_or(inst[i].rate);
                        in_bucket[i] = true;
                    }
                    Send::Leave => in_bucket[i] = false,
                    Send::Nothing => {}
                }
            }
            // The script keeps a bucket's level for half an interval (`share.lua`): within
            // that, callers get the kept level applied to their own demand.
            // A caller whose demand just shifted has it computed afresh (the lease client
            // passes no reuse then).
            let fresh = callers.iter().any(|&i| inst[i].est.shifted());
            let level = match kept {
                Some((at, level)) if !fresh && t - at < interval / 2.0 => level,
                _ => {
                    demands.clear();
                    let live = (0..n).filter(|&i| member_until[i] > t);
                    let members = live.clone().count();
                    demands.extend(live.filter(|&i| in_bucket[i]).map(|i| reported[i]));
                    let level = FairLevel::new(sc.global, members, &mut demands);
                    kept = Some((t, level));
                    level
                }
            };
            for &i in &callers {
                if inst[i].send != Send::Demand {
                    inst[i].pending = Some((t + latency, None));
                    continue;
                }
                let ask = match inst[i].est.value() {
                    Some(_) => inst[i].est.upper(),
                    None => reported[i],
                };
                if let Some(tr) = trace.as_deref_mut() {
                    tr.asks[i] = ask;
                }
                inst[i].pending = Some((t + latency, Some(level.share_asking(reported[i], ask))));
            }
        }
        series.push(admitted / target);
    }
    measure(sc, n, lease_ms, dt, &series, calls)
}

/// `spillway_tower::lease::IDLE_AFTER`, seconds.
const IDLE_AFTER_S: f64 = 2.0;

/// A Poisson count with mean `mean`: by multiplication of uniforms for small means, by the
/// normal approximation (rounded, at least 0) from 30 up, where its error is far below the
/// noise it stands for.
fn poisson(rng: &mut fastrand::Rng, mean: f64) -> u64 {
    if mean.is_nan() || mean <= 0.0 {
        return 0;
    }
    if mean < 30.0 {
        let limit = (-mean).exp();
        let mut p = rng.f64();
        let mut k = 0;
        while p > limit {
            p *= rng.f64();
            k += 1;
        }
        return k;
    }
    let u1 = 1.0 - rng.f64(); // (0, 1]
    let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * rng.f64()).cos();
    (mean + mean.sqrt() * z).round().max(0.0) as u64
}

/// No lease this interval: hold the last for two intervals, then move to the static split
/// over two more (the proxy's `LeaseBook::fail`).
fn fall_back(me: &mut Inst, t: f64, interval: f64, fixed: f64) {
    let Some(last) = me.last_lease else {
        me.rate = fixed;
        return;
    };
    let hold = 2.0 * interval;
    let age = t - last;
    if age <= hold {
        return;
    }
    let f = ((age - hold) / hold).min(1.0);
    let from = me.share.unwrap_or(fixed);
    me.rate = from + (fixed - from) * f;
}
