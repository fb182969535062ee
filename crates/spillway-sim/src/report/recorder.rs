//! Aggregation of finished requests into a [`RunReport`].
//!
//! Why a separate recorder: the load generator (many tasks, real time) and the simulator (one
//! loop, virtual time) both produce one record per logical request; the per-second bucketing,
//! the HDR histograms and the totals must be computed once, the same way, and be testable on
//! synthetic data without a clock. The recorder is plain data (`&mut self`); concurrent callers
//! wrap it in a mutex.
//!
//! Why the latencies are recorded in batches: a success is recorded into four HDR histograms
//! (the run's total, queue and service histograms, 184 KiB of counts each at 3 significant
//! figures, and its second's), and each increment lands on a counts line that the caller's own
//! work has evicted meanwhile — `spillway sim`'s profile showed 90% of the recording time on
//! that one load (5.5% of the `fleet` scenario). The samples are therefore appended to a
//! buffer and recorded a batch at a time ([`BATCH`], [`OFFLINE_BATCH`]), one histogram after
//! the other, so that the lines of the values that recur are fetched once per batch and the
//! misses of the others overlap in a tight loop. Nothing reported changes: a histogram's counts, total, min and max do not depend
//! on the order of recording, the buffer is emptied before a second is sealed and before the
//! report is made, and what is order-dependent (the floating-point sums of the means, the
//! outcome counts) is still added per record, in order.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use spillway_core::Criticality;

use super::{Counts, LatencySummary, Percentiles, RunReport, SecondStats, Summary};

/// Highest latency the histograms track, in microseconds (one hour; larger values saturate).
const MAX_LATENCY_US: u64 = 3_600_000_000;
/// Significant figures of the whole-run histograms (0.1% value resolution, HdrHistogram's usual
/// setting).
const RUN_SIGFIG: u8 = 3;
/// Significant figures of the per-second histograms (1% resolution): one per second of a long
/// run, so they are kept small (about 20 KiB each, created only for seconds with a success).
const SECOND_SIGFIG: u8 = 2;

/// Latency samples buffered before they are recorded into the histograms, for a recorder made
/// with [`Recorder::new`] (32 bytes each: 32 KiB, allocated at the first success). Kept small
/// because `spillway load` records under a mutex from its runtime's threads: a flush holds it for
/// tens of microseconds, not milliseconds.
const BATCH: usize = 1024;

/// The batch of a recorder no real-time caller waits on ([`Recorder::offline`], the simulator's):
/// 32,768 samples, 1 MiB. Measured on `spillway sim fleet --duration 5` (perf cpu-clock share of
/// `saturating_record` + `Recorder::record`): unbatched 6.3%, batches of 1,024 4.3%, 8,192 2.7%,
/// 32,768 2.1% — the larger the batch, the more often a counts line is hit again while fetched
/// (bench/results/sim-speed.md, fifth round part 2).
const OFFLINE_BATCH: usize = 32768;

/// Marks a buffered sample that goes into no second's histogram (or no queue/service one).
const NONE: u64 = 0;

/// One success's latency samples, waiting for [`Recorder::flush`]. Every recorded value is at
/// least 1 µs (`micros`, `ms_to_micros`), so [`NONE`] (0) marks an absent one.
#[derive(Clone, Copy)]
struct Pending {
    /// The second whose histogram takes `latency_us`, or `usize::MAX` for none (the second was
    /// sealed when the success was recorded).
    second: usize,
    latency_us: u64,
    queue_us: u64,
    processing_us: u64,
}

/// How a logical request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Answered successfully within the timeout.
    Success,
    /// Refused by the server on its last attempt (overload or quota), retries exhausted or gated.
    Rejected,
    /// No successful answer within the timeout.
    TimedOut,
    /// Refused locally by the client's adaptive throttle.
    Throttled,
    /// Any other failure.
    Error,
}

/// One finished logical request.
#[derive(Debug, Clone, Copy)]
pub struct RequestRecord<'a> {
    /// Intended send time, since the start of the run.
    pub offered_at: Duration,
    /// The request's criticality.
    pub criticality: Criticality,
    /// The customer it was sent for.
    pub customer: &'a str,
    /// Attempts sent on the wire (0 if the throttle refused the first try).
    pub attempts: u32,
    /// How it ended.
    pub outcome: Outcome,
    /// For [`Outcome::Success`]: time from the intended send time to the complete response.
    pub latency: Option<Duration>,
    /// For successes: the server's reported queue time in ms, if any.
    pub queue_ms: Option<f64>,
    /// For successes: the server's reported service time in ms, if any.
    pub service_ms: Option<f64>,
}

#[derive(Default)]
struct Second {
    counts: Counts,
    by_criticality: [Counts; Criticality::COUNT],
    by_customer: BTreeMap<String, Counts>,
    latency: Option<Histogram<u64>>,
    /// Set by [`Recorder::seal`]: the second's latency percentiles, its histogram dropped.
    sealed: Option<Option<Percentiles>>,
    queue: (f64, u64),
    processing: (f64, u64),
}

/// Builds a [`RunReport`] from [`RequestRecord`]s.
pub struct Recorder {
    title: String,
    meta: BTreeMap<String, serde_json::Value>,
    window: Duration,
    seconds: Vec<Second>,
    total: Histogram<u64>,
    queue: Histogram<u64>,
    processing: Histogram<u64>,
    /// Successes recorded into a second after it was sealed (their latency is in the run's
    /// histogram but not in that second's percentiles).
    late_after_seal: u64,
    /// Latency samples not yet in the histograms (see the module docs).
    pending: Vec<Pending>,
    /// How many samples `pending` holds before it is flushed ([`BATCH`], [`OFFLINE_BATCH`]; 1
    /// in tests that check batching against recording each sample at once).
    batch: usize,
}

fn histogram(sigfig: u8) -> Histogram<u64> {
    // Constant bounds inside hdrhistogram's documented domain (low >= 1, high >= 2 * low,
    // sigfig <= 5): construction cannot fail on any input.
    Histogram::new_with_bounds(1, MAX_LATENCY_US, sigfig).expect("constant histogram bounds")
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

fn ms_to_micros(ms: f64) -> u64 {
    if ms.is_finite() && ms > 0.0 {
        (ms * 1000.0).round().min(MAX_LATENCY_US as f64) as u64
    } else {
        1
    }
    .max(1)
}

/// Percentiles of a histogram of microseconds, in milliseconds; `None` when empty.
pub(crate) fn percentiles(h: &Histogram<u64>) -> Option<Percentiles> {
    if h.is_empty() {
        return None;
    }
    let ms = |us: u64| us as f64 / 1000.0;
    Some(Percentiles {
        count: h.len(),
        min_ms: ms(h.min()),
        mean_ms: h.mean() / 1000.0,
        p50_ms: ms(h.value_at_quantile(0.50)),
        p90_ms: ms(h.value_at_quantile(0.90)),
        p99_ms: ms(h.value_at_quantile(0.99)),
        p999_ms: ms(h.value_at_quantile(0.999)),
        max_ms: ms(h.max()),
    })
}

impl Recorder {
    /// A recorder for a run whose requests are offered during `window` (the per-second rows
    /// cover `ceil(window)` seconds; records offered later extend them).
    pub fn new(title: impl Into<String>, window: Duration) -> Self {
        Self::with_batch(title, window, BATCH)
    }

    /// [`Recorder::new`] for a caller that nothing waits on while it records (the simulator):
    /// larger batches, the same report.
    pub(crate) fn offline(title: impl Into<String>, window: Duration) -> Self {
        Self::with_batch(title, window, OFFLINE_BATCH)
    }

    /// [`Recorder::new`] with latency samples recorded `batch` at a time (at least 1).
    fn with_batch(title: impl Into<String>, window: Duration, batch: usize) -> Self {
        let n = window.as_secs() as usize + usize::from(window.subsec_nanos() > 0);
        let batch = batch.max(1);
        let mut seconds = Vec::new();
        seconds.resize_with(n, Second::default);
        Recorder {
            title: title.into(),
            meta: BTreeMap::new(),
            window,
            seconds,
            total: histogram(RUN_SIGFIG),
            queue: histogram(RUN_SIGFIG),
            processing: histogram(RUN_SIGFIG),
            late_after_seal: 0,
            pending: Vec::new(),
            batch,
        }
    }

    /// Records the buffered latency samples, one histogram at a time (see the module docs).
    fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        for p in &self.pending {
            if p.latency_us != NONE {
                self.total.saturating_record(p.latency_us);
            }
        }
        for p in &self.pending {
            if p.queue_us != NONE {
                self.queue.saturating_record(p.queue_us);
            }
        }
        for p in &self.pending {
            if p.processing_us != NONE {
                self.processing.saturating_record(p.processing_us);
            }
        }
        for p in &self.pending {
            if let Some(second) = self.seconds.get_mut(p.second) {
                second
                    .latency
                    .get_or_insert_with(|| histogram(SECOND_SIGFIG))
                    .saturating_record(p.latency_us);
            }
        }
        self.pending.clear();
    }

    /// Declares second `index` complete: no more records will be offered in it. Its latency
    /// histogram (about 20 KiB) is replaced by its percentiles, so that a long run's memory
    /// follows the seconds still open rather than every second of the run. The report is the
    /// same as without sealing as long as the declaration is true; a success recorded into a
    /// sealed second anyway is counted everywhere but that second's percentiles, and reported
    /// in `meta["late_after_seal"]`.
    pub fn seal(&mut self, index: usize) {
        if self.seconds.get(index).is_some_and(|s| s.sealed.is_none()) {
            self.flush();
        }
        if let Some(second) = self.seconds.get_mut(index) {
            if second.sealed.is_none() {
                second.sealed = Some(second.latency.take().as_ref().and_then(percentiles));
            }
        }
    }

    /// Sets a free-form `meta` entry (see [`RunReport::meta`]).
    pub fn set_meta(&mut self, key: impl Into<String>, value: impl Into<serde_json::Value>) {
        self.meta.insert(key.into(), value.into());
    }

    /// Adds one finished request.
    pub fn record(&mut self, r: &RequestRecord<'_>) {
        let index = usize::try_from(r.offered_at.as_secs()).unwrap_or(usize::MAX);
        // Bound the growth: a record far beyond the window is folded into the last second
        // rather than allocating rows for it (one hour past the window at most).
        let limit = self.seconds.len().max(1) + 3600;
        let index = index.min(limit - 1);
        if index >= self.seconds.len() {
            self.seconds.resize_with(index + 1, Second::default);
        }
        let second = &mut self.seconds[index];
        let mut one = Counts {
            offered: 1,
            sent: u64::from(r.attempts),
            ..Counts::default()
        };
        match r.outcome {
            Outcome::Success => one.goodput = 1,
            Outcome::Rejected => one.rejected = 1,
            Outcome::TimedOut => one.timed_out = 1,
            Outcome::Throttled => one.throttled = 1,
            Outcome::Error => one.errors = 1,
        }
        second.counts.add(&one);
        second.by_criticality[r.criticality.index()].add(&one);
        match second.by_customer.get_mut(r.customer) {
            Some(c) => c.add(&one),
            None => {
                second.by_customer.insert(r.customer.to_owned(), one);
            }
        }
        if r.outcome != Outcome::Success {
            return;
        }
        let mut sample = Pending {
            second: usize::MAX,
            latency_us: NONE,
            queue_us: NONE,
            processing_us: NONE,
        };
        if let Some(latency) = r.latency {
            sample.latency_us = micros(latency);
            if second.sealed.is_some() {
                self.late_after_seal += 1;
            } else {
                sample.second = index;
            }
        }
        if let Some(q) = r.queue_ms.filter(|q| q.is_finite() && *q >= 0.0) {
            sample.queue_us = ms_to_micros(q);
            second.queue.0 += q;
            second.queue.1 += 1;
        }
        if let Some(p) = r.service_ms.filter(|p| p.is_finite() && *p >= 0.0) {
            sample.processing_us = ms_to_micros(p);
            second.processing.0 += p;
            second.processing.1 += 1;
        }
        if sample.latency_us == NONE && sample.queue_us == NONE && sample.processing_us == NONE {
            return;
        }
        if self.pending.capacity() == 0 {
            self.pending.reserve_exact(self.batch.min(OFFLINE_BATCH));
        }
        self.pending.push(sample);
        if self.pending.len() >= self.batch {
            self.flush();
        }
    }

    /// The report: per-second rows, totals and latency percentiles.
    pub fn finish(mut self) -> RunReport {
        self.flush();
        if self.late_after_seal > 0 {
            self.meta
                .insert("late_after_seal".into(), self.late_after_seal.into());
        }
        let mut summary = Summary::default();
        let mut by_criticality = [Counts::default(); Criticality::COUNT];
        let mut rows = Vec::with_capacity(self.seconds.len());
        let mean = |(sum, n): (f64, u64)| (n > 0).then(|| sum / n as f64);
        for (t, s) in self.seconds.into_iter().enumerate() {
            summary.counts.add(&s.counts);
            for (total, c) in by_criticality.iter_mut().zip(&s.by_criticality) {
                total.add(c);
            }
            for (name, c) in &s.by_customer {
                summary.by_customer.entry(name.clone()).or_default().add(c);
            }
            rows.push(SecondStats {
                t: t as u64,
                counts: s.counts,
                by_criticality: criticality_map(&s.by_criticality),
                by_customer: s.by_customer,
                latency: match s.sealed {
                    Some(sealed) => sealed,
                    None => s.latency.as_ref().and_then(percentiles),
                },
                queue_ms_mean: mean(s.queue),
                processing_ms_mean: mean(s.processing),
            });
        }
        summary.by_criticality = criticality_map(&by_criticality);
        let window = self.window.as_secs_f64().max(rows.len() as f64);
        summary.duration_s = window;
        if window > 0.0 {
            summary.offered_rps = summary.counts.offered as f64 / window;
            summary.goodput_rps = summary.counts.goodput as f64 / window;
        }
        if summary.counts.offered > 0 {
            summary.amplification = summary.counts.sent as f64 / summary.counts.offered as f64;
        }
        let latency = percentiles(&self.total).map(|total| LatencySummary {
            total,
            queue: percentiles(&self.queue),
            processing: percentiles(&self.processing),
        });
        RunReport {
            title: self.title,
            meta: self.meta,
            seconds: rows,
            summary,
            latency,
        }
    }
}

fn criticality_map(counts: &[Counts; Criticality::COUNT]) -> BTreeMap<String, Counts> {
    Criticality::ALL
        .iter()
        .zip(counts)
        .filter(|(_, c)| c.offered > 0)
        .map(|(level, c)| (level.as_str().to_owned(), *c))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic mixed run (xorshift64): outcomes, customers, criticalities, latencies
    /// spread over 1 µs – 2 h (past the histograms' range, so saturation is exercised), successes
    /// without a latency or without server times, records offered up to 2 s after the window,
    /// and seconds sealed as the run moves on (with a few late records into sealed seconds).
    fn run(batch: usize) -> String {
        let mut rec = Recorder::with_batch("batched", Duration::from_secs(6), batch);
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let customers = ["a", "b", "c"];
        for i in 0..20_000u64 {
            let r = next();
            let base_ms = i * 8 / 20;
            let at_ms = base_ms.saturating_sub(r % 1_500);
            let outcome = match r % 7 {
                0 => Outcome::Rejected,
                1 => Outcome::TimedOut,
                2 => Outcome::Throttled,
                3 => Outcome::Error,
                _ => Outcome::Success,
            };
            let ok = outcome == Outcome::Success;
            let scale = [1u64, 1_000, 1_000_000, 7_200_000_000][(r >> 8) as usize % 4];
            let latency_us = 1 + (r >> 16) % scale;
            rec.record(&RequestRecord {
                offered_at: Duration::from_millis(at_ms),
                criticality: Criticality::ALL[(r >> 3) as usize % Criticality::COUNT],
                customer: customers[(r >> 5) as usize % customers.len()],
                attempts: (r >> 11) as u32 % 4,
                outcome,
                latency: (ok && r % 13 != 0).then(|| Duration::from_micros(latency_us)),
                queue_ms: (ok && r % 11 != 0).then(|| latency_us as f64 / 3000.0),
                service_ms: (ok && r % 17 != 0).then(|| latency_us as f64 / 1500.0),
            });
            // Seal the second before the current one (records up to 1.5 s old still land in
            // it: late).
            if i % 2_500 == 0 && base_ms >= 1_000 {
                rec.seal(base_ms as usize / 1000 - 1);
            }
        }
        let report = rec.finish();
        serde_json::to_string(&report).expect("a report serializes")
    }

    /// Recording the latencies in batches gives the report of recording each one at once
    /// (batch 1: the recorder before batching), whatever the batch size relative to the seals.
    #[test]
    fn batched_latencies_give_the_report_of_recording_each_at_once() {
        let one_at_a_time = run(1);
        assert!(
            one_at_a_time.contains("late_after_seal"),
            "the run exercises late records"
        );
        for batch in [2, 7, 1000, BATCH, OFFLINE_BATCH, 50_000] {
            assert_eq!(run(batch), one_at_a_time, "batch of {batch}");
        }
    }

    /// A sealed second's percentiles include the samples still buffered when it is sealed.
    #[test]
    fn sealing_records_the_buffered_samples_first() {
        let mut rec = Recorder::with_batch("seal", Duration::from_secs(2), 1000);
        for ms in 1..=10u64 {
            rec.record(&RequestRecord {
                offered_at: Duration::from_millis(ms),
                criticality: Criticality::Critical,
                customer: "a",
                attempts: 1,
                outcome: Outcome::Success,
                latency: Some(Duration::from_millis(ms)),
                queue_ms: None,
                service_ms: None,
            });
        }
        rec.seal(0);
        let report = rec.finish();
        let second = report.seconds[0].latency.expect("second 0 had successes");
        assert_eq!(second.count, 10);
        assert!(!report.meta.contains_key("late_after_seal"));
        assert_eq!(report.latency.expect("successes").total.count, 10);
    }
}
