//! `rebaseline_on_futile_cut`: a cut of the limit that did not lower the latency says the
//! latency was not ours to cut.
//!
//! Why: a latency-gradient limit assumes that latency above its baseline (minRTT) is queueing
//! caused by the requests it lets through, so cutting them shortens it. When the *host* is
//! busy with foreign work (a build, a batch job, a noisy neighbour on the same cores), every
//! process on it runs later: the proxy and the upstream answer slower at any concurrency, the
//! gradient reads overload, and each cut changes nothing but the throughput. The limit falls
//! below what the offered load needs (Little's law: in flight = rate × latency), the queue
//! fills and requests are refused although the upstream has capacity to spare — measured on
//! this project's 2-core host with one core of other work: limit 129 → 9–19, queue full,
//! thousands refused (bench/results/proxy-overhead.md, fourth round). Envoy's controller only
//! notices after the fact: when the limit has sat at its floor for 5 windows it assumes minRTT
//! is stale and re-measures it (Envoy adaptive concurrency docs, `gradient_controller.cc`);
//! until then it refuses.
//!
//! The rule tests the assumption instead of trusting it. Queueing predicts that latency
//! follows the concurrency: a queue of `n` at the upstream waits `n / throughput` (Little's
//! law), so across windows whose limit was reached (the window's peak in flight at the limit —
//! otherwise the limit constrained nothing) and whose latency was above tolerance, the latency
//! rises and falls with the limit: log-latency against log-limit has a slope near 1. Host
//! contention predicts a slope near 0: the cuts change the limit, not the latency. So the
//! controller keeps the last [`POINTS`] such windows (at most [`MAX_AGE_NS`] old) and, once
//! at least [`MIN_POINTS`] of them span limits at least [`MIN_SPREAD`]× apart, fits the slope
//! (least squares, no allocation). Below [`MAX_SLOPE`] the cuts were futile: minRTT is
//! re-measured on live traffic — the geometric mean latency of those windows, what the host
//! gives whatever the concurrency, as Envoy measures minRTT on live traffic when
//! `min_concurrency_limit` is set — and the cuts are taken back (the limit returns to the
//! largest of those windows'). A regression over several windows rather than a comparison of
//! two: foreign work comes and goes within a second, so one window's latency against the next
//! says more about the neighbour than about the cut (a first version judged cut by cut and
//! never fired when the slowdown varied 1.5–4× between windows).
//!
//! Each re-baseline at most doubles the baseline (Envoy's gradient clamp of 2: no single window
//! moves the controller by more); the raised baseline is dropped as soon as a window is back
//! within the *measured* minRTT's tolerance (the host is quiet again) and replaced at the next
//! periodic minRTT measurement.
//!
//! What it keeps: a real upstream overload answers a cut — its queue shrinks with the requests
//! sent — so its slope is near 1 and the limit converges as before (tests:
//! `limit/tests/envoy_futile_cut.rs`, the open-loop model there and the closed-loop one of
//! `closed_loop.rs`). Near equilibrium the limit moves by a few per cent, too little spread to
//! fit. What it cannot tell: an upstream slowed by *other* clients also ignores our cuts; the
//! rule then stops cutting until the host reads quiet or minRTT is measured again, where Envoy
//! would cut to its floor. Counted ([`FutileCuts::rebaselines`]) so it can be seen.
//!
//! Measured, and why the proxy leaves it off (bench/overhead/foreign-load.sh, fifth round in
//! bench/results/proxy-overhead.md): foreign CPU work on the proxy's own host is rarely "slower
//! at any concurrency with CPU to spare". With one busy-loop core on a 2-core host, at 3,000
//! and 4,500 req/s the limit never bound (0 refused with or without the rule), and at 7,400
//! req/s the host ran out of CPU for the proxy path itself: the limit's refusals were load
//! shedding (a fixed limit that refuses nothing kept 18–100 % of requests within 500 ms; the
//! gradient 92–96 %), and re-baselining did not improve them (77–96 %). The rule helps where
//! its model holds — latency inflated by something the proxy's concurrency does not drive
//! while throughput is not short (`limit/tests/envoy_futile_cut.rs`) — which this host did
//! not produce.
//!
//! The constants are this project's choices, not Envoy's or Netflix's (neither has the rule);
//! each is stated with its reason.

use std::f64::consts::LN_2;

/// Windows kept for the fit: 8 windows of 100 ms plus their round trips, about a second of
/// cutting — a collapse from a limit of 100 to 5 at Envoy's largest cut (½ + √) takes 5.
pub(super) const POINTS: usize = 8;
/// Fewest windows to fit: with 2 a single noisy window decides; 4 average foreign work that
/// comes and goes between windows.
pub(super) const MIN_POINTS: usize = 4;
/// The windows' limits must span at least 2× (one of Envoy's largest cuts): near equilibrium
/// the limit moves by a few per cent and latency noise would decide the slope.
pub(super) const MIN_SPREAD: f64 = LN_2;
/// Futile below a slope of 1/3: an upstream queue gives about 1 (a little less with service
/// time and network that do not shrink), contention about 0; a third sits well clear of both.
pub(super) const MAX_SLOPE: f64 = 1.0 / 3.0;
/// Windows older than 2 s are forgotten: 20 update windows, longer than any collapse, shorter
/// than a change of what runs on the host that should count as new evidence.
pub(super) const MAX_AGE_NS: u64 = 2_000_000_000;
/// A re-baseline at most doubles the baseline (Envoy's `GRADIENT_MAX`: no window moves the
/// controller by more than 2×).
pub(super) const MAX_STEP: f64 = 2.0;

/// The fit's verdict: re-measure the baseline at `rtt_ns` and take the limit back to `restore`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Rebaseline {
    pub(super) rtt_ns: f64,
    pub(super) restore: usize,
}

#[derive(Debug, Clone, Copy, Default)]
struct Point {
    at_ns: u64,
    ln_limit: f64,
    ln_rtt: f64,
}

/// The futile-cut bookkeeping of one [`super::EnvoyGradientLimit`]: a ring of recent congested
/// windows whose limit was reached.
#[derive(Debug, Default)]
pub(super) struct FutileCuts {
    points: [Point; POINTS],
    len: usize,
    next: usize,
    rebaselines: u64,
}

impl FutileCuts {
    /// Re-baselines so far.
    pub(super) fn rebaselines(&self) -> u64 {
        self.rebaselines
    }

    /// Forgets every window (a minRTT measurement starts afresh).
    pub(super) fn reset(&mut self) {
        self.len = 0;
        self.next = 0;
    }

    /// Records a window closed at `now_ns` whose latency `rtt_ns` was above tolerance and
    /// whose `limit` was reached; returns a re-baseline when the kept windows show latency not
    /// following the limit.
    pub(super) fn congested(
        &mut self,
        now_ns: u64,
        limit: usize,
        rtt_ns: f64,
    ) -> Option<Rebaseline> {
        self.points[self.next] = Point {
            at_ns: now_ns,
            ln_limit: (limit.max(1) as f64).ln(),
            ln_rtt: rtt_ns.max(1.0).ln(),
        };
        self.next = (self.next + 1) % POINTS;
        self.len = (self.len + 1).min(POINTS);
        let fresh = |p: &&Point| now_ns.saturating_sub(p.at_ns) <= MAX_AGE_NS;
        let kept = &self.points[..self.len];
        let n = kept.iter().filter(fresh).count();
        if n < MIN_POINTS {
            return None;
        }
        let (mut lo, mut hi, mut sx, mut sy) = (f64::MAX, f64::MIN, 0.0, 0.0);
        for p in kept.iter().filter(fresh) {
            lo = lo.min(p.ln_limit);
            hi = hi.max(p.ln_limit);
            sx += p.ln_limit;
            sy += p.ln_rtt;
        }
        if hi - lo < MIN_SPREAD {
            return None;
        }
        let (mx, my) = (sx / n as f64, sy / n as f64);
        let (mut sxy, mut sxx) = (0.0, 0.0);
        for p in kept.iter().filter(fresh) {
            sxy += (p.ln_limit - mx) * (p.ln_rtt - my);
            sxx += (p.ln_limit - mx) * (p.ln_limit - mx);
        }
        // sxx > 0: the limits span at least MIN_SPREAD.
        if sxy / sxx >= MAX_SLOPE {
            return None;
        }
        self.reset();
        self.rebaselines += 1;
        Some(Rebaseline {
            rtt_ns: my.exp(),
            restore: hi.exp().round() as usize,
        })
    }
}
