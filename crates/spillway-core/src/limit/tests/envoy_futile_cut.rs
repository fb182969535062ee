//! `rebaseline_on_futile_cut` of the Envoy gradient controller: host contention (every answer
//! slower whatever the concurrency) no longer cuts the limit to its floor, while an upstream
//! whose latency follows the concurrency is still cut as before.
//!
//! Model (deterministic, one completion per step, time from the samples only): requests arrive
//! at `rate`/s; the upstream has `capacity` parallel slots of `BASE`; the host multiplies every
//! latency by `slow` (1 = quiet). Requests wanted in flight (Little's law) `d = rate · latency`;
//! in flight `n = min(limit, d)` — beyond the limit requests wait in the proxy or are refused;
//! latency `slow · BASE · max(1, n / capacity)`; completions `latency / n` apart, so the
//! completions per simulated second are the goodput.

use super::*;

const BASE_MS: f64 = 10.0;

#[derive(Clone, Copy)]
struct World {
    rate: f64,
    capacity: f64,
    slow: f64,
}

/// What a stretch of simulated time did: lowest limit, completions, simulated seconds.
#[derive(Debug)]
struct Stretch {
    lowest: usize,
    completions: u64,
    secs: f64,
    last: usize,
}

impl Stretch {
    fn goodput(&self, rate: f64) -> f64 {
        self.completions as f64 / (self.secs * rate)
    }
}

/// The host quiet and the upstream far from its capacity (20 of its 1,000 slots wanted at
/// 10 ms): the stretch most tests settle the limit on first.
const QUIET: World = World {
    rate: 2000.0,
    capacity: 1000.0,
    slow: 1.0,
};

/// One limit with the proxy's zero-config parameters, driven through the model on its own
/// simulated clock (nanoseconds since `t0`).
struct Model {
    l: EnvoyGradientLimit,
    t0: Instant,
    now: f64,
}

impl Model {
    fn new(rebaseline: bool) -> Self {
        let t0 = Instant::now();
        Model {
            l: limit(&proxy_like(rebaseline), t0),
            t0,
            now: 0.0,
        }
    }

    /// `secs` simulated seconds of world `w`.
    fn run(&mut self, w: World, secs: f64) -> Stretch {
        let Model { l, t0, now } = self;
        run(l, *t0, now, w, secs)
    }
}

fn run(l: &mut EnvoyGradientLimit, t0: Instant, now_ns: &mut f64, w: World, secs: f64) -> Stretch {
    let end = *now_ns + secs * 1e9;
    let start = *now_ns;
    let (mut lowest, mut completions) = (usize::MAX, 0);
    while *now_ns < end {
        let limit = l.limit();
        lowest = lowest.min(limit);
        let free = w.slow * BASE_MS * 1e6;
        // Wanted in flight at the latency they would see (above capacity the upstream queues,
        // so every request beyond it is wanted and the limit decides).
        let wanted = w.rate * free / 1e9;
        let n = if wanted <= w.capacity {
            (wanted.ceil() as usize).min(limit).max(1)
        } else {
            limit
        };
        let rtt_ns = free * (n as f64 / w.capacity).max(1.0);
        *now_ns += rtt_ns / n as f64;
        l.on_sample(&Sample {
            rtt: Duration::from_nanos(rtt_ns as u64),
            in_flight: n,
            dropped: false,
            now: t0 + Duration::from_nanos(*now_ns as u64),
        });
        completions += 1;
    }
    Stretch {
        lowest,
        completions,
        secs: (*now_ns - start) / 1e9,
        last: l.limit(),
    }
}

fn proxy_like(rebaseline: bool) -> EnvoyGradientConfig {
    // The proxy's zero-config parameters (spillway-proxy `default_admission`), minRTT every
    // 30 s with no jitter so both runs measure at the same moments.
    EnvoyGradientConfig {
        interval: Duration::from_secs(30),
        request_count: 25,
        jitter: 0.0,
        buffer: 0.5,
        min_concurrency: 5,
        app_limited_growth: Some(2.0),
        one_change_per_rtt: true,
        rebaseline_on_futile_cut: rebaseline,
        ..EnvoyGradientConfig::default()
    }
}

fn limit(cfg: &EnvoyGradientConfig, t0: Instant) -> EnvoyGradientLimit {
    EnvoyGradientLimit::new(cfg, t0, Box::new(FixedRandom(0.0))).expect("valid config")
}

/// 5 s quiet, then the host 3× slower for 10 s (a core of foreign work), then 5 s quiet:
/// the busy stretch, the quiet one after it, and the re-baselines.
fn contention(rebaseline: bool) -> (Stretch, Stretch, u64) {
    let mut m = Model::new(rebaseline);
    m.run(QUIET, 5.0);
    let busy = m.run(World { slow: 3.0, ..QUIET }, 10.0);
    let after = m.run(QUIET, 5.0);
    (busy, after, m.l.futile_rebaselines())
}

#[test]
fn host_contention_no_longer_cuts_the_limit_to_its_floor() {
    let (plain, plain_after, plain_rebaselines) = contention(false);
    let (fixed, fixed_after, rebaselines) = contention(true);
    // Without the rule the latency (30 ms = 2 × the 1.5 · minRTT tolerance) halves the limit
    // window after window to the floor, where goodput is floor / latency.
    assert_eq!(plain.lowest, 5, "{plain:?}");
    assert_eq!(plain_rebaselines, 0);
    // With it four cuts (40 → 10) show latency not following the limit; minRTT is re-measured
    // at 30 ms and the cuts are taken back: goodput stays near what the load offers.
    assert!(rebaselines >= 1, "{fixed:?}");
    assert!(fixed.lowest >= 10, "{fixed:?} vs {plain:?}");
    assert!(
        fixed.goodput(2000.0) > plain.goodput(2000.0),
        "goodput {} vs {}",
        fixed.goodput(2000.0),
        plain.goodput(2000.0)
    );
    assert!(fixed.goodput(2000.0) >= 0.95, "{}", fixed.goodput(2000.0));
    // Both serve everything once the host is quiet again.
    assert!(fixed_after.goodput(2000.0) >= 0.99, "{fixed_after:?}");
    assert!(plain_after.goodput(2000.0) >= 0.99, "{plain_after:?}");
}

#[test]
fn an_upstream_overload_is_still_cut_to_near_its_capacity() {
    // Open loop at twice the upstream's capacity (100 wanted in flight, 50 slots): the latency
    // follows the limit, so every cut works and none is futile.
    for rebaseline in [false, true] {
        let mut m = Model::new(rebaseline);
        let w = World {
            rate: 10_000.0,
            capacity: 50.0,
            slow: 1.0,
        };
        m.run(w, 5.0);
        let tail = m.run(w, 10.0);
        assert_eq!(m.l.futile_rebaselines(), 0, "rebaseline {rebaseline}");
        // Equilibrium near 1.5 × capacity (the tolerance) plus √limit.
        assert!(tail.lowest >= 40 && tail.last <= 100, "{tail:?}");
        assert_eq!(m.l.min_rtt_nanos(), m.l.measured_min_rtt_nanos());
    }
}

#[test]
fn an_upstream_overload_during_host_contention_is_still_bounded() {
    // Both at once: the host 2× slower and the upstream asked for 4× its capacity. The rule
    // may raise the baseline (at most 2× per re-baseline), but the limit must stay within a
    // few × the upstream's capacity, not run to the ceiling.
    let mut m = Model::new(true);
    let w = World {
        rate: 10_000.0,
        capacity: 50.0,
        slow: 1.0,
    };
    m.run(World { rate: 2000.0, ..w }, 5.0);
    let s = m.run(World { slow: 2.0, ..w }, 10.0);
    assert!(s.last <= 200, "{s:?}");
}

#[test]
fn a_cut_that_is_never_reached_is_not_judged() {
    // Latency 4× minRTT with a single request in flight: every window cuts, but no cut
    // constrains anything, so the latency not falling says nothing about our concurrency —
    // no re-baseline, the limit goes to its floor as Envoy's does.
    let mut m = Model::new(true);
    m.run(QUIET, 5.0);
    assert!(m.l.limit() >= 40);
    for _ in 0..300 {
        m.now += 5e6;
        m.l.on_sample(&Sample {
            rtt: Duration::from_millis(40),
            in_flight: 1,
            dropped: false,
            now: m.t0 + Duration::from_nanos(m.now as u64),
        });
    }
    assert_eq!(m.l.futile_rebaselines(), 0);
    assert_eq!(m.l.limit(), 5);
}

#[test]
fn a_raised_baseline_follows_a_quieter_host_back_down() {
    let mut m = Model::new(true);
    m.run(QUIET, 5.0);
    let measured = m.l.measured_min_rtt_nanos();
    m.run(World { slow: 3.0, ..QUIET }, 3.0);
    assert!(m.l.min_rtt_nanos() > measured * 1.5, "re-baselined");
    m.run(QUIET, 1.0);
    assert_eq!(m.l.min_rtt_nanos(), measured);
}

#[test]
fn rebaseline_needs_one_change_per_rtt() {
    let cfg = EnvoyGradientConfig {
        rebaseline_on_futile_cut: true,
        one_change_per_rtt: false,
        ..EnvoyGradientConfig::default()
    };
    let e = cfg.validate().expect_err("refused");
    assert!(
        e.to_string()
            .contains("limit.envoy_gradient.rebaseline_on_futile_cut"),
        "{e}"
    );
}

#[test]
fn host_contention_that_comes_and_goes_no_longer_cuts_the_limit_to_its_floor() {
    // Foreign work varies: the host 1.5–4× slower, changing every 150 ms (a window and a
    // half), for 15 s. Window-to-window latency says little; the fit over several windows
    // still sees latency not following the cuts.
    let mut result = Vec::new();
    for rebaseline in [false, true] {
        let mut m = Model::new(rebaseline);
        m.run(QUIET, 5.0);
        let (mut lowest, mut completions, start) = (usize::MAX, 0, m.now);
        for i in 0..100 {
            let slow = [2.0, 3.5, 2.5, 4.0, 1.5, 3.0][i % 6];
            let s = m.run(World { slow, ..QUIET }, 0.15);
            lowest = lowest.min(s.lowest);
            completions += s.completions;
        }
        let goodput = completions as f64 / ((m.now - start) / 1e9 * QUIET.rate);
        result.push((lowest, goodput, m.l.futile_rebaselines()));
    }
    let (plain, rule) = (result[0], result[1]);
    assert!(plain.0 == 5 && plain.1 < 0.6, "without: {plain:?}");
    assert!(
        rule.0 >= 15 && rule.1 >= 0.8,
        "with: {rule:?} (without: {plain:?})"
    );
}
