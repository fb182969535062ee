//! The gradient's sampling and minRTT windows: when a window closes, what it concludes, and the
//! new limit it sets.
//!
//! Why apart from `mod.rs`: this is the decision logic (Envoy's `gradient_controller.cc`
//! `updateConcurrencyLimit` / `enterMinRTTSamplingWindow` plus this project's additions, each
//! described in the module docs of `envoy`), while `mod.rs` holds the state, its construction
//! and the per-sample entry points that feed it.

use super::floor;
use super::futile;
use super::knee::Verdict;
use super::levels;
use super::live::LiveMinRtt;
use super::thrash::ThroughputCeiling;
use super::{EnvoyGradientLimit, GRADIENT_MAX, GRADIENT_MIN, STALE_MIN_RTT_WINDOWS};
use crate::limit::clamp_limit;

impl EnvoyGradientLimit {
    /// Whether the open sampling window is due to close: after `update_interval`, or with
    /// `rtt_windows` once it holds `request_count` samples and has lasted minRTT.
    pub(super) fn window_due(&self, now_ns: u64) -> bool {
        let elapsed = now_ns.saturating_sub(self.window_start_ns);
        elapsed >= self.update_ns
            || (self.rtt_windows
                && self.min_rtt_ns > 0.0
                && self.hist.count() >= self.request_count
                && elapsed as f64 >= self.min_rtt_ns)
    }

    /// Whether minRTT is measured in windows that pin the limit (Envoy's way), rather than
    /// fixed or measured live.
    pub(super) fn periodic_min_rtt(&self) -> bool {
        self.dynamic_min_rtt && self.live.is_none()
    }

    /// Latency tolerated before the limit is cut: minRTT with its buffer, or with the slack
    /// share of the callers' budget, whichever is larger.
    pub(super) fn tolerated_ns(&self) -> f64 {
        let min_rtt = self.min_rtt_ns.max(0.0);
        (min_rtt * (1.0 + self.buffer)).max(min_rtt + self.latency_slack * self.budget_ns)
    }

    pub(super) fn enter_min_rtt_window(&mut self, now_ns: u64) {
        self.in_min_rtt_window = true;
        self.deferred_limit = self.limit;
        if self.pin {
            self.limit = self.min_concurrency;
        }
        self.hist.clear();
        self.window_dropped = 0;
        self.unanswered.clear_window();
        self.min_rtt_epoch_ns = now_ns;
        self.consecutive_at_floor = 0;
        if let Some(f) = self.futile.as_mut() {
            f.reset();
        }
    }

    pub(super) fn finish_min_rtt_window(&mut self, now_ns: u64) {
        if let Some(q) = self.hist.quantile(self.percentile) {
            self.min_rtt_ns = q;
            self.measured_min_rtt_ns = q;
        }
        self.hist.clear();
        self.limit = self.deferred_limit.clamp(self.floor, self.max);
        self.in_min_rtt_window = false;
        // Requests admitted at the pinned limit say nothing about the restored one.
        self.note_change(now_ns, 0.0);
        // Envoy: interval + (random % ceil(interval · jitter)); here U·interval·jitter, U ∈ [0,1).
        let u = self.rng.uniform();
        let u = if (0.0..1.0).contains(&u) { u } else { 0.0 };
        let jitter_ns = (self.interval_ns as f64 * self.jitter * u) as u64;
        self.next_min_rtt_ns = now_ns
            .saturating_add(self.interval_ns)
            .saturating_add(jitter_ns);
        self.window_start_ns = now_ns;
        self.window_peak_in_flight = 0;
        self.window_peak_counted = 0;
        self.window_dropped = 0;
        self.unanswered.clear_window();
    }

    /// Opens the minRTT window when it is due (periodic minRTT), or closes the sampling
    /// window when it is, before a sample taken at `now_ns` is counted in the one now open.
    pub(super) fn advance_window(&mut self, now_ns: u64) {
        if self.in_min_rtt_window {
            return;
        }
        if self.periodic_min_rtt() && now_ns >= self.next_min_rtt_ns {
            self.enter_min_rtt_window(now_ns);
        } else if self.window_due(now_ns) {
            self.close_sample_window(now_ns);
            if self.periodic_min_rtt() && now_ns >= self.next_min_rtt_ns {
                self.enter_min_rtt_window(now_ns);
            }
        }
    }

    /// Whether a request answered (or given up on) at `now_ns` after `rtt_ns` counts in the
    /// open window. Requests started before the current minRTT window opened ran under the
    /// old limit: they say nothing about ideal latency (Envoy discards them always). A start
    /// before `origin` (checked_sub fails) predates every window. With `one_change_per_rtt`,
    /// neither does a request started before the last change of the limit (module docs); the
    /// minRTT window has its own epoch.
    pub(super) fn counts(&self, now_ns: u64, rtt_ns: u64) -> bool {
        let epoch = if self.in_min_rtt_window {
            self.min_rtt_epoch_ns
        } else {
            self.min_rtt_epoch_ns.max(self.change_epoch_ns)
        };
        now_ns
            .checked_sub(rtt_ns)
            .is_some_and(|started| started >= epoch)
    }

    pub(super) fn close_sample_window(&mut self, now_ns: u64) {
        self.window_start_ns = now_ns;
        let peak = std::mem::take(&mut self.window_peak_in_flight);
        let peak_counted = std::mem::take(&mut self.window_peak_counted);
        let dropped = std::mem::take(&mut self.window_dropped);
        let answered = self.hist.count().saturating_sub(dropped);
        let (unanswered, bound) = self.unanswered.close(answered, dropped);
        // Nothing answered and no verdict yet: nothing to judge, as with no sample at all —
        // except before any minRTT, where the window counts towards measuring afresh.
        let sample = self
            .hist
            .quantile(self.percentile)
            .or(bound.filter(|_| unanswered || self.measured_min_rtt_ns <= 0.0));
        let Some(sample) = sample else {
            return;
        };
        self.censored = u64::from(dropped) * 2 >= u64::from(self.hist.count()) || unanswered;
        self.hist.clear();
        let knee = self.knee.as_mut().map(|k| k.close(self.limit));
        // One change per RTT: a window that closes on its timer with fewer answers than a
        // measurement takes, sooner after the last change than the latency that prompted it,
        // holds only the answers that beat that latency (module docs).
        let early = self.one_change_per_rtt
            && answered < self.request_count
            && (now_ns.saturating_sub(self.change_epoch_ns) as f64) < self.change_rtt_ns;
        self.sample_rtt_ns = sample;
        if self.live.is_some() && self.measured_min_rtt_ns <= 0.0 {
            // No minRTT yet (live measurement): nothing to compare with; hold the limit — and
            // if no request has run at low concurrency for 5 windows (a load that was heavy
            // from its first request on, which a real start hardly produces: its first request
            // runs alone), drop to `min_concurrency`, where every request does.
            self.consecutive_at_floor += 1;
            if self.consecutive_at_floor >= STALE_MIN_RTT_WINDOWS {
                self.consecutive_at_floor = 0;
                self.measure_at_low_concurrency(now_ns);
            }
            return;
        }
        // A provisional minRTT (live.rs) is the median of a handful of requests: too noisy
        // to end slow start or cut on, unless the window is clearly past it (twice the
        // tolerance, where the gradient's clamp bottoms out) or most of it timed out — and
        // not even then while it rests on the first answers back alone, the fastest ones
        // (`LiveMinRtt::partial`).
        let partial = self.live.as_ref().is_some_and(LiveMinRtt::partial);
        let provisional = self.slow_start
            && self.live.as_ref().is_some_and(LiveMinRtt::provisional)
            && !(self.exact_cuts && self.censored)
            && (partial || sample <= 2.0 * self.tolerated_ns());
        if self.slow_start
            && !provisional
            && (sample > self.min_rtt_ns * (1.0 + self.buffer) || self.censored)
        {
            // Latency has left minRTT's own tolerance (or most callers gave up first): the
            // knee is near, growth is the gradient's from now on.
            self.slow_start = false;
        }
        let tolerated = self.tolerated_ns();
        if let Some(f) = self.futile.as_mut() {
            if sample > tolerated && peak_counted >= self.limit {
                if let Some(r) = f.congested(now_ns, self.limit, sample) {
                    // futile.rs: the latency now seen is the host's, not our queue's.
                    let step = self.min_rtt_ns * futile::MAX_STEP;
                    self.min_rtt_ns = r.rtt_ns.min(step).max(self.min_rtt_ns);
                    self.limit = self.limit.max(r.restore).clamp(self.floor, self.max);
                }
            }
        }
        // On a provisional minRTT too (flat.rs): an upstream kept busy from its start never
        // completes a measurement.
        if let Some(f) = self.flat.as_mut() {
            if sample <= tolerated || self.censored {
                // The rule judges a latency rise, from the samples since it began.
                f.clear();
                // A step is judged against windows like this one (flat.rs): calm while the
                // limit was not the constraint.
                if sample <= tolerated && !self.censored && peak * 2 <= self.limit {
                    f.calm_window(now_ns, sample, peak_counted);
                } else {
                    f.end_calm();
                }
            } else {
                let held = f.held_step(now_ns, sample, peak_counted, 1.0 + self.buffer);
                if self.min_rtt_ns <= self.measured_min_rtt_ns
                    && !self.slow_start
                    && (held.is_some()
                        || f.flat()
                        || f.stepped(now_ns, sample, peak_counted, 1.0 + self.buffer))
                    && !self.live.as_mut().is_some_and(LiveMinRtt::small_upstream)
                {
                    // flat.rs: the upstream's latency, not a queue of ours. After a held run,
                    // by as much as the held level slowed: its latency held a queue of ours.
                    let target = held.map_or(sample, |r| self.min_rtt_ns * sample / r);
                    f.clear();
                    f.end_calm();
                    f.end_held(held.map(|_| self.limit));
                    self.min_rtt_ns = target
                        .min(self.min_rtt_ns * futile::MAX_STEP)
                        .max(self.min_rtt_ns);
                }
            }
        }
        if self.min_rtt_ns > self.measured_min_rtt_ns
            && sample <= self.measured_min_rtt_ns * (1.0 + self.buffer)
        {
            // A baseline raised by either rule above: back within the measured minRTT's
            // tolerance, the host is quiet again or the upstream is back to its speed.
            self.min_rtt_ns = self.measured_min_rtt_ns;
        }
        let mut new_limit = self.calculate_new_limit();
        let old = self.limit;
        if early && !self.slow_start {
            // Cuts stand (the fast answers only understate the latency); growth is by one at
            // most, as TCP's congestion avoidance grows past a loss (RFC 5681 §3.1).
            new_limit = new_limit.min(old.saturating_add(1));
        }
        if self.proportional_growth
            && !self.slow_start
            && !self.censored
            && answered < self.request_count
            && new_limit > old
        {
            // A median of a few answers is a noisy measurement (module docs): the step grows
            // by the share of one that the window holds.
            let share = f64::from(answered) / f64::from(self.request_count);
            let step = ((new_limit - old) as f64 * share).ceil() as usize;
            new_limit = old.saturating_add(step.max(1));
        }
        if provisional {
            // Held, not cut: slow start's own rule (growth only on fast answers) stops it
            // where the queue starts.
            new_limit = new_limit.max(old);
        }
        if let Some(f) = self.app_limited_growth {
            // App-limited (module docs): growth never takes the limit past f × the window's
            // peak in flight — none at all when that is below the limit already (the limit was
            // not the constraint).
            let used = ((peak as f64) * f).ceil();
            // A window that used its share may always grow by one: at small limits the lower
            // criticalities' shares are what keeps the peak low (at 2, SHEDDABLE may use 1, and
            // twice 1 is 2: a limit cut to 2 by a capacity drop stayed there for good).
            let cap = if used >= old as f64 {
                (used as usize).max(old.saturating_add(1))
            } else {
                old
            };
            new_limit = new_limit.min(cap.max(old));
        }
        let raised = self.min_rtt_ns > self.measured_min_rtt_ns;
        if let Some(cap) = self.flat.as_mut().and_then(|f| f.growth_cap(raised)) {
            // flat.rs: a held level got slower; the queue it held was ours and stays that size.
            new_limit = new_limit.min(cap.max(old));
        }
        if self.overloaded
            && self
                .overload_fit_ns
                .map_or(true, |t| now_ns.saturating_sub(t) >= self.interval_ns)
        {
            // live.rs: a minRTT read across a small upstream's queue, which a load that never
            // goes light does not replace; from the next window on.
            let measured = self.measured_min_rtt_ns;
            if let Some(one) = self.live.as_mut().and_then(|l| l.queued_min_rtt(measured)) {
                self.overload_fit_ns = Some(now_ns);
                self.min_rtt_ns = one;
                self.measured_min_rtt_ns = one;
            }
        }
        match self.live.as_ref().and_then(LiveMinRtt::fitted) {
            // levels.rs: while minRTT is a fit from levels above one, cuts stop one below them.
            Some((one, lowest)) if one == self.min_rtt_ns && new_limit < old => {
                new_limit = new_limit.max(levels::cut_floor(lowest, old, peak_counted));
            }
            _ => {}
        }
        if new_limit < old && self.unqueued_floor {
            // floor.rs: not below the level the upstream was just seen to run unqueued (before
            // the throughput ceiling, which may cap below it).
            let unqueued = self.thrash.as_ref().and_then(ThroughputCeiling::unqueued);
            let floor = floor::floor(unqueued, old, peak_counted, answered, dropped, self.max);
            if floor > new_limit {
                new_limit = floor;
                self.floor_holds += 1;
            }
        }
        match knee {
            // knee.rs: past the knee by Little's law, whatever the median's tolerance says —
            // while some level's overload is sustained, and as the lowest level's share of the
            // limit: the levels above it keep their headroom on top.
            Some(Verdict::Cap(c)) if self.overloaded => {
                let c = (c as f64 / self.lowest_share).ceil() as usize;
                new_limit = new_limit.min(c.clamp(self.floor, self.max));
            }
            Some(_) | None => {}
        }
        let queued = sample > tolerated;
        if let Some(c) = self
            .thrash
            .as_mut()
            .and_then(|t| t.ceiling(old, peak_counted, queued))
        {
            // thrash.rs: a higher level delivered less than this one (or did, and the limit
            // probes above it gently).
            new_limit = new_limit.min(c.clamp(self.floor, self.max));
        }
        // flat.rs: a held level's latency, for a step at it.
        let held =
            new_limit == old && !self.slow_start && !self.censored && sample > self.tolerated_ns();
        if let Some(f) = self.flat.as_mut() {
            f.held_window(now_ns, sample, peak_counted, held);
        }
        self.limit = new_limit;
        if new_limit != old {
            self.note_change(now_ns, sample);
        }
        if old == self.floor && new_limit == self.floor {
            self.consecutive_at_floor += 1;
        } else {
            self.consecutive_at_floor = 0;
        }
        if self.dynamic_min_rtt && self.consecutive_at_floor >= STALE_MIN_RTT_WINDOWS {
            if let Some(live) = self.live.as_mut() {
                // At the floor every sample is a low-concurrency one: measure afresh.
                live.restart();
                self.consecutive_at_floor = 0;
            } else {
                // Envoy re-arms the minRTT timer at 0 ms: the window opens with the next sample.
                self.next_min_rtt_ns = now_ns;
            }
        }
    }

    /// Lowers the limit to `min_concurrency` (not below the floor), the largest at which every
    /// request counts as a low-concurrency sample of minRTT.
    pub(super) fn measure_at_low_concurrency(&mut self, now_ns: u64) {
        let low = self.min_concurrency.max(self.floor);
        if self.limit > low {
            self.limit = low;
            self.note_change(now_ns, 0.0);
        }
    }

    /// With `one_change_per_rtt`: the limit changed at `now_ns` on a window whose latency was
    /// `rtt_ns` (0 when the change was no window's verdict): later windows judge only requests
    /// started since, and one that closes thin before `rtt_ns` has passed grows by one at most.
    fn note_change(&mut self, now_ns: u64, rtt_ns: f64) {
        if self.one_change_per_rtt {
            self.change_epoch_ns = now_ns;
            self.change_rtt_ns = rtt_ns;
        }
    }

    pub(super) fn calculate_new_limit(&self) -> usize {
        // Both ≥ 1 ns; a 0 ns minRTT (coarse clock) still yields a finite gradient (0.5).
        let sample = self.sample_rtt_ns.max(1.0);
        let buffered_min = self.tolerated_ns();
        let mut gradient = (buffered_min / sample).clamp(GRADIENT_MIN, GRADIENT_MAX);
        if self.exact_cuts && self.censored {
            // Most of the window timed out: its latency is only known to exceed what was
            // measured, so the gradient above is an upper bound. Cut by the most allowed.
            gradient = GRADIENT_MIN;
        }
        let scaled = self.limit as f64 * gradient;
        let headroom = if self.exact_cuts && self.censored {
            // Halving, exactly: with √limit on top a limit of 5 at a 1-worker service never
            // came down (2.5 + 1.6 → 4, 1.5 + 1.2 → 2).
            0.0
        } else {
            scaled.sqrt()
        };
        let new = clamp_limit((scaled + headroom).floor(), self.floor, self.max) as usize;
        if self.exact_cuts && gradient < 1.0 && new >= self.limit {
            // Above tolerance, yet √limit kept the limit where it was (small limits: from 5
            // a gradient above 0.64 gives 5 or more): one less.
            return self.limit.saturating_sub(1).max(self.floor);
        }
        new
    }
}
