//! A fixed-size log-linear latency histogram for percentiles without per-sample allocation.
//!
//! Why: the Envoy gradient controller summarises each sampling window as a percentile; keeping
//! every sample would allocate in proportion to traffic. Like the circllhist histogram Envoy uses
//! (Circonus log-linear histogram), buckets keep two significant decimal digits, so a reported
//! percentile is within 5 % of a true sample value, over the whole `u64` nanosecond range, in a
//! fixed 1,720 counters allocated once.

/// Values below 100 ns get exact buckets; above, 90 buckets (mantissa 10..=99) per decade.
const EXACT: usize = 100;
const PER_DECADE: usize = 90;
/// Decades 10^1 ..= 10^18 as the bucket width (`u64::MAX` ≈ 1.8 × 10^19).
const DECADES: usize = 18;
const BUCKETS: usize = EXACT + DECADES * PER_DECADE;

#[derive(Clone)]
pub(super) struct LatencyHistogram {
    counts: Box<[u32]>,
    total: u32,
}

impl std::fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatencyHistogram")
            .field("total", &self.total)
            .finish_non_exhaustive()
    }
}

impl LatencyHistogram {
    pub(super) fn new() -> Self {
        LatencyHistogram {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            total: 0,
        }
    }

    fn index(v: u64) -> usize {
        if v < EXACT as u64 {
            return v as usize;
        }
        // v >= 100, so ilog10 >= 2 and e >= 1; v / 10^e is in [10, 99].
        let e = v.ilog10() - 1;
        let mantissa = v / 10u64.pow(e);
        EXACT + (e as usize - 1) * PER_DECADE + (mantissa as usize - 10)
    }

    /// The midpoint of bucket `i`, in the value's unit.
    fn representative(i: usize) -> f64 {
        if i < EXACT {
            return i as f64;
        }
        let j = i - EXACT;
        let e = (j / PER_DECADE + 1) as i32;
        let mantissa = (j % PER_DECADE + 10) as f64;
        (mantissa + 0.5) * 10f64.powi(e)
    }

    pub(super) fn record(&mut self, v: u64) {
        let i = Self::index(v);
        if let Some(c) = self.counts.get_mut(i) {
            *c = c.saturating_add(1);
            self.total = self.total.saturating_add(1);
        }
    }

    pub(super) fn count(&self) -> u32 {
        self.total
    }

    pub(super) fn clear(&mut self) {
        if self.total > 0 {
            self.counts.fill(0);
            self.total = 0;
        }
    }

    /// The `q`-quantile (`q` in `[0, 1]`) as a bucket midpoint; `None` when empty.
    pub(super) fn quantile(&self, q: f64) -> Option<f64> {
        if self.total == 0 {
            return None;
        }
        self.at_rank(quantile_rank(q, u64::from(self.total)))
    }

    /// The `rank`-th smallest value (from 1) as a bucket midpoint; `None` past the count.
    pub(super) fn at_rank(&self, rank: u64) -> Option<f64> {
        if rank == 0 || rank > u64::from(self.total) {
            return None;
        }
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                return Some(Self::representative(i));
            }
        }
        None
    }
}

/// The rank (from 1) of the `q`-quantile among `n ≥ 1` sorted values: `⌈q·n⌉`, at least the
/// first; a `q` that is NaN counts as the median. One convention for every minRTT estimate.
pub(super) fn quantile_rank(q: f64, n: u64) -> u64 {
    let q = if q.is_nan() { 0.5 } else { q.clamp(0.0, 1.0) };
    ((q * n as f64).ceil() as u64).clamp(1, n.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_u64_and_keep_two_digits() {
        assert_eq!(LatencyHistogram::index(0), 0);
        assert_eq!(LatencyHistogram::index(99), 99);
        assert_eq!(LatencyHistogram::index(100), 100);
        assert!(LatencyHistogram::index(u64::MAX) < BUCKETS);
        for v in [
            1u64,
            57,
            100,
            123,
            9_999,
            10_000_000,
            5_000_000_000,
            u64::MAX / 3,
        ] {
            let r = LatencyHistogram::representative(LatencyHistogram::index(v));
            let err = (r - v as f64).abs() / (v as f64);
            assert!(err <= 0.05, "v={v} r={r}");
        }
    }

    #[test]
    fn quantiles_follow_rank() {
        let mut h = LatencyHistogram::new();
        assert_eq!(h.quantile(0.5), None);
        for v in 1..=10u64 {
            h.record(v * 1_000_000);
        }
        assert_eq!(h.count(), 10);
        assert_eq!(h.quantile(0.5), Some(5_050_000.0));
        assert_eq!(h.quantile(1.0), Some(10_500_000.0));
        assert_eq!(h.quantile(0.0), Some(1_050_000.0));
        h.clear();
        assert_eq!(h.count(), 0);
        assert_eq!(h.quantile(0.9), None);
    }
}
