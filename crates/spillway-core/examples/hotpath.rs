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
//! the set-up. Kinds: `throttle`, `admit`, `quota`.

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
fn run_throttle(n: u64) -> u64 {
    let t = AdaptiveThrottle::new(ThrottleConfig::default(), Instant::now()).expect("valid");
    let mut sent = 0;
    for _ in 0..n {
        let now = Instant::now();
        if t.try_acquire(now).is_ok() {
            t.record_accept(now);
            sent += 1;
        }
    }
    sent
}

#[inline(never)]
fn run_admit(n: u64) -> u64 {
    let c =
        AdmissionController::new(AdmissionConfig::default(), Arc::new(SystemClock)).expect("valid");
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
fn run_quota(n: u64) -> u64 {
    let cfg = QuotaConfig {
        enforcement: QuotaEnforcement::Always,
        ..QuotaConfig::default()
    }
    .with_customer("alice", CustomerQuota::uniform(1e12));
    let q = QuotaBook::new(cfg, Instant::now()).expect("valid");
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

fn main() {
    let mut args = std::env::args().skip(1);
    let kind = args.next().unwrap_or_default();
    let n = match args.next().map(|s| s.parse::<u64>()) {
        None => 100_000,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("hotpath: N must be a whole number ({e})");
            std::process::exit(2);
        }
    };
    let done = match kind.as_str() {
        "throttle" => run_throttle(n),
        "admit" => run_admit(n),
        "quota" => run_quota(n),
        _ => {
            eprintln!("usage: hotpath throttle|admit|quota [N (default 100000)]");
            std::process::exit(2);
        }
    };
    println!("{kind}: {done} of {n} went through");
}
