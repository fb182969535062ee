//! What a gateway's per-request upstream choices cost as its pool grows: the power-of-two
//! pick and the ORCA signal the admission controller reads, at 1 to 1,024 tasks.
//!
//! Run: `cargo bench -p spillway-proxy --bench gateway`. No connection is opened (the pool
//! connects lazily); every task has a fresh ORCA report, as under load. The real clock is read
//! per call, as on the request path.

use std::sync::Arc;
use std::time::Instant;

use divan::{black_box, Bencher};
use spillway_proxy::config::{SignalsConfig, UpstreamConfig};
use spillway_proxy::upstream::{Pool, Tried};

fn main() {
    divan::main();
}

const TASKS: [usize; 4] = [1, 16, 256, 1024];

fn pool(n: usize) -> Arc<Pool> {
    let cfg = UpstreamConfig {
        addresses: (0..n)
            .map(|i| format!("127.0.0.1:{}", 20_000 + i))
            .collect(),
        ..UpstreamConfig::default()
    };
    let p = Arc::new(Pool::new(&cfg, &SignalsConfig::default()).expect("a valid pool"));
    let now = Instant::now();
    for (i, t) in p.tasks().iter().enumerate() {
        p.record_orca(t, (i % 10) as f64 / 10.0, now);
    }
    p
}

/// A first attempt's pick: two tasks drawn, the less loaded taken.
#[divan::bench(args = TASKS)]
fn pick(bencher: Bencher, n: usize) {
    let p = pool(n);
    let tried = Tried::default();
    bencher.bench(|| black_box(p.pick(&tried, Instant::now())));
}

/// The ORCA signal's reading, once per admission decision.
#[divan::bench(args = TASKS)]
fn orca_signal(bencher: Bencher, n: usize) {
    let p = pool(n);
    let s = p.orca_signal();
    bencher.bench(|| black_box(s.utilisation(Instant::now())));
}

/// An overload refusal and then a success recorded for one task (a refusal counts as a
/// failure for balancing and ejection).
#[divan::bench(args = TASKS)]
fn refusal_recorded(bencher: Bencher, n: usize) {
    let p = pool(n);
    let t = Arc::clone(&p.tasks()[0]);
    bencher.bench(|| {
        p.record_failure(&t, Instant::now());
        p.record_success(&t);
    });
}
