//! The simulator agrees with queueing theory where theory has an answer: an M/M/c queue with no
//! shedding (Poisson arrivals, exponential service, FIFO, unbounded) has the Erlang C mean wait
//! `spillway calc` prints (`spillway_core::erlang`). The queue here is the core's own admission
//! queue behind a fixed limit of c, so this also checks the simulator's plumbing around it.

use spillway_core::erlang::MmcQueue;
use spillway_sim::{builtin, run_one, Scenario};

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

/// Replications per check: independent runs on seeds `1..=REPLICATIONS`.
const REPLICATIONS: u64 = 6;

/// The simulated mean wait, seconds, of each replication (run two at a time).
fn replications(c: u32, requests: f64) -> Vec<f64> {
    let waits = std::sync::Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicU64::new(1);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let seed = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if seed > REPLICATIONS {
                    break;
                }
                let run = run_one(&mmc(c, requests, seed), "mmc").expect("runs");
                // Nothing is refused or lost: it is a plain M/M/c queue.
                assert_eq!(run.report.summary.counts.goodput, run.offered);
                let wait = run.layers[0].mean_wait_ms.expect("requests waited") / 1e3;
                waits
                    .lock()
                    .expect("no panic while held")
                    .push((seed, wait));
            });
        }
    });
    let mut waits = waits.into_inner().expect("no panic while held");
    waits.sort_by_key(|(seed, _)| *seed);
    waits.into_iter().map(|(_, w)| w).collect()
}

/// The mean wait over [`REPLICATIONS`] independent runs of `requests` arrivals each must be
/// within 5% of Erlang C. Why replications: the mean wait of one run is autocorrelated through
/// busy periods, so its noise is hard to bound from inside the run; independent runs give an
/// honest standard error (sample standard deviation / √K). The run lengths are chosen so that
/// the standard error is about 1% of the theory or less (measured: see each test), which puts
/// 5% at about 5 standard errors: a correct simulator misses it by chance with probability
/// ~10⁻⁶ whatever the seeds. The check also requires the *estimated* standard error to be at
/// most 2% (5% ≥ 2.5 standard errors; with 5 degrees of freedom a true 1% reads above 2% with
/// probability ~10⁻³), so a change that makes the estimate noisier fails loudly instead of
/// passing by luck.
fn check(c: u32, requests: f64) {
    let service = mmc(c, 1e4, 1).layers[0].service.mean_ms() / 1e3;
    let theory = MmcQueue::at_utilisation(c, service, 0.8)
        .expect("stable")
        .mean_wait_secs();
    let waits = replications(c, requests);
    let k = waits.len() as f64;
    let mean = waits.iter().sum::<f64>() / k;
    let var = waits.iter().map(|w| (w - mean).powi(2)).sum::<f64>() / (k - 1.0);
    let se = (var / k).sqrt();
    let err = (mean - theory).abs() / theory;
    // Student's t, 5 degrees of freedom, two-sided 95%: 2.571.
    println!(
        "M/M/{c} at 0.8: simulated mean wait {:.4} ms ± {:.4} (95% CI, {} runs × {requests} requests), \
         Erlang C {:.4} ms ({:.2}% apart, standard error {:.2}%); runs: {:?}",
        mean * 1e3,
        2.571 * se * 1e3,
        waits.len(),
        theory * 1e3,
        err * 100.0,
        se / theory * 100.0,
        waits.iter().map(|w| format!("{:.4}", w * 1e3)).collect::<Vec<_>>(),
    );
    assert!(
        se / theory <= 0.02,
        "M/M/{c}: standard error {:.2}% of the theory: too noisy to check 5%",
        se / theory * 100.0
    );
    assert!(err < 0.05, "M/M/{c}: {mean} s vs {theory} s");
}

// One run of 300,000 requests: standard error about 1.5%; six give about 0.6%.
#[test]
fn mm4_mean_wait_matches_erlang_c_within_5_percent() {
    check(4, 300_000.0);
}

// With 40 workers at 0.8 only ~15 % of requests wait at all, so the mean wait is noisy: one
// run of 2 million requests has a standard error of about 2.4% (12 seeds, release build), so
// six of them give about 1%.
#[test]
fn mm40_mean_wait_matches_erlang_c_within_5_percent() {
    check(40, 2_000_000.0);
}
