//! What a parallel simulator's synchronisation would cost on this machine: the 10⁴-task fleet
//! alone, two half fleets (5,000 tasks each) free-running on two threads, and the same two in
//! lockstep windows of simulated time, as a sharded engine would run them
//! (bench/results/sim-speed.md, "Lockstep windows, measured").
//!
//!   flock /work/measure.lock cargo run --release -p spillway-sim --example sim_lockstep [ROUNDS]

use std::time::Duration;

use spillway_sim::builtin;
use spillway_sim::lockstep::lockstep;

fn main() {
    let rounds: u32 = match std::env::args().nth(1).map(|a| a.parse()) {
        None => 2,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("usage: sim_lockstep [ROUNDS] (a positive integer; default 2)");
            std::process::exit(2);
        }
    };
    let whole = match builtin::scenario("fleet") {
        Some(Ok(sc)) => sc,
        _ => {
            eprintln!("the shipped scenario `fleet` did not load");
            std::process::exit(1);
        }
    };
    let half = whole.scaled(0.5);
    let window = |us| Some(Duration::from_micros(us));
    let runs = [
        ("whole fleet alone", &whole, 1, None),
        ("two halves, free-running", &half, 2, None),
        ("two halves, 1 ms windows", &half, 2, window(1000)),
        ("two halves, 0.5 ms windows", &half, 2, window(500)),
        ("two halves, 0.1 ms windows", &half, 2, window(100)),
    ];
    for round in 1..=rounds {
        for (label, sc, copies, window) in runs {
            match lockstep(sc, copies, window) {
                Ok(r) => println!(
                    "round {round}: {label:<28} {:>7.2} s  {:>5.3} M requests/s  ({} requests, {} windows)",
                    r.wall.as_secs_f64(),
                    r.requests as f64 / r.wall.as_secs_f64() / 1e6,
                    r.requests,
                    r.windows
                ),
                Err(e) => {
                    eprintln!("{label}: {e}");
                    std::process::exit(1);
                }
            }
        }
    }
}
