//! The lease client's memory of demand and leases, and the fallback arithmetic: no I/O, so it
//! is unit-tested without a store (`tests.rs`) and the proxy and the tower layer share it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use spillway_core::quota::{DemandEstimate, QuotaBook, DEMAND_SMOOTHING};

use super::{demand_key, LeaseMode};

/// One bucket's report: the store key and what goes with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Bucket index in the book.
    pub index: usize,
    /// Redis key of the bucket's demand hash.
    pub key: String,
    /// Global quota, cost units/s.
    pub global: f64,
    /// This instance's demand, cost units/s; negative: this instance leaves the bucket (idle,
    /// see [`LeaseBook::demands`]).
    pub demand: f64,
    /// What this instance asks for itself, at least `demand`: the demand's upper bound for
    /// the noise of its arrivals ([`DemandEstimate::upper`]).
    pub ask: f64,
}

/// A bucket with no arrival for this long, and a demand under the store's floor (1% of an
/// equal split), is idle: it is reported once more, as leaving, and then not at all until a
/// request arrives (a store call then costs what the busy buckets do, not every configured
/// customer × criticality).
///
/// Why the floor too: at 10,000 instances an instance may see a request every half minute.
/// Idle after two quiet seconds, it was out of the store's count most of the time while its
/// requests still came, and it left with the floor share, so its next request found a
/// bucket rated at a hundredth of an equal split and went into debt for `max_retry_after`.
/// Its demand estimate falls under the floor only when it no longer counts anyway.
pub const IDLE_AFTER: Duration = Duration::from_secs(2);

/// The client's memory of demand and leases, and the fallback arithmetic (no I/O: unit-tested).
#[derive(Debug)]
pub struct LeaseBook {
    /// Which book the counts below belong to (a reload may build a new controller).
    pub(super) book: usize,
    /// Per bucket: offered total and arrivals at the last reading.
    pub(super) offered: HashMap<usize, (f64, u64)>,
    /// Per bucket: when a request last arrived (as of a reading), and whether the store has
    /// been told the bucket is idle here.
    pub(super) seen: HashMap<usize, (Instant, bool)>,
    /// Per bucket: the demand estimate, cost units/s.
    pub(super) demand: HashMap<usize, DemandEstimate>,
    /// Per bucket: the last leased share.
    pub(super) share: HashMap<usize, f64>,
    pub(super) read_at: Option<Instant>,
    /// When the last lease was granted.
    pub(super) last: Option<Instant>,
    pub(super) members: u64,
    pub(super) mode: LeaseMode,
    /// The store failed since the last lease: the next lease may lower rates, not raise them.
    pub(super) recovering: bool,
    /// A bucket's demand shifted at the last reading: the store shares it out afresh.
    pub(super) shifted: bool,
}

impl Default for LeaseBook {
    fn default() -> Self {
        LeaseBook {
            book: 0,
            offered: HashMap::new(),
            seen: HashMap::new(),
            demand: HashMap::new(),
            share: HashMap::new(),
            read_at: None,
            last: None,
            members: 0,
            mode: LeaseMode::Static,
            // The first lease may lower the static split but not raise it: the store may not
            // count the others yet (a fleet starting together), as after an outage.
            recovering: true,
            shifted: false,
        }
    }
}

impl LeaseBook {
    /// Reads each shared bucket's demand from `book` at `now`, for the store, with leases every
    /// `interval`.
    ///
    /// The first reading runs from the book's origin; one shorter than a quarter of an
    /// interval (the call a lease task makes as it starts) tells nothing, so it is not taken
    /// (the next reading runs from the same point) and a bucket with arrivals reports the rate
    /// it enforces instead. A bucket idle ([`IDLE_AFTER`]) is reported once as leaving (a
    /// negative demand: the script drops this instance from it) and then left out; it keeps
    /// its rate until a request arrives and the next reading reports it again.
    pub fn demands(&mut self, book: &QuotaBook, now: Instant, interval: Duration) -> Vec<Report> {
        let id = book as *const QuotaBook as usize;
        if id != self.book {
            // A new book (controller rebuilt on reload): its counts start again at 0.
            *self = LeaseBook {
                book: id,
                last: self.last,
                members: self.members,
                recovering: self.recovering,
                ..LeaseBook::default()
            };
        }
        self.shifted = false;
        let since = self.read_at.unwrap_or_else(|| book.origin());
        let span = now.saturating_duration_since(since);
        let reading = span >= interval / 4;
        let dt = span.as_secs_f64();
        if reading {
            self.read_at = Some(now);
        }
        let mut out = Vec::new();
        let members = self.members.max(1) as f64;
        for b in book.shared_buckets() {
            let total = book.offered(b.index);
            let count = book.arrivals(b.index);
            let (prev_total, prev_count) = self.offered.get(&b.index).copied().unwrap_or_default();
            let d = self.demand.entry(b.index).or_default();
            let arrived = count > prev_count;
            if reading {
                self.offered.insert(b.index, (total, count));
                // Smoothed while steady, followed when it shifts; the first reading stands
                // as it is (spillway_core::quota::DemandEstimate says why).
                d.update_with(
                    (total - prev_total).max(0.0) / dt,
                    dt,
                    Some(count - prev_count),
                    DEMAND_SMOOTHING.as_secs_f64(),
                );
                self.shifted |= d.shifted();
            }
            let seen = self.seen.entry(b.index).or_insert((book.origin(), false));
            if arrived {
                *seen = (now, false);
            }
            let (demand, ask) = if count == 0 || (seen.1 && !arrived) {
                // Never used (it keeps the static split until a request arrives), or idle and
                // the store told so: nothing to send.
                continue;
            } else if arrived
                || now.saturating_duration_since(seen.0) < IDLE_AFTER
                || d.value().is_some_and(|v| v >= b.global / members / 100.0)
            {
                match d.value() {
                    Some(v) => (v, d.upper()),
                    None => (b.rate, b.rate),
                }
            } else {
                seen.1 = true;
                (-1.0, -1.0)
            };
            out.push(Report {
                index: b.index,
                key: demand_key(b.customer, b.criticality),
                global: b.global,
                demand,
                ask,
            });
        }
        out
    }

    /// A lease arrived: apply the shares. The first one after a failure may come from a store
    /// that restarted empty and so far counts only the first instances back (the first one
    /// alone would get the whole quota): it may lower rates but not raise them; the next
    /// lease, an interval later, counts everyone again. A bucket sent as leaving keeps its
    /// rate (the script's answer for it is the floor: see [`IDLE_AFTER`]).
    pub fn granted(
        &mut self,
        book: &QuotaBook,
        reports: &[Report],
        members: u64,
        shares: &[f64],
        now: Instant,
    ) {
        let cap: HashMap<usize, f64> = if std::mem::take(&mut self.recovering) {
            book.shared_buckets()
                .into_iter()
                .map(|b| (b.index, b.rate))
                .collect()
        } else {
            HashMap::new()
        };
        for (r, &s) in reports.iter().zip(shares) {
            if r.demand < 0.0 {
                continue;
            }
            let s = cap.get(&r.index).map_or(s, |&c| s.min(c));
            book.set_rate(r.index, s);
            self.share.insert(r.index, s);
        }
        self.last = Some(now);
        self.members = members;
        self.mode = LeaseMode::Leased;
    }

    /// No lease this interval: hold the last one for two intervals, then move linearly to
    /// the static split over two more.
    pub fn fail(&mut self, book: &QuotaBook, lease_interval: Duration, now: Instant) {
        self.recovering = true;
        // The store may not have heard that a bucket went idle here: say it again.
        for seen in self.seen.values_mut() {
            seen.1 = false;
        }
        let hold = lease_interval * 2;
        let Some(last) = self.last else {
            self.mode = LeaseMode::Static;
            return self.to_static(book);
        };
        let age = now.saturating_duration_since(last);
        if age <= hold {
            self.mode = LeaseMode::Holding;
            return;
        }
        let f = ((age - hold).as_secs_f64() / hold.as_secs_f64()).min(1.0);
        self.mode = if f >= 1.0 {
            LeaseMode::Static
        } else {
            LeaseMode::Decaying
        };
        for b in book.shared_buckets() {
            let fixed = book.static_rate(b.index).unwrap_or(b.rate);
            let from = self.share.get(&b.index).copied().unwrap_or(fixed);
            book.set_rate(b.index, from + (fixed - from) * f);
        }
    }

    fn to_static(&self, book: &QuotaBook) {
        for b in book.shared_buckets() {
            if let Some(r) = book.static_rate(b.index) {
                book.set_rate(b.index, r);
            }
        }
    }
}
