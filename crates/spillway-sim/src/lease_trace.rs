//! Where a lease run's quota goes, by demand band (`spillway sim --lease FILE --trace`).
//!
//! Why: the fleet's accuracy is one number, and a shortfall in it can come from instances that
//! ask too little and refuse what their demand would have had, from shares given to instances
//! that do not use them while the level is computed too low, or from the level itself being
//! wrong. The trace splits the fleet into bands of demand rank (the busiest 10, the next 90,
//! ...) and, over each phase between events, sums per band what was offered, admitted,
//! refused for quota and left unused, next to what the instances reported and asked, and the
//! store's water level against the level the true demands would give.

use spillway_core::quota::fair::FairLevel;

/// Per band and phase, rates in cost units/s (averaged over the phase's steps).
#[derive(Debug, Clone, Default)]
pub struct BandSums {
    /// Instances in the band.
    pub instances: usize,
    /// Offered.
    pub offered: f64,
    /// Admitted: `min(offered, rate)` per instance.
    pub admitted: f64,
    /// Refused for quota: `offered - admitted`.
    pub refused: f64,
    /// Share left unused: `rate - admitted`.
    pub unused: f64,
    /// Demand the store holds for the band's instances.
    pub reported: f64,
    /// What the band's instances last asked for.
    pub asked: f64,
    /// Instance-steps whose rate was under their offered rate, as a fraction.
    pub short: f64,
    steps: f64,
}

/// One phase of a traced run.
#[derive(Debug, Clone)]
pub struct Phase {
    /// Start, seconds.
    pub from_s: f64,
    /// End, seconds.
    pub to_s: f64,
    /// Bands from the busiest down.
    pub bands: Vec<BandSums>,
    /// The store's level as last computed, summed over the phase's steps (`text` averages
    /// it); the whole quota while demand is within it.
    pub store_level: f64,
    /// The level the true demands give (the whole quota while demand is within it).
    pub true_level: f64,
    levels: f64,
}

/// A traced run: its phases.
#[derive(Debug, Clone)]
pub struct Trace {
    /// Band edges by demand rank: band `b` is ranks `edges[b] .. edges[b + 1]`.
    pub edges: Vec<usize>,
    /// The phases, in time order.
    pub phases: Vec<Phase>,
    pub(crate) asks: Vec<f64>,
    cur: Option<usize>,
}

impl Trace {
    /// A trace of `n` instances over `phases` (`(from_s, to_s)`, not overlapping).
    pub fn new(n: usize, phases: &[(f64, f64)]) -> Trace {
        let mut edges = vec![0];
        let mut e = 10;
        while e < n {
            edges.push(e);
            e *= 10;
        }
        edges.push(n);
        let bands = |edges: &[usize]| {
            (0..edges.len() - 1)
                .map(|b| BandSums {
                    instances: edges[b + 1] - edges[b],
                    ..BandSums::default()
                })
                .collect::<Vec<_>>()
        };
        Trace {
            phases: phases
                .iter()
                .map(|&(a, b)| Phase {
                    from_s: a,
                    to_s: b,
                    bands: bands(&edges),
                    store_level: 0.0,
                    true_level: 0.0,
                    levels: 0.0,
                })
                .collect(),
            edges,
            asks: vec![0.0; n],
            cur: None,
        }
    }

    /// Starts step `t`; `demands` gives each rank's true demand (for the true level).
    pub(crate) fn begin(&mut self, t: f64, global: f64, store_level: f64, demands: &[f64]) {
        self.cur = self.phases.iter().position(|p| t >= p.from_s && t < p.to_s);
        if let Some(p) = self.cur {
            let ph = &mut self.phases[p];
            if ph.levels == 0.0 {
                let mut d = demands.to_vec();
                ph.true_level = FairLevel::new(global, d.len(), &mut d)
                    .share(f64::MAX)
                    .min(global);
            }
            ph.store_level += store_level;
            ph.levels += 1.0;
            for b in &mut ph.bands {
                b.steps += 1.0;
            }
        }
    }

    fn band(&self, rank: usize) -> usize {
        self.edges[1..].iter().position(|&e| rank < e).unwrap_or(0)
    }

    /// One instance in the current step: its demand rank, offered rate, enforced rate and the
    /// demand the store holds for it.
    pub(crate) fn instance(&mut self, i: usize, rank: usize, d: f64, rate: f64, reported: f64) {
        let Some(p) = self.cur else { return };
        let b = self.band(rank);
        let ask = self.asks[i];
        let s = &mut self.phases[p].bands[b];
        let a = d.min(rate);
        s.offered += d;
        s.admitted += a;
        s.refused += d - a;
        s.unused += rate - a;
        s.reported += reported;
        s.asked += ask;
        s.short += f64::from(u8::from(rate < d));
    }

    /// The trace as text, one table per phase.
    pub fn text(&self) -> String {
        let mut s = String::new();
        for p in &self.phases {
            let steps = p.levels.max(1.0);
            s.push_str(&format!(
                "phase {:.0}-{:.0} s: store level {:.4}, true level {:.4}\n\
                 | ranks | offered | admitted | refused | unused share | reported | asked | short |\n\
                 |---|---:|---:|---:|---:|---:|---:|---:|\n",
                p.from_s,
                p.to_s,
                p.store_level / steps,
                p.true_level,
            ));
            let mut tot = BandSums::default();
            for (b, x) in p.bands.iter().enumerate() {
                let k = x.steps.max(1.0);
                s.push_str(&format!(
                    "| {}-{} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} |\n",
                    self.edges[b],
                    self.edges[b + 1],
                    x.offered / k,
                    x.admitted / k,
                    x.refused / k,
                    x.unused / k,
                    x.reported / k,
                    x.asked / k,
                    x.short / k / x.instances.max(1) as f64,
                ));
                tot.offered += x.offered / k;
                tot.admitted += x.admitted / k;
                tot.refused += x.refused / k;
                tot.unused += x.unused / k;
                tot.reported += x.reported / k;
                tot.asked += x.asked / k;
            }
            s.push_str(&format!(
                "| all | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | |\n\n",
                tot.offered, tot.admitted, tot.refused, tot.unused, tot.reported, tot.asked
            ));
        }
        s
    }
}
