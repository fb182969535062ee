//! The lease client's memory of demand and leases, and the fallback arithmetic: no I/O, so it
//! is unit-tested without a store (`tests.rs`) and the proxy and the tower layer share it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use spillway_core::quota::{DemandEstimate, QuotaBook};

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
    /// This instance's demand, cost units/s.
    pub demand: f64,
}

/// The client's memory of demand and leases, and the fallback arithmetic (no I/O: unit-tested).
#[derive(Debug)]
pub struct LeaseBook {
    /// Which book the counts below belong to (a reload may build a new controller).
    pub(super) book: usize,
    /// Per bucket: offered total at the last reading.
    pub(super) offered: HashMap<usize, f64>,
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
            demand: HashMap::new(),
            share: HashMap::new(),
            read_at: None,
            last: None,
            members: 0,
            mode: LeaseMode::Static,
            recovering: false,
            shifted: false,
        }
    }
}

impl LeaseBook {
    /// Reads each shared bucket's demand from `book` at `now`, for the store.
    pub fn demands(&mut self, book: &QuotaBook, now: Instant) -> Vec<Report> {
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
        let dt = self
            .read_at
            .map_or(0.0, |t| now.saturating_duration_since(t).as_secs_f64());
        self.read_at = Some(now);
        book.shared_buckets()
            .into_iter()
            .map(|b| {
                let total = book.offered(b.index);
                let prev = self.offered.insert(b.index, total);
                let d = self.demand.entry(b.index).or_default();
                if let (Some(prev), true) = (prev, dt > 0.0) {
                    // Smoothed while steady, followed when it shifts; the first reading
                    // stands as it is (spillway_core::quota::DemandEstimate says why).
                    d.update((total - prev).max(0.0) / dt, dt);
                    self.shifted |= d.shifted();
                }
                Report {
                    index: b.index,
                    key: demand_key(b.customer, b.criticality),
                    global: b.global,
                    demand: d.get(),
                }
            })
            .collect()
    }

    /// A lease arrived: apply the shares. The first one after a failure may come from a store
    /// that restarted empty and so far counts only the first instances back (the first one
    /// alone would get the whole quota): it may lower rates but not raise them; the next
    /// lease, an interval later, counts everyone again.
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
