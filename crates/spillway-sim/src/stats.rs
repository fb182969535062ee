//! What each layer saw, per second of simulated time, and the run's totals.
//!
//! Why beside the report's own counts: the run report ([`crate::report`]) counts *logical*
//! requests by the second they were offered — goodput, rejections, timeouts — as `spillway load`
//! measures them. The simulator can also see inside the fleet: how many attempts reached each
//! layer (the retry amplification the SRE book warns of, up to 27× three layers down), how much
//! work was done for callers that had already left (the wasted work behind a metastable
//! collapse), and why the admission controllers refused. Those series are counted by the second
//! in which they happened and travel in the report's `meta` under `layers`.

use serde::Serialize;
use spillway_core::controller::RefusalReason;

/// Per-second series of one layer (index = second of simulated time).
#[derive(Debug, Clone, Default)]
pub(crate) struct LayerStats {
    pub arrivals: Vec<u64>,
    pub served: Vec<u64>,
    pub wasted: Vec<u64>,
    pub refused: Vec<u64>,
    pub refused_by_reason: [u64; RefusalReason::COUNT],
    pub lost: u64,
    pub wait_sum_ns: u128,
    pub wait_n: u64,
}

#[inline]
pub(crate) fn bump(v: &mut Vec<u64>, sec: usize) {
    if v.len() <= sec {
        v.resize(sec + 1, 0);
    }
    v[sec] += 1;
}

fn total(v: &[u64]) -> u64 {
    v.iter().sum()
}

/// One layer's totals and series, as written to JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayerSummary {
    /// Layer name.
    pub name: String,
    /// Attempts that reached this layer's tasks.
    pub arrivals: u64,
    /// `arrivals / offered` top-level requests: the load multiplication down to this layer.
    pub amplification: f64,
    /// Requests whose local work completed.
    pub served: u64,
    /// Of those, completed after their caller had given up (wasted work).
    pub wasted: u64,
    /// Refusals by the admission controllers, by reason (only reasons that occurred).
    pub refused: std::collections::BTreeMap<String, u64>,
    /// Attempts that failed because their task was lost.
    pub lost: u64,
    /// Mean time from arrival at a task to the start of local work (admission queue plus any
    /// wait for a worker), ms, over requests that started work.
    pub mean_wait_ms: Option<f64>,
    /// Per-second arrivals (by the second they happened).
    pub arrivals_per_s: Vec<u64>,
    /// Per-second completed local work.
    pub served_per_s: Vec<u64>,
    /// Per-second wasted work.
    pub wasted_per_s: Vec<u64>,
    /// Per-second refusals.
    pub refused_per_s: Vec<u64>,
}

impl LayerStats {
    /// Adds another shard's counts of the same layer.
    pub(crate) fn add(&mut self, o: &LayerStats) {
        let add = |a: &mut Vec<u64>, b: &[u64]| {
            if a.len() < b.len() {
                a.resize(b.len(), 0);
            }
            a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
        };
        add(&mut self.arrivals, &o.arrivals);
        add(&mut self.served, &o.served);
        add(&mut self.wasted, &o.wasted);
        add(&mut self.refused, &o.refused);
        for (x, y) in self.refused_by_reason.iter_mut().zip(&o.refused_by_reason) {
            *x += y;
        }
        self.lost += o.lost;
        self.wait_sum_ns += o.wait_sum_ns;
        self.wait_n += o.wait_n;
    }

    pub(crate) fn summary(&self, name: &str, offered: u64, seconds: usize) -> LayerSummary {
        let pad = |v: &[u64]| {
            let mut v = v.to_vec();
            v.resize(v.len().max(seconds), 0);
            v
        };
        let arrivals = total(&self.arrivals);
        LayerSummary {
            name: name.to_owned(),
            arrivals,
            amplification: if offered > 0 {
                arrivals as f64 / offered as f64
            } else {
                0.0
            },
            served: total(&self.served),
            wasted: total(&self.wasted),
            refused: RefusalReason::ALL
                .iter()
                .filter(|r| self.refused_by_reason[r.index()] > 0)
                .map(|r| (r.as_str().to_owned(), self.refused_by_reason[r.index()]))
                .collect(),
            lost: self.lost,
            mean_wait_ms: (self.wait_n > 0)
                .then(|| self.wait_sum_ns as f64 / self.wait_n as f64 / 1e6),
            arrivals_per_s: pad(&self.arrivals),
            served_per_s: pad(&self.served),
            wasted_per_s: pad(&self.wasted),
            refused_per_s: pad(&self.refused),
        }
    }
}
