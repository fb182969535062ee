//! Bounded label values: at most K customers and K operations get metric series of their own;
//! every other value is counted under [`OTHER`]. One implementation for both users: the server
//! layer ([`crate::server::SpillwayLayer::max_customer_labels`]) and `spillway-proxy`
//! (`admin.max_customer_labels`, `admin.max_operation_labels`), with the same default.
//!
//! Why: a customer taken from a trusted header (or an API-key map of thousands) is a label on
//! about 35 series in the proxy (admitted, refused by reason, queue time and latency
//! histograms, per criticality). 40,000 customers made the proxy's `/metrics` 155 MB and the
//! process 0.5 GB: every series is stored forever by the recorder and rendered on every scrape.
//!
//! The rule — *first come, kept for good*: the first K distinct values seen (configured
//! customers, the default customer, route names and the unmatched operation are offered first,
//! at start and on every reload) each get their own series; a value beyond K is counted under
//! `other`. A value never loses its series once it has one, so every series stays monotonic
//! and nothing is ever counted twice or dropped: Prometheus counters must only grow (a series
//! that disappears and comes back at a lower value reads as a counter reset, and one whose
//! counts moved elsewhere would show a spike in `other` and a hole in its own history).
//! Re-ranking by traffic would need exactly that. The price: a customer that first appears
//! after K others is in `other` until the process restarts — raise the cap if that matters
//! (each value costs about 35 series in the proxy, ~4 KB of scrape text). Lowering the cap
//! (the proxy's reload) keeps the values that have series and admits no new ones until below
//! it.
//!
//! A customer literally named `other` shares the aggregate's series.
//!
//! Cost per request: one hash lookup per label in the thread's own copy of the kept values and
//! one atomic load (two per request); a value that can still get a series takes the write lock
//! once.

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use metrics::SharedString;
use spillway_core::Criticality;

use super::RequestLabels;

/// The label value every customer or operation without a series of its own is counted as.
pub const OTHER: &str = "other";
/// Default cap on distinct customers and on distinct operations.
pub const DEFAULT_MAX_VALUES: usize = 100;
/// Largest accepted cap.
pub const MAX_MAX_VALUES: usize = 10_000;

/// Caps a thread keeps copies of before it starts afresh (a process has two; tests make more).
const MAX_LOCAL_CAPS: usize = 16;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The values of one label that have series of their own.
///
/// Why a per-thread copy: every request asks, on every data-plane thread, and a shared lock's
/// reader count is a cache line all threads write (the reason `state::Current` exists). The
/// set only grows, so a thread's copy is brought up to date by appending what is new, when the
/// version (bumped on each new value and on a cap change: at most K times plus reloads) moved.
#[derive(Debug)]
pub struct LabelCap {
    id: u64,
    max: AtomicUsize,
    /// Bumped after every change to `kept` or `max`.
    version: AtomicU64,
    /// The values with series, as a set (membership) and in order of arrival (so a thread's
    /// copy takes only the new ones).
    kept: RwLock<Kept>,
}

/// The kept values as a set and in order of arrival.
type Kept = (HashSet<Arc<str>>, Vec<Arc<str>>);

/// One thread's copy of one [`LabelCap`].
struct Local {
    id: u64,
    version: u64,
    kept: HashSet<Arc<str>>,
    synced: usize,
    full: bool,
    /// This thread's own `other` (its reference count is touched by this thread only).
    other: Arc<str>,
    /// The kept value asked last: consecutive requests mostly share a customer and an
    /// operation, and a string comparison is much cheaper than hashing (the reasoning of
    /// [`super::handles`]' own last-used entry).
    last: Option<Arc<str>>,
}

thread_local! {
    static LOCAL: RefCell<Vec<Local>> = const { RefCell::new(Vec::new()) };
}

impl LabelCap {
    /// At most `max` values get series of their own.
    pub fn new(max: usize) -> Self {
        LabelCap {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            max: AtomicUsize::new(max),
            version: AtomicU64::new(0),
            kept: RwLock::new((HashSet::new(), Vec::new())),
        }
    }

    /// Changes the cap (values that have series keep them).
    pub fn set_max(&self, max: usize) {
        self.max.store(max, Ordering::Relaxed);
        self.version.fetch_add(1, Ordering::Release);
    }

    /// The largest number of values with series of their own.
    pub fn max(&self) -> usize {
        self.max.load(Ordering::Relaxed)
    }

    /// The label to record `value` under: `value` itself if it has (or can get) its own
    /// series, else [`OTHER`].
    pub fn label(&self, value: &Arc<str>) -> Arc<str> {
        match self.folded(value) {
            None => Arc::clone(value),
            Some(other) => other,
        }
    }

    /// [`LabelCap::label`] for a label value already in the `metrics` facade's form.
    pub fn label_shared(&self, value: &SharedString) -> SharedString {
        match self.folded(value) {
            None => value.clone(),
            Some(other) => SharedString::from(other),
        }
    }

    /// `None` when `value` has (or now gets) its own series, else the `other` to count it as.
    fn folded(&self, value: &str) -> Option<Arc<str>> {
        let version = self.version.load(Ordering::Acquire);
        let local = LOCAL.try_with(|l| {
            let mut l = l.try_borrow_mut().ok()?;
            let i = match l.iter().position(|c| c.id == self.id) {
                Some(i) => i,
                None => {
                    if l.len() >= MAX_LOCAL_CAPS {
                        l.clear();
                    }
                    l.push(Local {
                        id: self.id,
                        version: u64::MAX,
                        kept: HashSet::new(),
                        synced: 0,
                        full: false,
                        other: Arc::from(OTHER),
                        last: None,
                    });
                    l.len() - 1
                }
            };
            let c = &mut l[i];
            if c.version != version {
                let g = self.kept.read().unwrap_or_else(|p| p.into_inner());
                c.kept
                    .extend(g.1[c.synced.min(g.1.len())..].iter().cloned());
                c.synced = g.1.len();
                c.full = g.1.len() >= self.max.load(Ordering::Relaxed);
                c.version = version;
            }
            if let Some(v) = &c.last {
                if **v == *value {
                    return Some(None);
                }
            }
            if let Some(v) = c.kept.get(value) {
                c.last = Some(Arc::clone(v));
                Some(None)
            } else if c.full {
                Some(Some(Arc::clone(&c.other)))
            } else {
                // New here and there is room: the shared set decides.
                None
            }
        });
        match local {
            Ok(Some(folded)) => folded,
            // New here and there is room (or the thread is exiting): ask the shared set.
            _ => (!self.admit(value)).then(|| Arc::from(OTHER)),
        }
    }

    /// Whether `value` has its own series, giving it one if there is room.
    fn admit(&self, value: &str) -> bool {
        let mut g = self.kept.write().unwrap_or_else(|p| p.into_inner());
        if g.0.contains(value) {
            return true;
        }
        if g.1.len() >= self.max.load(Ordering::Relaxed) {
            return false;
        }
        // A copy of the string: the caller's may be a request's own allocation.
        let kept: Arc<str> = Arc::from(value);
        g.0.insert(Arc::clone(&kept));
        g.1.push(kept);
        drop(g);
        self.version.fetch_add(1, Ordering::Release);
        true
    }

    /// Offers `values` in order (configured names, before any traffic).
    pub fn seed<'a>(&self, values: impl IntoIterator<Item = &'a str>) {
        for v in values {
            let _ = self.admit(v);
        }
    }

    /// Values with series of their own.
    pub fn len(&self) -> usize {
        self.kept.read().unwrap_or_else(|p| p.into_inner()).1.len()
    }

    /// Whether no value has a series of its own yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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

    /// [`MetricLabels::request`] with the operation in the `metrics` facade's form.
    pub fn request_shared(
        &self,
        customer: &Arc<str>,
        operation: &SharedString,
        criticality: Criticality,
    ) -> RequestLabels {
        RequestLabels {
            customer: self.customers.label(customer),
            operation: self.operations.label_shared(operation),
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
    }

    #[test]
    fn every_thread_sees_the_same_values_kept() {
        let cap = Arc::new(LabelCap::new(50));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let cap = Arc::clone(&cap);
                std::thread::spawn(move || {
                    (0..200)
                        .map(|i| cap.label(&a(&format!("v{}", (i * 7 + t * 13) % 200))))
                        .filter(|l| &**l != OTHER)
                        .map(|l| l.to_string())
                        .collect::<HashSet<String>>()
                })
            })
            .collect();
        let mut union = HashSet::new();
        for t in threads {
            union.extend(t.join().unwrap());
        }
        assert_eq!(cap.len(), 50);
        assert_eq!(
            union.len(),
            50,
            "no thread gave a series to a value past the cap"
        );
        // Whatever a thread learnt first, all now agree.
        for v in &union {
            assert_eq!(&*cap.label(&a(v)), v.as_str());
        }
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
    fn shared_strings_are_capped_alike_and_keep_their_form() {
        let cap = LabelCap::new(1);
        let kept = SharedString::const_str("search");
        assert_eq!(&*cap.label_shared(&kept), "search");
        assert_eq!(&*cap.label_shared(&SharedString::from(a("batch"))), OTHER);
        assert_eq!(
            &*cap.label(&a("search")),
            "search",
            "one set for both forms"
        );
        assert_eq!(cap.max(), 1);
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
