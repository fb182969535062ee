//! The simulated backend and the clients' arrivals of a cell: workers in front of an unbounded
//! FIFO, service times drawn per request, and the run's figures at its end.
//!
//! Why apart from the proxy's side (`cell`): whatever sits in front of the backend — the
//! proxy's zero-config admission, the tuned HAProxy-like queue (`tuned`), or nothing — the
//! backend and the arrivals must be the very same, so that runs of a cell differ only by what
//! admits the work.

use super::*;

/// A model's optional duration: 0 stays 0 (`ms_to_nanos` makes it 1 ns, which would turn the
/// timer, wake and overhead models on and change every cell of the sweep).
pub(super) fn nanos_or_none(ms: f64) -> u64 {
    if ms > 0.0 {
        ms_to_nanos(ms)
    } else {
        0
    }
}

impl Sim<'_> {
    /// The next open-loop arrival after `t`: Poisson at the offered rate, or at the rate
    /// scaled up while a burst is on and none while it is off (memoryless, so a draw that
    /// lands in an off phase restarts at the next on phase).
    pub(super) fn next_arrival(&mut self, mut t: u64) -> Option<u64> {
        let on_off = self.spec.arrivals == ArrivalKind::OnOff && self.on_len < self.period;
        let peak = if on_off {
            self.rate / self.model.burst_on_share
        } else {
            self.rate
        };
        let mean_gap = 1e9 / peak;
        loop {
            if t >= self.end {
                return None;
            }
            if !on_off {
                let next = t + exp(&mut self.arrivals_rng, mean_gap) as u64;
                return (next < self.end).then_some(next);
            }
            let phase = t % self.period;
            if phase >= self.on_len {
                t += self.period - phase;
                continue;
            }
            let on_end = t - phase + self.on_len;
            let next = t + exp(&mut self.arrivals_rng, mean_gap) as u64;
            if next < on_end {
                return (next < self.end).then_some(next);
            }
            t = on_end;
        }
    }

    /// A new request's time outside the backend and the proxy's queue (`overhead`), at most
    /// its whole timeout.
    pub(super) fn outside(&mut self) -> u64 {
        if self.overhead == 0 {
            return 0;
        }
        (exp(&mut self.overhead_rng, self.overhead as f64) as u64).min(self.timeout)
    }

    pub(super) fn draw_service(&mut self) -> u64 {
        let mean = self.spec.mean_ms;
        let rng = &mut self.service_rng;
        match self.spec.dist {
            Dist::Const => service_nanos(rng, &ServiceDist::Const { mean_ms: mean }, 1.0),
            Dist::Exp => service_nanos(rng, &ServiceDist::Exp { mean_ms: mean }, 1.0),
            Dist::Lognormal => service_nanos(
                rng,
                &ServiceDist::Lognormal {
                    mean_ms: mean,
                    sigma: self.model.lognormal_sigma,
                },
                1.0,
            ),
            Dist::Bimodal => {
                // Two constant modes with the cell's mean: fast · (1 − s + s · f) = mean.
                let (s, f) = (
                    self.model.bimodal_slow_share,
                    self.model.bimodal_slow_factor,
                );
                let fast = mean / (1.0 - s + s * f);
                ms_to_nanos(if rng.f64() < s { fast * f } else { fast })
            }
        }
    }

    /// Backend workers take FIFO work, including that of callers who left.
    pub(super) fn start_work(&mut self) {
        while self.busy < self.spec.workers {
            let Some((id, gen, base, enqueued)) = self.fifo.pop_front() else {
                return;
            };
            self.busy += 1;
            self.figures.backend_started += 1;
            if self.now < self.end && self.live(id, gen) {
                self.reqs[id as usize].started_in_window = true;
            }
            if self.now > enqueued {
                self.figures.backend_waited += 1;
                self.wait_sum += self.now - enqueued;
            }
            let base = if self.service_at_start {
                self.draw_service()
            } else {
                base
            };
            let factor = self.slowdown(self.fifo.len() as u64 + u64::from(self.busy));
            let service = self.on_timer(((base as f64 * factor) as u64).max(1));
            self.push(self.now + service, DONE, id, gen);
        }
    }

    /// How long a worker starting now takes for a service of `target`: exactly that, or, on a
    /// timer with a tick or a host that wakes it late, as `spillway backend`'s sleeping worker
    /// does — it sleeps `target` less what it owes, tokio rounds the sleep's end up to the next
    /// tick, the scheduler wakes it after a delay, and the overshoot is owed to its next
    /// request, up to `MAX_OWED` (its `overshoot_owed`). The tick alone keeps the mean (what
    /// is owed stays under a tick) but makes service times whole ticks, or none while a debt
    /// is repaid; a late wake beyond what can be repaid costs capacity.
    fn on_timer(&mut self, target: u64) -> u64 {
        /// `spillway backend`'s `MAX_OWED`.
        const MAX_OWED: u64 = 3_000_000;
        if self.tick == 0 && self.wake == 0 {
            return target;
        }
        let owed = self.idle_owed.pop_front().unwrap_or(0);
        let asked = target.saturating_sub(owed);
        let mut end = self.now + asked;
        if self.tick > 0 && asked > 0 {
            // The first tick after it: a worker is never woken exactly on a tick, so a sleep
            // begun right after one ends on the one after (a zero sleep ends at once).
            end = (end / self.tick + 1) * self.tick;
        }
        if self.wake > 0 {
            end += exp(&mut self.wake_rng, self.wake as f64) as u64;
        }
        let took = end - self.now;
        self.busy_owed.push(Reverse((
            end,
            (owed + took).saturating_sub(target).min(MAX_OWED),
        )));
        took
    }

    /// How much slower than its base a request starting now runs, with `held` requests in the
    /// backend counting it: the slowdown backend's load factor, the capacity drop's window.
    pub(super) fn slowdown(&self, held: u64) -> f64 {
        let mut factor = 1.0;
        if self.spec.backend == BackendKind::Slowdown {
            let held = held as f64 / f64::from(self.spec.workers);
            factor += self.model.slowdown_alpha * (held - self.model.slowdown_threshold_x).max(0.0);
        }
        let (from, to) = self.drop_window;
        if self.now >= from && self.now < to {
            factor /= self.model.drop_factor;
        }
        factor
    }

    pub(super) fn backend_done(&mut self, id: u32, gen: u32) {
        self.busy -= 1;
        // The worker ending now (the earliest end: every end is a DONE at its time) is idle
        // again, behind those that were already waiting for work.
        if let Some(Reverse((_, owed))) = self.busy_owed.pop() {
            self.idle_owed.push_back(owed);
        }
        self.start_work();
        if let Some(mut p) = self.held_abandoned.remove(&(id, gen)) {
            // Its client left; the slot it held is free now (its outcome set then).
            p.release_at(self.clock.at(self.now));
        } else if self.live(id, gen) && self.reqs[id as usize].phase == Phase::Backend {
            self.settle_throttle(id, true);
            self.release(id, Outcome::Success);
            self.end_request(id, End::Ok);
        }
    }

    pub(super) fn finish(mut self) -> RunFigures {
        let duration = self.end as f64 / 1e9;
        let reference = self.reference(duration);
        let mut f = std::mem::replace(&mut self.figures, RunFigures::empty());
        f.duration_s = duration;
        f.goodput_rps = f.ok as f64 / duration.max(1e-12);
        f.window_goodput_rps = f.window_ok as f64 / duration.max(1e-12);
        f.reference_rps = reference;
        if f.backend_started > 0 {
            f.backend_wait_mean_ms = self.wait_sum as f64 / f.backend_started as f64 / 1e6;
        }
        if !self.refusal_ns.is_empty() {
            let mid = self.refusal_ns.len() / 2;
            let (_, m, _) = self.refusal_ns.select_nth_unstable(mid);
            f.refusal_median_ms = Some(*m as f64 / 1e6);
        }
        f
    }

    /// ∫ min(offered rate, capacity) dt over the window, per second.
    pub(super) fn reference(&self, duration: f64) -> f64 {
        let cap = self.spec.capacity();
        if !self.spec.arrivals.is_open() {
            return cap;
        }
        let steps = 10_000u64;
        let dt = self.end / steps;
        if dt == 0 {
            return self.rate.min(cap);
        }
        let (from, to) = self.drop_window;
        let mut sum = 0.0;
        for i in 0..steps {
            let t = i * dt + dt / 2;
            let rate = if self.spec.arrivals == ArrivalKind::OnOff && self.on_len < self.period {
                if t % self.period < self.on_len {
                    self.rate / self.model.burst_on_share
                } else {
                    0.0
                }
            } else {
                self.rate
            };
            let c = if t >= from && t < to {
                cap * self.model.drop_factor
            } else {
                cap
            };
            sum += rate.min(c) * dt as f64 / 1e9;
        }
        sum / duration.max(1e-12)
    }
}
