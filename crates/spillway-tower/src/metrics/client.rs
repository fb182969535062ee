//! The client side's throttled and retried counters, their handles cached per thread, and
//! their label sets bounded whatever the number of destinations.
//!
//! Why a cache: recorded through the facade, each call built the counter's label `Vec` and
//! `Key` and probed the recorder's registry, and asked the series cap ([`super::series`]) — a
//! process-wide mutex and a joined key — on every call. These events are rare next to requests
//! until a throttle refuses most calls of an overloaded client; then they come with every
//! call, from every thread at once. So each thread keeps the counters of the label sets it has
//! recorded (the cap's decision comes with them), as [`super::handles`] does for the
//! per-request families, and asks again only for a label set it has not seen, or after the cap
//! or the recorder changed.
//!
//! Why the destination folds too: `destination` multiplies these families by the tasks a
//! client sends to, which a resolver (or a caller's own code) can make many. A label set past
//! the family's cap is recorded with its customer as `other`, then its operation, and — new
//! here — its destination, so the last fallback, `(other, other, criticality, [reason,]
//! other)`, is the only label set never refused: at most 4 per family (times the retry
//! reasons).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use metrics::{Counter, Label, SharedString};

use super::handles::{current_recorder, overflow_counter, MAX_LABEL_SETS};
use super::labels::OTHER;
use super::{series, RequestLabels};
use crate::wire::metric as m;

/// A label set of the throttled or retried family (`reason` empty for throttled).
#[derive(PartialEq, Eq, Hash)]
struct Key {
    family: &'static str,
    customer: Arc<str>,
    operation: SharedString,
    criticality: u8,
    reason: &'static str,
    destination: SharedString,
}

/// The counter a label set is recorded in, and the overflow counter when it was folded.
struct Cached {
    counter: Counter,
    overflow: Option<Counter>,
}

#[derive(Default)]
struct Table {
    /// Address of the recorder the counters were registered with.
    recorder: usize,
    /// The series caps' generation they were decided under.
    generation: u64,
    counters: HashMap<Key, Cached>,
}

thread_local! {
    static TABLE: RefCell<Table> = RefCell::new(Table::default());
}

/// Counts one event of `family` (throttled, or retried for `reason`) for `l` to `destination`.
pub(super) fn count(
    family: &'static str,
    l: &RequestLabels,
    reason: Option<&'static str>,
    destination: SharedString,
) {
    let recorder = current_recorder();
    let generation = series::generation();
    TABLE.with(|t| {
        let mut t = t.borrow_mut();
        if t.recorder != recorder
            || t.generation != generation
            || t.counters.len() >= MAX_LABEL_SETS
        {
            t.counters.clear();
            t.recorder = recorder;
            t.generation = generation;
        }
        let key = Key {
            family,
            customer: Arc::clone(&l.customer),
            operation: l.operation.clone(),
            criticality: l.criticality as u8,
            reason: reason.unwrap_or(""),
            destination,
        };
        if let Some(c) = t.counters.get(&key) {
            c.increment();
            return;
        }
        let c = register(recorder, &key, l);
        c.increment();
        t.counters.insert(key, c);
    });
}

impl Cached {
    fn increment(&self) {
        self.counter.increment(1);
        if let Some(o) = &self.overflow {
            o.increment(1);
        }
    }
}

/// The counter of `key`'s label set: its own if it fits the family's cap, else with the
/// customer, then the operation, then the destination as `other` (the module says why).
fn register(recorder: usize, key: &Key, l: &RequestLabels) -> Cached {
    let crit = l.criticality.as_str();
    let fits = |customer: &str, operation: &str, destination: &str| {
        let mut values = vec![customer, operation, crit];
        if !key.reason.is_empty() {
            values.push(key.reason);
        }
        values.push(destination);
        series::admit(recorder, key.family, &series::key(&values), 1)
    };
    let other = || SharedString::const_str(OTHER);
    let (customer, operation, destination, folded) =
        if fits(&key.customer, &key.operation, &key.destination) {
            (
                SharedString::from(Arc::clone(&key.customer)),
                key.operation.clone(),
                key.destination.clone(),
                false,
            )
        } else if fits(OTHER, &key.operation, &key.destination) {
            (
                other(),
                key.operation.clone(),
                key.destination.clone(),
                true,
            )
        } else if fits(OTHER, OTHER, &key.destination) {
            (other(), other(), key.destination.clone(), true)
        } else {
            (other(), other(), other(), true)
        };
    let mut labels = vec![
        Label::new(m::L_CUSTOMER, customer),
        Label::new(m::L_OPERATION, operation),
        Label::new(m::L_CRITICALITY, crit),
    ];
    if !key.reason.is_empty() {
        labels.push(Label::new(m::L_REASON, key.reason));
    }
    labels.push(Label::new(m::L_DESTINATION, destination));
    Cached {
        counter: metrics::counter!(key.family, labels),
        overflow: folded.then(|| overflow_counter(key.family)),
    }
}

#[cfg(test)]
mod tests;
