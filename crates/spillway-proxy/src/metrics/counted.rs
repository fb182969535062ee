//! The refusal counters the dashboard charts, readable in place.
//!
//! Why: the dashboard shows refusals by customer, operation, criticality and reason, and those
//! are `metrics` counters (`spillway_requests_shed_total`, `spillway_requests_throttled_total`)
//! whose only store was `metrics-exporter-prometheus`, which offers no way to read a counter
//! back but rendering the whole `/metrics` text. So for these two families the process's
//! recorder ([`super::histograms::Recorder`]) hands out a counter that adds to the exporter's
//! series and to an atomic of its own, kept here by key: `/metrics` is unchanged, and the
//! dashboard reads the atomics instead of parsing the text back. The price is one more relaxed
//! add per refusal; registration (a map insert) is rare, since callers cache their handles per
//! thread (`spillway_tower::metrics`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};

use metrics::{Counter, CounterFn, Key};
use spillway_tower::wire::metric as m;

/// The counter families kept here as well as in the exporter.
pub const FAMILIES: [&str; 2] = [m::SHED, m::THROTTLED];

/// The counters of [`FAMILIES`], by key.
#[derive(Debug, Default)]
pub struct Counted {
    by_key: Mutex<BTreeMap<Key, Arc<AtomicU64>>>,
}

impl Counted {
    /// None yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether counters named `name` are kept here.
    pub fn wants(name: &str) -> bool {
        FAMILIES.contains(&name)
    }

    /// A counter for `key` that adds to `exporter` and to this key's count here.
    pub fn tee(&self, key: &Key, exporter: Counter) -> Counter {
        let mut map = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        let mine = Arc::clone(map.entry(key.clone()).or_default());
        Counter::from_arc(Arc::new(Tee { exporter, mine }))
    }

    /// Every counter kept here and its value now, in key order.
    pub fn values(&self) -> Vec<(Key, u64)> {
        let map = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        map.iter()
            .map(|(k, v)| (k.clone(), v.load(Relaxed)))
            .collect()
    }
}

/// One counter, counted twice: in the exporter's series and here.
struct Tee {
    exporter: Counter,
    mine: Arc<AtomicU64>,
}

impl CounterFn for Tee {
    fn increment(&self, value: u64) {
        self.exporter.increment(value);
        self.mine.fetch_add(value, Relaxed);
    }

    fn absolute(&self, value: u64) {
        self.exporter.absolute(value);
        self.mine.fetch_max(value, Relaxed);
    }
}
