//! The simulator agrees with queueing theory where theory has an answer: an M/M/c queue with no
//! shedding (Poisson arrivals, exponential service, FIFO, unbounded) has the Erlang C mean wait
//! `spillway calc` prints (`spillway_core::erlang`). The queue here is the core's own admission
//! queue behind a fixed limit of c, so this also checks the simulator's plumbing around it.

use spillway_core::erlang::MmcQueue;
use spillway_load::sim::{builtin, run_one, Scenario};

/// The shipped `mmc` scenario with `c` workers at utilisation 0.8, for `requests` arrivals.
fn mmc(c: u32, requests: f64, seed: u64) -> Scenario {
    let shipped = builtin::scenario("mmc").expect("shipped").expect("valid");
    let service_ms = shipped.layers[0].service.mean_ms();
    let rate = 0.8 * f64::from(c) / (service_ms / 1e3);
    let text = format!(
        r#"
name = "mmc-{c}"
seed = {seed}
duration_s = {duration}

[[client]]
name = "poisson"
timeout_ms = 3600000
retry = "none"
load = {{ shape = "constant", rps = {rate} }}

[[layer]]
name = "queue"
workers = {c}
service = {{ dist = "exp", mean_ms = {service_ms} }}

[layer.admission]
limit = {{ algorithm = "fixed", limit = {c} }}
queue = {{ max_len = 16000000, max_wait_ms = 3600000, discipline = {{ discipline = "fifo" }} }}
shed_thresholds = []
headroom = [1.0, 1.0, 1.0, 1.0]
"#,
        duration = requests / rate,
    );
    Scenario::from_toml(&text, "mmc test").expect("valid")
}

fn check(c: u32, requests: f64) {
    let sc = mmc(c, requests, 11);
    let run = run_one(&sc, "mmc").expect("runs");
    let simulated = run.layers[0].mean_wait_ms.expect("requests waited") / 1e3;
    let service = sc.layers[0].service.mean_ms() / 1e3;
    let theory = MmcQueue::at_utilisation(c, service, 0.8)
        .expect("stable")
        .mean_wait_secs();
    let err = (simulated - theory).abs() / theory;
    println!(
        "M/M/{c} at 0.8: simulated mean wait {:.4} ms over {} requests, Erlang C {:.4} ms ({:.1}% apart)",
        simulated * 1e3,
        run.offered,
        theory * 1e3,
        err * 100.0
    );
    // Nothing is refused or lost: it is a plain M/M/c queue.
    assert_eq!(run.report.summary.counts.goodput, run.offered);
    assert!(err < 0.05, "M/M/{c}: {simulated} s vs {theory} s");
}

#[test]
fn mm4_mean_wait_matches_erlang_c_within_5_percent() {
    check(4, 300_000.0);
}

// With 40 workers at 0.8 only ~15 % of requests wait at all, so the mean wait is noisy: over
// 2 million requests its standard error is about 3 % (measured over seeds in release builds).
#[test]
fn mm40_mean_wait_matches_erlang_c_within_5_percent() {
    check(40, 2_000_000.0);
}
