//! A driver for profiling one kind of hot-path decision under `valgrind --tool=callgrind`.
//!
//! Why: the machine the benchmarks run on is shared and noisy, so nanosecond medians move from
//! run to run; instruction counts do not. This runs `N` decisions of one kind, exactly as the
//! matching benchmark in `benches/decisions.rs` does, so that
//!
//! ```text
//! cargo build --release -p spillway-core --example hotpath
//! valgrind --tool=callgrind --callgrind-out-file=cg.out target/release/examples/hotpath throttle 100000
//! callgrind_annotate cg.out
//! ```
//!
//! attributes the cost. Instructions per decision = (Ir at 2N − Ir at N) / N, which cancels
//! the set-up. Kinds: `throttle`, `admit`, `quota`. An optional third argument runs that many
//! threads on one shared instance (as divan's `t=2`), each doing `N` decisions; the wall time per
//! decision and thread is printed (a rough figure on a shared machine; not for callgrind).

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use spillway_core::controller::{
    Admission, AdmissionConfig, AdmissionController, AdmissionRequest,
};
use spillway_core::quota::{CustomerQuota, QuotaBook, QuotaConfig, QuotaEnforcement};
use spillway_core::throttle::{AdaptiveThrottle, ThrottleConfig};
use spillway_core::{Criticality, SystemClock};

#[inline(never)]
fn run_throttle(t: &AdaptiveThrottle, n: u64) -> u64 {
    let mut sent = 0;
    for _ in 0..n {
        let now = Instant::now();
        if t.try_acquire(now).is_ok() {
            t.record_accept(now);
            t.settle();
            sent += 1;
        }
    }
    sent
}

#[inline(never)]
fn run_admit(c: &AdmissionController, n: u64) -> u64 {
    let req = AdmissionRequest::new("checkout", Criticality::Critical);
    let mut admitted = 0;
    for _ in 0..n {
        match c.admit(black_box(&req)) {
            Admission::Admitted(p) => {
                drop(black_box(p));
                admitted += 1;
            }
            other => drop(other),
        }
    }
    admitted
}

#[inline(never)]
fn run_quota(q: &QuotaBook, n: u64) -> u64 {
    let mut charged = 0;
    for _ in 0..n {
        let now = Instant::now();
        if let Ok(charge) =
            q.try_charge(now, black_box("alice"), Criticality::Critical, 0.001, true)
        {
            q.settle(now, charge, 0.0012);
            charged += 1;
        }
    }
    charged
}

/// Runs `run(n)` on `threads` threads at once; returns the decisions that went through and
/// the wall time per decision per thread.
fn on_threads(threads: usize, n: u64, run: impl Fn(u64) -> u64 + Sync) -> (u64, f64) {
    let start = Instant::now();
    let done = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads).map(|_| s.spawn(|| run(n))).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("driver thread panicked"))
            .sum()
    });
    (done, start.elapsed().as_nanos() as f64 / n as f64)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let kind = args.next().unwrap_or_default();
    let mut number = |default: u64| match args.next().map(|s| s.parse::<u64>()) {
        None => default,
        Some(Ok(n)) if n > 0 => n,
        _ => {
            eprintln!("hotpath: N and THREADS must be whole numbers > 0");
            std::process::exit(2);
        }
    };
    let n = number(100_000);
    let threads = number(1) as usize;
    let (done, ns) = match kind.as_str() {
        "throttle" => {
            let t =
                AdaptiveThrottle::new(ThrottleConfig::default(), Instant::now()).expect("valid");
            on_threads(threads, n, |n| run_throttle(&t, n))
        }
        "admit" => {
            let c = AdmissionController::new(AdmissionConfig::default(), Arc::new(SystemClock))
                .expect("valid");
            on_threads(threads, n, |n| run_admit(&c, n))
        }
        "quota" => {
            let cfg = QuotaConfig {
                enforcement: QuotaEnforcement::Always,
                ..QuotaConfig::default()
            }
            .with_customer("alice", CustomerQuota::uniform(1e12));
            let q = QuotaBook::new(cfg, Instant::now()).expect("valid");
            on_threads(threads, n, |n| run_quota(&q, n))
        }
        _ => {
            eprintln!(
                "usage: hotpath throttle|admit|quota [N (default 100000)] [THREADS (default 1)]"
            );
            std::process::exit(2);
        }
    };
    println!(
        "{kind}: {done} of {} went through; {ns:.1} ns per decision per thread",
        n * threads as u64
    );
}
