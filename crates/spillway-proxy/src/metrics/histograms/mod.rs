//! The `*_seconds` histograms as bucket counters, recorded in place.
//!
//! Why not the exporter's own histograms: `metrics-exporter-prometheus` keeps every observation
//! (value and a timestamp, 16 bytes) in a lock-free list of blocks and sorts them into buckets
//! only when it renders or runs its upkeep. On the proxy's data path, two observations a request
//! (queue time, latency), that is a clock read, an epoch pin, a push into memory no request had
//! touched, a block allocated every few dozen samples, and the drain later — and memory that
//! grows with the traffic between two scrapes. A Prometheus histogram is only cumulative
//! counts per bound, a sum and a count, so each observation here is a search over the 14
//! bounds, one relaxed add to its bucket and one to the sum, in a per-thread shard whose two
//! cache lines stay warm from one request to the next. The text rendered is the exporter's for
//! the same buckets (`name_bucket{…,le="…"}` cumulative, `le="+Inf"`, `_sum`, `_count`).
//!
//! Everything else (counters, gauges, histograms of other names) still goes to the exporter:
//! [`Recorder`] routes by name and `/metrics` appends this text to the exporter's. The refusal
//! counters the dashboard reads go to the exporter and to [`Counted`] as well.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};

use metrics::{Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, SharedString, Unit};
use metrics_exporter_prometheus::formatting::{
    sanitize_description, sanitize_label_key, sanitize_label_value, sanitize_metric_name,
};
use metrics_exporter_prometheus::PrometheusRecorder;

use super::counted::Counted;

/// Names ending so are kept here as bucket counters; any other histogram goes to the exporter.
pub const SUFFIX: &str = "_seconds";

/// Most bounds a histogram here can have.
const MAX_BOUNDS: usize = 15;

/// Shards per histogram: data-plane threads beyond this share one (threads are numbered as
/// they first record).
const SHARDS: usize = 4;

/// One thread's counts: a count per bound plus `+Inf`, and the sum's `f64` bits. Two cache
/// lines, aligned so that two shards never share one.
#[repr(align(128))]
#[derive(Default)]
struct Shard {
    counts: [AtomicU64; MAX_BOUNDS + 1],
    sum_bits: AtomicU64,
}

thread_local! {
    /// This thread's shard index, assigned on its first observation (`usize::MAX` before: a
    /// `const` thread-local has no lazy-initialisation state to check on each access).
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// This thread's shard index.
#[inline]
fn shard_index() -> usize {
    SHARD.with(|s| match s.get() {
        usize::MAX => {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let i = NEXT.fetch_add(1, Relaxed) % SHARDS;
            s.set(i);
            i
        }
        i => i,
    })
}

/// A histogram over fixed bounds (inclusive upper bounds, as Prometheus' `le`), sharded by
/// thread.
pub struct BucketHistogram {
    bounds: &'static [f64],
    shards: Box<[Shard]>,
}

impl std::fmt::Debug for BucketHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BucketHistogram")
            .field("bounds", &self.bounds)
            .field("count", &self.snapshot().count)
            .finish()
    }
}

/// A histogram's totals at one moment: cumulative counts per bound, then the count and sum.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// `(bound, observations ≤ bound)`, bounds ascending.
    pub cumulative: Vec<(f64, u64)>,
    /// Every observation (the `+Inf` bucket).
    pub count: u64,
    /// The sum of the observations.
    pub sum: f64,
}

impl BucketHistogram {
    /// A histogram over `bounds` (ascending, finite; at most `MAX_BOUNDS`, the rest ignored).
    pub fn new(bounds: &'static [f64]) -> Self {
        BucketHistogram {
            bounds: &bounds[..bounds.len().min(MAX_BOUNDS)],
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
        }
    }

    /// Counts one observation. NaN is not counted (it has no bucket, and would make the sum
    /// NaN for good).
    #[inline]
    pub fn observe(&self, value: f64) {
        if value.is_nan() {
            return;
        }
        // The first bound at or above the value; past the last, `+Inf`. A scan from the
        // smallest: most observations (queue times, sub-millisecond latencies) stop at the
        // first or second bound, where a binary search would take four steps.
        let idx = self
            .bounds
            .iter()
            .position(|&b| value <= b)
            .unwrap_or(self.bounds.len());
        // In range: the index is below SHARDS, and `idx` at most the bounds' count, below
        // MAX_BOUNDS + 1.
        let shard = &self.shards[shard_index()];
        shard.counts[idx].fetch_add(1, Relaxed);
        // One writer per shard in the usual case, so the exchange succeeds at once.
        let _ = shard.sum_bits.fetch_update(Relaxed, Relaxed, |bits| {
            Some((f64::from_bits(bits) + value).to_bits())
        });
    }

    /// The totals over every shard. Concurrent observations may be half seen (a count without
    /// its sum); the next snapshot has them.
    pub fn snapshot(&self) -> Snapshot {
        let mut per = [0u64; MAX_BOUNDS + 1];
        let mut sum = 0.0;
        for shard in self.shards.iter() {
            for (total, c) in per.iter_mut().zip(&shard.counts) {
                *total += c.load(Relaxed);
            }
            sum += f64::from_bits(shard.sum_bits.load(Relaxed));
        }
        let mut running = 0;
        let cumulative = self
            .bounds
            .iter()
            .zip(per)
            .map(|(&b, n)| {
                running += n;
                (b, running)
            })
            .collect();
        let count = per[..=self.bounds.len()].iter().sum();
        Snapshot {
            cumulative,
            count,
            sum,
        }
    }
}

impl HistogramFn for BucketHistogram {
    fn record(&self, value: f64) {
        self.observe(value);
    }
}

/// The histograms kept here, by key, with their descriptions.
#[derive(Debug)]
pub struct Histograms {
    bounds: &'static [f64],
    by_key: Mutex<BTreeMap<Key, Arc<BucketHistogram>>>,
    help: Mutex<BTreeMap<String, SharedString>>,
}

impl Histograms {
    /// No histograms yet; each will have `bounds`.
    pub fn new(bounds: &'static [f64]) -> Self {
        Histograms {
            bounds,
            by_key: Mutex::new(BTreeMap::new()),
            help: Mutex::new(BTreeMap::new()),
        }
    }

    /// The histogram of `key`, made on first use.
    pub fn get(&self, key: &Key) -> Arc<BucketHistogram> {
        let mut map = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(
            map.entry(key.clone())
                .or_insert_with(|| Arc::new(BucketHistogram::new(self.bounds))),
        )
    }

    /// Every histogram named `name` summed over its label sets (`None` while there is none):
    /// what the dashboard charts. All have the same bounds, so the sum is bound by bound.
    pub fn summed(&self, name: &str) -> Option<Snapshot> {
        let map = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        let mut total: Option<Snapshot> = None;
        for h in map.iter().filter(|(k, _)| k.name() == name).map(|(_, h)| h) {
            let s = h.snapshot();
            match &mut total {
                None => total = Some(s),
                Some(t) => {
                    for (a, b) in t.cumulative.iter_mut().zip(&s.cumulative) {
                        a.1 += b.1;
                    }
                    t.count += s.count;
                    t.sum += s.sum;
                }
            }
        }
        total
    }

    /// Keeps `description` for the `# HELP` line of `name` (the first one given stays, as in
    /// the exporter).
    pub fn describe(&self, name: &str, description: SharedString) {
        let mut help = self.help.lock().unwrap_or_else(PoisonError::into_inner);
        help.entry(name.to_owned()).or_insert(description);
    }

    /// Appends every histogram in the Prometheus text format (version 0.0.4), one family per
    /// name, label sets in key order.
    pub fn render_into(&self, out: &mut String) {
        let map = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        let snapshots: Vec<(Key, Snapshot)> =
            map.iter().map(|(k, h)| (k.clone(), h.snapshot())).collect();
        drop(map);
        let help = self.help.lock().unwrap_or_else(PoisonError::into_inner);
        let mut current: Option<&str> = None;
        for (key, snap) in &snapshots {
            let name = sanitize_metric_name(key.name());
            if current != Some(key.name()) {
                current = Some(key.name());
                if let Some(desc) = help.get(key.name()) {
                    let _ = writeln!(out, "# HELP {name} {}", sanitize_description(desc));
                }
                let _ = writeln!(out, "# TYPE {name} histogram");
            }
            let labels: Vec<String> = key
                .labels()
                .map(|l| {
                    format!(
                        "{}=\"{}\"",
                        sanitize_label_key(l.key()),
                        sanitize_label_value(l.value())
                    )
                })
                .collect();
            let with = |extra: Option<String>| -> String {
                let all: Vec<&str> = labels
                    .iter()
                    .map(String::as_str)
                    .chain(extra.as_deref())
                    .collect();
                if all.is_empty() {
                    String::new()
                } else {
                    format!("{{{}}}", all.join(","))
                }
            };
            for (bound, n) in &snap.cumulative {
                let _ = writeln!(
                    out,
                    "{name}_bucket{} {n}",
                    with(Some(format!("le=\"{bound}\"")))
                );
            }
            let _ = writeln!(
                out,
                "{name}_bucket{} {}",
                with(Some("le=\"+Inf\"".to_owned())),
                snap.count
            );
            let _ = writeln!(out, "{name}_sum{} {}", with(None), snap.sum);
            let _ = writeln!(out, "{name}_count{} {}", with(None), snap.count);
        }
    }
}

/// The process's recorder: `*_seconds` histograms here, everything else in the exporter, and
/// the refusal counters in the exporter and in [`Counted`].
#[derive(Debug)]
pub struct Recorder {
    /// Counters, gauges and the other histograms.
    pub prometheus: PrometheusRecorder,
    /// The `*_seconds` histograms.
    pub histograms: Arc<Histograms>,
    /// The dashboard's refusal counters, beside the exporter's.
    pub counted: Arc<Counted>,
}

impl metrics::Recorder for Recorder {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.prometheus.describe_counter(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.prometheus.describe_gauge(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        if key.as_str().ends_with(SUFFIX) {
            self.histograms.describe(key.as_str(), description);
        } else {
            self.prometheus.describe_histogram(key, unit, description);
        }
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        let exporter = self.prometheus.register_counter(key, metadata);
        if Counted::wants(key.name()) {
            self.counted.tee(key, exporter)
        } else {
            exporter
        }
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        self.prometheus.register_gauge(key, metadata)
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        if key.name().ends_with(SUFFIX) {
            Histogram::from_arc(self.histograms.get(key))
        } else {
            self.prometheus.register_histogram(key, metadata)
        }
    }
}

#[cfg(test)]
mod tests;
