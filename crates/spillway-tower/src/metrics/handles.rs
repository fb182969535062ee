//! Per-thread cache of metric handles, one set per (customer, operation, criticality).
//!
//! Why: `metrics::counter!(name, labels)` builds a `Key` (a label `Vec`, one allocation, and
//! its hash) and asks the recorder to find or register the series — on every call. A proxy or
//! server records three series per admitted request (admitted, queue time, latency), so that
//! was three allocations and three registry probes per request on the data path. The label sets
//! seen in practice are few (customers and operations come from configuration), so each thread
//! registers a label set's handles once and then only updates them. The handles point at the
//! recorder's shared storage, so counts from every thread land in the same series.
//!
//! Recorder changes: handles belong to the recorder that registered them. The table remembers
//! which recorder that was (its address, as `metrics::with_recorder` reports it) and starts
//! afresh when another one is current — e.g. when the application installs its recorder after
//! a first request was served, which would otherwise leave this thread recording into the
//! no-op recorder forever.
//!
//! Bound: if customers come from a trusted header their number is whatever callers send; the
//! table is cleared when it holds [`MAX_LABEL_SETS`] label sets, so memory stays bounded and a
//! cleared label set is simply registered again (the recorder keeps its values).

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use metrics::{Counter, Histogram, Recorder, SharedString};

use super::labels::OTHER;
use super::{series, RequestLabels};
use crate::wire::metric as m;

/// The families whose series are capped ([`series`]), as the overflow counter names them.
pub(super) const CAPPED_FAMILIES: [&str; 6] = [
    m::ADMITTED,
    m::SHED,
    m::QUEUE_TIME,
    m::LATENCY,
    m::THROTTLED,
    m::RETRIED,
];

/// Label sets kept per thread before the table is cleared.
pub(super) const MAX_LABEL_SETS: usize = 4096;

/// The handles of one label set.
pub(super) struct Handles {
    pub(super) admitted: Counter,
    pub(super) queue_time: Histogram,
    pub(super) latency: Histogram,
    /// Set when any family records this label set under a coarser one ([`series`]).
    pub(super) overflow: Option<Box<Overflow>>,
    /// Refusals by reason (a handful of `&'static str` reasons; a linear scan), with the
    /// overflow counter when folded.
    shed: RefCell<Vec<(&'static str, Counter, Option<Counter>)>>,
}

/// The overflow counters of the families that fold a label set ([`series`]).
pub(super) struct Overflow {
    admitted: Option<Counter>,
    queue_time: Option<Counter>,
    latency: Option<Counter>,
}

impl Overflow {
    /// One admitted request (its count and its queue time) recorded under coarser labels.
    pub(super) fn admitted(&self) {
        for c in [&self.admitted, &self.queue_time].into_iter().flatten() {
            c.increment(1);
        }
    }

    /// One latency recorded under coarser labels.
    pub(super) fn latency(&self) {
        if let Some(c) = &self.latency {
            c.increment(1);
        }
    }
}

pub(super) fn overflow_counter(family: &'static str) -> Counter {
    metrics::counter!(m::LABEL_OVERFLOW, m::L_FAMILY => family)
}

/// The labels a counter of `family` records `l` under (`extra`: the values of its other
/// labels, e.g. the reason for `shed`): its own if they fit, else with the customer as `other`,
/// else with the operation too; and whether they were folded.
pub(super) fn counter_labels(
    family: &'static str,
    l: &RequestLabels,
    extra: &[&str],
) -> (RequestLabels, bool) {
    let crit = l.criticality.as_str();
    let recorder = current_recorder();
    let fits = |customer: &str, operation: &str| {
        let mut values = vec![customer, operation, crit];
        values.extend_from_slice(extra);
        series::admit(recorder, family, &series::key(&values), 1)
    };
    if fits(&l.customer, &l.operation) {
        return (l.clone(), false);
    }
    let customer: Arc<str> = Arc::from(OTHER);
    let operation = if fits(OTHER, &l.operation) {
        l.operation.clone()
    } else {
        SharedString::const_str(OTHER)
    };
    let folded = RequestLabels {
        customer,
        operation,
        criticality: l.criticality,
    };
    (folded, true)
}

/// The histogram of `family` for `l`: by its operation and criticality if that fits, else with
/// the operation as `other`; and whether it was folded.
fn histogram(family: &'static str, l: &RequestLabels) -> (Histogram, bool) {
    let key = series::key(&[&l.operation, l.criticality.as_str()]);
    if series::admit(current_recorder(), family, &key, series::HISTOGRAM_SERIES) {
        return (
            metrics::histogram!(family, l.histogram_labels().to_vec()),
            false,
        );
    }
    let folded = RequestLabels {
        customer: Arc::clone(&l.customer),
        operation: SharedString::const_str(OTHER),
        criticality: l.criticality,
    };
    (
        metrics::histogram!(family, folded.histogram_labels().to_vec()),
        true,
    )
}

impl Handles {
    fn register(l: &RequestLabels) -> Self {
        let (admitted, admitted_folded) = counter_labels(m::ADMITTED, l, &[]);
        // Without the customer: a histogram is ~17 series (its buckets, sum and count), so
        // per customer × operation × criticality 100 customers on 3 routes at 4
        // criticalities made a 4.4 MB `/metrics`; the counters keep per-customer accounting.
        let (queue_time, queue_folded) = histogram(m::QUEUE_TIME, l);
        let (latency, latency_folded) = histogram(m::LATENCY, l);
        let overflow = (admitted_folded || queue_folded || latency_folded).then(|| {
            Box::new(Overflow {
                admitted: admitted_folded.then(|| overflow_counter(m::ADMITTED)),
                queue_time: queue_folded.then(|| overflow_counter(m::QUEUE_TIME)),
                latency: latency_folded.then(|| overflow_counter(m::LATENCY)),
            })
        });
        Self {
            admitted: metrics::counter!(m::ADMITTED, admitted.labels().to_vec()),
            queue_time,
            latency,
            overflow,
            shed: RefCell::new(Vec::new()),
        }
    }

    /// Counts one refusal for `reason` (its counter registered on its first use).
    pub(super) fn count_shed(&self, l: &RequestLabels, reason: &'static str) {
        let mut shed = self.shed.borrow_mut();
        let i = match shed.iter().position(|(r, _, _)| *r == reason) {
            Some(i) => i,
            None => {
                let (labels, folded) = counter_labels(m::SHED, l, &[reason]);
                let c = metrics::counter!(m::SHED, labels.labels_with_reason(reason).to_vec());
                shed.push((reason, c, folded.then(|| overflow_counter(m::SHED))));
                shed.len() - 1
            }
        };
        let (_, c, overflow) = &shed[i];
        c.increment(1);
        if let Some(o) = overflow {
            o.increment(1);
        }
    }
}

type ByCriticality = [Option<Rc<Handles>>; 4];

#[derive(Default)]
struct Table {
    /// Address of the recorder the handles were registered with.
    recorder: usize,
    /// The series caps' generation the handles were registered under (`series::generation`).
    generation: u64,
    len: usize,
    by_customer: HashMap<Arc<str>, HashMap<SharedString, ByCriticality>>,
    /// The label set found last and its handles. A request asks twice (admitted, then its
    /// latency) and consecutive requests mostly share a label set, so this answers most asks
    /// with two short string comparisons instead of two SipHash lookups.
    last: Option<(RequestLabels, Rc<Handles>)>,
}

thread_local! {
    static TABLE: RefCell<Table> = RefCell::new(Table::default());
}

pub(super) fn current_recorder() -> usize {
    metrics::with_recorder(|r: &dyn Recorder| (r as *const dyn Recorder).cast::<()>() as usize)
}

/// The handles for `l`'s label set on this thread, registered on first use.
pub(super) fn of(l: &RequestLabels) -> Rc<Handles> {
    let recorder = current_recorder();
    let generation = series::generation();
    TABLE.with(|t| {
        let mut t = t.borrow_mut();
        if t.recorder != recorder || t.len >= MAX_LABEL_SETS || t.generation != generation {
            t.by_customer.clear();
            t.last = None;
            t.len = 0;
            t.recorder = recorder;
            t.generation = generation;
        }
        if let Some((last, h)) = &t.last {
            if last == l {
                return Rc::clone(h);
            }
        }
        let slot = l.criticality as usize;
        if let Some(h) = t
            .by_customer
            .get(&*l.customer)
            .and_then(|ops| ops.get(&*l.operation))
            .and_then(|c| c[slot].as_ref())
        {
            let h = Rc::clone(h);
            t.last = Some((l.clone(), Rc::clone(&h)));
            return h;
        }
        let h = Rc::new(Handles::register(l));
        t.last = Some((l.clone(), Rc::clone(&h)));
        let entry = t
            .by_customer
            .entry(Arc::clone(&l.customer))
            .or_default()
            .entry(l.operation.clone())
            .or_default();
        entry[slot] = Some(Rc::clone(&h));
        t.len += 1;
        h
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use metrics::{Gauge, Key, KeyName, Metadata, Unit};
    use spillway_core::Criticality;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Mutex;
    use std::time::Duration;

    /// Counts every counter series by its full key (name and labels), and the registrations.
    #[derive(Default)]
    pub(in crate::metrics) struct Counting(
        pub(in crate::metrics) Mutex<HashMap<Key, Arc<AtomicU64>>>,
        pub(in crate::metrics) AtomicU64,
    );

    impl Counting {
        fn value(&self, name: &str, crit: &str, reason: Option<&str>) -> u64 {
            let has =
                |k: &Key, key: &str, v: &str| k.labels().any(|l| l.key() == key && l.value() == v);
            self.0
                .lock()
                .unwrap()
                .iter()
                .filter(|(k, _)| k.name() == name && has(k, m::L_CRITICALITY, crit))
                .filter(|(k, _)| reason.is_none_or(|r| has(k, m::L_REASON, r)))
                .map(|(_, v)| v.load(Ordering::Relaxed))
                .sum()
        }
    }

    impl Recorder for Counting {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            self.1.fetch_add(1, Ordering::Relaxed);
            let mut map = self.0.lock().unwrap();
            Counter::from_arc(Arc::clone(map.entry(key.clone()).or_default()))
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    pub(in crate::metrics) fn labels(
        customer: &str,
        op: &'static str,
        c: Criticality,
    ) -> RequestLabels {
        RequestLabels {
            customer: Arc::from(customer),
            operation: SharedString::const_str(op),
            criticality: c,
        }
    }

    #[test]
    fn cached_handles_count_into_the_right_series() {
        let rec = Counting::default();
        metrics::with_local_recorder(&rec, || {
            let a = labels("acme", "get", Criticality::Critical);
            let b = labels("acme", "get", Criticality::Sheddable);
            for _ in 0..3 {
                super::super::admitted(&a, Duration::ZERO);
            }
            super::super::admitted(&b, Duration::ZERO);
            super::super::shed(&b, "limit");
            super::super::shed(&b, "limit");
            super::super::shed(&b, "queue-timeout");
        });
        assert_eq!(rec.value(m::ADMITTED, "CRITICAL", None), 3);
        assert_eq!(rec.value(m::ADMITTED, "SHEDDABLE", None), 1);
        assert_eq!(rec.value(m::SHED, "SHEDDABLE", Some("limit")), 2);
        assert_eq!(rec.value(m::SHED, "SHEDDABLE", Some("queue-timeout")), 1);
        // One series per label set (2 admitted + 2 shed), each registered once: the facade
        // without the table would register on every one of the 7 calls.
        assert_eq!(rec.0.lock().unwrap().len(), 4);
        assert_eq!(rec.1.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn alternating_label_sets_each_count_into_their_own_series() {
        // The last-used entry must never answer for a different label set: customers,
        // operations and criticalities that differ in one field only, interleaved.
        let rec = Counting::default();
        let sets = [
            labels("acme", "get", Criticality::Critical),
            labels("acme", "put", Criticality::Critical),
            labels("globex", "get", Criticality::Critical),
            labels("acme", "get", Criticality::CriticalPlus),
        ];
        metrics::with_local_recorder(&rec, || {
            for _ in 0..3 {
                for (i, l) in sets.iter().enumerate() {
                    // Set i is recorded i + 1 times per round, some of them back to back.
                    for _ in 0..=i {
                        super::super::admitted(l, Duration::ZERO);
                    }
                }
            }
        });
        let count = |customer: &str, op: &str, crit: &str| -> u64 {
            rec.0
                .lock()
                .unwrap()
                .iter()
                .filter(|(k, _)| k.name() == m::ADMITTED)
                .filter(|(k, _)| {
                    let l: Vec<(&str, &str)> = k.labels().map(|l| (l.key(), l.value())).collect();
                    l.contains(&(m::L_CUSTOMER, customer))
                        && l.contains(&(m::L_OPERATION, op))
                        && l.contains(&(m::L_CRITICALITY, crit))
                })
                .map(|(_, v)| v.load(Ordering::Relaxed))
                .sum()
        };
        assert_eq!(count("acme", "get", "CRITICAL"), 3);
        assert_eq!(count("acme", "put", "CRITICAL"), 6);
        assert_eq!(count("globex", "get", "CRITICAL"), 9);
        assert_eq!(count("acme", "get", "CRITICAL_PLUS"), 12);
    }

    #[test]
    fn a_new_recorder_gets_its_own_handles() {
        let l = labels("acme", "put", Criticality::Critical);
        // Served first with no recorder (the no-op one): the table must not keep those
        // handles once a real recorder is current.
        super::super::admitted(&l, Duration::ZERO);
        let rec = Counting::default();
        metrics::with_local_recorder(&rec, || super::super::admitted(&l, Duration::ZERO));
        assert_eq!(rec.value(m::ADMITTED, "CRITICAL", None), 1);
    }

    #[test]
    fn a_full_family_folds_the_customer_then_the_operation_and_counts_it() {
        use super::super::labels::OTHER;
        let rec = Counting::default();
        let max = series::max_series_per_family();
        let count = |customer: &str, op: &str| -> u64 {
            rec.0
                .lock()
                .unwrap()
                .iter()
                .filter(|(k, _)| k.name() == m::ADMITTED)
                .filter(|(k, _)| {
                    let l: Vec<(&str, &str)> = k.labels().map(|l| (l.key(), l.value())).collect();
                    l.contains(&(m::L_CUSTOMER, customer)) && l.contains(&(m::L_OPERATION, op))
                })
                .map(|(_, v)| v.load(Ordering::Relaxed))
                .sum()
        };
        metrics::with_local_recorder(&rec, || {
            // `(other, a)` first, then the family filled on operation `b`.
            super::super::admitted(&labels(OTHER, "a", Criticality::Critical), Duration::ZERO);
            for i in 1..max {
                let l = labels(&format!("c{i}"), "b", Criticality::Critical);
                super::super::admitted(&l, Duration::ZERO);
            }
            // Full: a new customer on `a` is counted as `(other, a)`, on `c` as `(other, other)`.
            super::super::admitted(&labels("late", "a", Criticality::Critical), Duration::ZERO);
            super::super::admitted(&labels("late", "c", Criticality::Critical), Duration::ZERO);
            super::super::shed(&labels("c1", "b", Criticality::Critical), "limit");
        });
        assert_eq!(count("c1", "b"), 1, "kept");
        assert_eq!(count("late", "a") + count("late", "c"), 0, "folded");
        assert_eq!(
            count(OTHER, "a"),
            2,
            "the customer folded, the operation kept"
        );
        assert_eq!(count(OTHER, OTHER), 1, "both folded");
        let overflow = |family: &str| -> u64 {
            rec.0
                .lock()
                .unwrap()
                .iter()
                .filter(|(k, _)| k.name() == m::LABEL_OVERFLOW)
                .filter(|(k, _)| k.labels().any(|l| l.value() == family))
                .map(|(_, v)| v.load(Ordering::Relaxed))
                .sum()
        };
        assert_eq!(overflow(m::ADMITTED), 2);
        // The shed family was empty: its first label set fits.
        assert_eq!(overflow(m::SHED), 0);
        assert_eq!(rec.value(m::SHED, "CRITICAL", Some("limit")), 1);
    }

    #[test]
    fn the_table_is_bounded() {
        for i in 0..MAX_LABEL_SETS + 10 {
            let l = RequestLabels {
                customer: Arc::from(format!("c{i}").as_str()),
                operation: SharedString::const_str("op"),
                criticality: Criticality::Critical,
            };
            let _ = of(&l);
        }
        TABLE.with(|t| assert!(t.borrow().len <= MAX_LABEL_SETS));
    }
}
