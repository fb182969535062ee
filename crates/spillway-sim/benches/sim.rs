//! Simulator speed: simulated requests per wall-clock second, through the full protected path
//! (client throttle, retry gates, `AdmissionController`, permits) on fleets of 100 and 10,000
//! tasks (as many client instances), 10,000 tasks with 1,000,000 client instances, and the
//! plain M/M/40 queue. Divan reports the time of one run, building the fleet included (about
//! 2.6 s of the million-client run: each client has its own throttle and retry budget); with
//! the item counter it also reports requests per second.
//!
//! Run: `cargo bench -p spillway-sim --bench sim`.

use divan::counter::ItemsCount;
use divan::Bencher;
use spillway_sim::{builtin, run_one, Scenario};

fn main() {
    divan::main();
}

/// The shipped `fleet` scenario resized to `tasks` tasks and client instances at 20 requests/s
/// per task (half of capacity), for `requests` requests.
fn fleet(tasks: u32, requests: f64) -> Scenario {
    let mut sc = builtin::scenario("fleet").expect("shipped").expect("valid");
    let factor = f64::from(tasks) / f64::from(sc.layers[0].tasks);
    sc = sc.scaled(factor);
    let rate = sc.clients[0].load.rate_at(0.0);
    sc.duration_s = requests / rate;
    sc
}

fn bench(b: Bencher, sc: Scenario, requests: u64) {
    b.counter(ItemsCount::new(requests)).bench(|| {
        run_one(divan::black_box(&sc), "bench")
            .expect("runs")
            .offered
    });
}

#[divan::bench(sample_count = 5, sample_size = 1)]
fn fleet_100_tasks_protected(b: Bencher) {
    bench(b, fleet(100, 1e6), 1_000_000);
}

#[divan::bench(sample_count = 3, sample_size = 1)]
fn fleet_10k_tasks_protected(b: Bencher) {
    bench(b, fleet(10_000, 1e6), 1_000_000);
}

#[divan::bench(sample_count = 2, sample_size = 1)]
fn fleet_10k_tasks_1m_clients_protected(b: Bencher) {
    let mut sc = builtin::scenario("fleet-million-clients")
        .expect("shipped")
        .expect("valid");
    let rate = sc.clients[0].load.rate_at(0.0);
    sc.duration_s = 4e6 / rate;
    bench(b, sc, 4_000_000);
}

#[divan::bench(sample_count = 5, sample_size = 1)]
fn mm40_queue(b: Bencher) {
    let mut sc = builtin::scenario("mmc").expect("shipped").expect("valid");
    sc.duration_s = 1e6 / 3200.0;
    bench(b, sc, 1_000_000);
}
