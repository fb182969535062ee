//! Bounded label values: at most K customers and K operations get metric series of their own;
//! every other value is counted under [`OTHER`].
//!
//! Why: a customer taken from a trusted header (or an API-key map of thousands) is a label on
//! about 35 series (admitted, refused by reason, queue time and latency histograms, per
//! criticality). 40,000 customers made `/metrics` 155 MB and the process 0.5 GB: every series
//! is stored forever by the recorder and rendered on every scrape.
//!
//! The rule — *first come, kept for good*: the first K distinct values seen (configured
//! customers, the default customer, route names and the unmatched operation are offered first,
//! at start and on every reload) each get their own series; a value beyond K is counted under
//! `other`. A value never loses its series once it has one, so every series stays monotonic
//! and nothing is ever counted twice or dropped: Prometheus counters must only grow (a series
//! that disappears and comes back at a lower value reads as a counter reset, and one whose
//! counts moved elsewhere would show a spike in `other` and a hole in its own history).
//! Re-ranking by traffic would need exactly that. The price: a customer that first appears
//! after K others is in `other` until the proxy restarts — raise `admin.max_customer_labels`
//! if that matters (each value costs about 35 series, ~4 KB of scrape text). Lowering the cap
//! on reload keeps the values that have series and admits no new ones until below it.
//!
//! A customer literally named `other` shares the aggregate's series.
//!
//! Cost per request: one read lock and one hash lookup per label (two per request); a value's
//! first sighting takes the write lock once.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use metrics::SharedString;
use spillway_core::Criticality;
use spillway_tower::metrics::RequestLabels;

/// The label value every customer or operation without a series of its own is counted as.
pub const OTHER: &str = "other";
/// Default cap on distinct customers and on distinct operations.
pub const DEFAULT_MAX_VALUES: usize = 100;
/// Largest accepted cap.
pub const MAX_MAX_VALUES: usize = 10_000;

/// The values of one label that have series of their own.
#[derive(Debug)]
pub struct LabelCap {
    max: AtomicUsize,
    kept: RwLock<HashSet<Arc<str>>>,
    other: Arc<str>,
    /// Label lookups answered with `other` (how much traffic the cap folds).
    folded: AtomicU64,
}

impl LabelCap {
    /// At most `max` values get series of their own.
    pub fn new(max: usize) -> Self {
        LabelCap {
            max: AtomicUsize::new(max),
            kept: RwLock::new(HashSet::new()),
            other: Arc::from(OTHER),
            folded: AtomicU64::new(0),
        }
    }

    /// Changes the cap (values that have series keep them).
    pub fn set_max(&self, max: usize) {
        self.max.store(max, Ordering::Relaxed);
    }

    /// The label to record `value` under: `value` itself if it has (or can get) its own
    /// series, else [`OTHER`].
    pub fn label(&self, value: &Arc<str>) -> Arc<str> {
        let max = self.max.load(Ordering::Relaxed);
        {
            let kept = self.kept.read().unwrap_or_else(|p| p.into_inner());
            if kept.contains(&**value) {
                return Arc::clone(value);
            }
            if kept.len() >= max {
                self.folded.fetch_add(1, Ordering::Relaxed);
                return Arc::clone(&self.other);
            }
        }
        let mut kept = self.kept.write().unwrap_or_else(|p| p.into_inner());
        if kept.contains(&**value) {
            return Arc::clone(value);
        }
        if kept.len() >= max {
            self.folded.fetch_add(1, Ordering::Relaxed);
            return Arc::clone(&self.other);
        }
        // A copy of the string, not the caller's `Arc`: a request's customer `Arc` may share
        // its allocation with nothing else we want to keep alive.
        kept.insert(Arc::from(&**value));
        Arc::clone(value)
    }

    /// Offers `values` in order (configured names, before any traffic).
    pub fn seed<'a>(&self, values: impl IntoIterator<Item = &'a str>) {
        for v in values {
            let _ = self.label(&Arc::from(v));
        }
    }

    /// Values with series of their own.
    pub fn len(&self) -> usize {
        self.kept.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether no value has a series of its own yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lookups answered with `other` so far.
    pub fn folded(&self) -> u64 {
        self.folded.load(Ordering::Relaxed)
    }
}

/// The caps on the two request labels that callers and configuration can multiply.
#[derive(Debug)]
pub struct MetricLabels {
    /// Customers.
    pub customers: LabelCap,
    /// Operations (route names, the unmatched operation).
    pub operations: LabelCap,
}

impl MetricLabels {
    /// Caps of `max_customers` and `max_operations` values.
    pub fn new(max_customers: usize, max_operations: usize) -> Self {
        MetricLabels {
            customers: LabelCap::new(max_customers),
            operations: LabelCap::new(max_operations),
        }
    }

    /// The labels to record a request of `customer`, `operation` and `criticality` under.
    pub fn request(
        &self,
        customer: &Arc<str>,
        operation: &Arc<str>,
        criticality: Criticality,
    ) -> RequestLabels {
        RequestLabels {
            customer: self.customers.label(customer),
            operation: SharedString::from(self.operations.label(operation)),
            criticality,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    #[test]
    fn the_first_k_values_keep_their_series_and_the_rest_are_other() {
        let cap = LabelCap::new(3);
        assert_eq!(&*cap.label(&a("a")), "a");
        assert_eq!(&*cap.label(&a("b")), "b");
        assert_eq!(&*cap.label(&a("c")), "c");
        assert_eq!(&*cap.label(&a("d")), OTHER);
        assert_eq!(&*cap.label(&a("a")), "a", "a kept value stays");
        assert_eq!(&*cap.label(&a("d")), OTHER, "a folded value stays folded");
        assert_eq!(cap.len(), 3);
        assert_eq!(cap.folded(), 2);
    }

    #[test]
    fn raising_the_cap_admits_new_values_and_lowering_it_evicts_none() {
        let cap = LabelCap::new(1);
        cap.seed(["a", "b"]);
        assert_eq!(&*cap.label(&a("b")), OTHER);
        cap.set_max(2);
        assert_eq!(&*cap.label(&a("b")), "b");
        cap.set_max(0);
        assert_eq!(&*cap.label(&a("a")), "a");
        assert_eq!(&*cap.label(&a("b")), "b");
        assert_eq!(&*cap.label(&a("c")), OTHER);
    }

    #[test]
    fn a_hundred_thousand_values_keep_k() {
        let cap = LabelCap::new(DEFAULT_MAX_VALUES);
        let mut other = 0;
        for i in 0..100_000 {
            if &*cap.label(&a(&format!("customer-{i}"))) == OTHER {
                other += 1;
            }
        }
        assert_eq!(cap.len(), DEFAULT_MAX_VALUES);
        assert_eq!(other, 100_000 - DEFAULT_MAX_VALUES);
    }

    #[test]
    fn request_labels_cap_both() {
        let l = MetricLabels::new(1, 1);
        let r = l.request(&a("acme"), &a("search"), Criticality::Critical);
        assert_eq!((&*r.customer, &*r.operation), ("acme", "search"));
        let r = l.request(&a("umbrella"), &a("batch"), Criticality::Sheddable);
        assert_eq!((&*r.customer, &*r.operation), (OTHER, OTHER));
        assert_eq!(r.criticality, Criticality::Sheddable);
    }
}
