//! Cost of Spillway's per-request decisions, in nanoseconds.
//!
//! Run: `cargo bench -p spillway-core --bench decisions`. Figures go into BENCHMARKS.md as
//! measured side by side in one run. Every benchmark uses the real system clock, because reading
//! the clock is part of what a decision costs on the hot path.

use std::sync::Arc;
use std::time::Instant;

use divan::{black_box, Bencher};
use spillway_core::controller::{
    Admission, AdmissionConfig, AdmissionController, AdmissionRequest,
};
use spillway_core::quota::{CustomerQuota, QuotaBook, QuotaConfig, QuotaEnforcement};
use spillway_core::throttle::{AdaptiveThrottle, ThrottleConfig};
use spillway_core::{Criticality, SystemClock};

fn main() {
    divan::main();
}

/// One client-side throttle decision: count the request, draw against P, count the accept and
/// settle it.
#[divan::bench(threads = [1, 2])]
fn throttle_decision(bencher: Bencher) {
    let t = AdaptiveThrottle::new(ThrottleConfig::default(), Instant::now()).expect("valid");
    bencher.bench(|| {
        let now = Instant::now();
        if t.try_acquire(now).is_ok() {
            t.record_accept(now);
            t.settle();
        }
    });
}

/// Admission of one request and release of its permit (Gradient2 default limit, no queueing).
///
/// The sample size is fixed: divan tunes it from the slowest early sample, and each thread's
/// first admit (thread-local RNG set-up, the limit algorithm's first sample) took over 100× the
/// 20 ns timer precision, which froze it at 1 iteration per sample — medians then measured the
/// timer and, at t=2, the threads' start-of-sample barrier rather than the decision.
#[divan::bench(threads = [1, 2], sample_size = 1000)]
fn admit_release(bencher: Bencher) {
    let c =
        AdmissionController::new(AdmissionConfig::default(), Arc::new(SystemClock)).expect("valid");
    let req = AdmissionRequest::new("checkout", Criticality::Critical);
    bencher.bench(|| match c.admit(black_box(&req)) {
        Admission::Admitted(p) => drop(black_box(p)),
        other => drop(other),
    });
}

/// Charging one request's estimate to a customer's quota, enforced, and settling its actual cost.
#[divan::bench(threads = [1, 2])]
fn quota_charge_settle(bencher: Bencher) {
    let cfg = QuotaConfig {
        enforcement: QuotaEnforcement::Always,
        ..QuotaConfig::default()
    }
    .with_customer("alice", CustomerQuota::uniform(1e12));
    let q = QuotaBook::new(cfg, Instant::now()).expect("valid");
    bencher.bench(|| {
        let now = Instant::now();
        if let Ok(charge) =
            q.try_charge(now, black_box("alice"), Criticality::Critical, 0.001, true)
        {
            q.settle(now, charge, 0.0012);
        }
    });
}
