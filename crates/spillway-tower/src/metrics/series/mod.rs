//! Bounded label *combinations*: each per-request family (admitted, shed, queue time,
//! latency, and the client side's throttled and retried, whose `destination` multiplies them
//! by the tasks) keeps at most [`max_series_per_family`] series; a label set past it is recorded
//! under a coarser one — its customer as `other`, then its operation too — and the request is
//! counted in [`crate::wire::metric::LABEL_OVERFLOW`].
//!
//! Why on top of the caps on values ([`super::labels`]): 100 customers and 100 operations are
//! each few, but their product at four criticalities is 40,000 label sets, and with a series
//! per refusal reason and two histograms of 17 series per operation and criticality, several
//! MB of `/metrics` rendered on every scrape and stored for good by the recorder. A cap on the
//! series of each family bounds the text whatever the product: at the default 1,500 and names
//! of about 15 characters the four families take about 650 KB (a counter line ~110–130 bytes, a
//! histogram's 17 lines ~1.7 KB), and `/metrics` stays under 1 MB with everything else.
//!
//! The rule is the value caps' — *first come, kept for good* — for the same reason: a series
//! never moves or disappears, so every counter stays monotonic. A counter label set that does
//! not fit becomes `(other, operation, criticality)` if that one has a series (customers past
//! the value cap give it one early, so their operation's totals stay whole), else `(other,
//! other, criticality)`; a histogram's `(operation, criticality)` becomes `(other,
//! criticality)`. The throttled and retried families fold their `destination` last
//! (`super::client`), so their last fallback is `(other, other, criticality, [reason,] other)`.
//! The last fallbacks are never refused (at most 4 label sets per family, times the reasons for
//! `shed` and `retried`), so nothing goes uncounted.
//!
//! Cost: decided once per label set and thread, when its handles are registered
//! (`super::handles`, `super::client`); a folded request pays one more atomic add (the overflow
//! counter).

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Default cap on the series of each per-request family.
pub const DEFAULT_MAX_SERIES: usize = 1_500;
/// Smallest accepted cap (a histogram's label set alone costs [`HISTOGRAM_SERIES`]).
pub const MIN_MAX_SERIES: usize = 100;
/// Largest accepted cap.
pub const MAX_MAX_SERIES: usize = 1_000_000;
/// Series one histogram label set costs in the Prometheus text: `spillway-proxy`'s 14 bounds,
/// `+Inf`, `_sum` and `_count`.
pub const HISTOGRAM_SERIES: usize = 17;

static MAX: AtomicUsize = AtomicUsize::new(DEFAULT_MAX_SERIES);
/// Bumped when the cap changes, so threads register their handles again (a raised cap gives
/// label sets folded so far series of their own).
static GENERATION: AtomicU64 = AtomicU64::new(0);
/// The families' kept label sets, per recorder (its address, as `super::handles` tells
/// recorders apart): the series are the recorder's, and a recorder installed later (or a
/// test's own) starts with none. At most [`MAX_RECORDERS`], the oldest forgotten first.
static FAMILIES: Mutex<Vec<(usize, Vec<Family>)>> = Mutex::new(Vec::new());

/// Recorders whose label sets are remembered (a process has one; tests make more).
const MAX_RECORDERS: usize = 8;

/// The label sets of one family that have series of their own, and what they cost.
struct Family {
    name: &'static str,
    series: usize,
    kept: HashSet<Box<str>>,
}

/// Sets the cap on the series of each family (the process's: the recorder is too). Label sets
/// that have series keep them when it is lowered; new ones fit again once below it.
pub fn set_max_series_per_family(max: usize) {
    if MAX.swap(max, Ordering::Relaxed) != max {
        GENERATION.fetch_add(1, Ordering::Release);
    }
}

/// The cap on the series of each family.
pub fn max_series_per_family() -> usize {
    MAX.load(Ordering::Relaxed)
}

/// Changes with every change of the cap.
pub(super) fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

/// Series `family` holds now in the current recorder.
pub fn series_of(family: &str) -> usize {
    let recorder = super::handles::current_recorder();
    let all = FAMILIES.lock().unwrap_or_else(|p| p.into_inner());
    all.iter()
        .find(|(r, _)| *r == recorder)
        .and_then(|(_, families)| families.iter().find(|f| f.name == family))
        .map_or(0, |f| f.series)
}

/// Whether the label set `key` of `family` has, or now gets, series of its own in
/// `recorder`, costing `cost` series.
pub(super) fn admit(recorder: usize, family: &'static str, key: &str, cost: usize) -> bool {
    let max = MAX.load(Ordering::Relaxed);
    let mut all = FAMILIES.lock().unwrap_or_else(|p| p.into_inner());
    let r = match all.iter().position(|(r, _)| *r == recorder) {
        Some(r) => r,
        None => {
            if all.len() >= MAX_RECORDERS {
                all.remove(0);
            }
            all.push((recorder, Vec::new()));
            all.len() - 1
        }
    };
    let families = &mut all[r].1;
    let i = match families.iter().position(|f| f.name == family) {
        Some(i) => i,
        None => {
            families.push(Family {
                name: family,
                series: 0,
                kept: HashSet::new(),
            });
            families.len() - 1
        }
    };
    let f = &mut families[i];
    if f.kept.contains(key) {
        return true;
    }
    if f.series.saturating_add(cost) > max {
        return false;
    }
    f.kept.insert(Box::from(key));
    f.series += cost;
    true
}

/// The key of a label set: its values, separated by a byte no label value here contains.
pub(super) fn key(values: &[&str]) -> String {
    values.join("\u{1f}")
}

#[cfg(test)]
mod tests;
