//! The simulator agrees with the real thing where both can run: `spillway demo --quick`'s
//! protected run — the real backend behind the real proxy in its zero-config form, driven by the
//! real load generator on loopback for 15 s — against the same scenario simulated
//! (`spillway_load::demo::simulated`, built from the same `DemoConfig`). Their goodput plateaus,
//! over the seconds offered 2× capacity and more, must be within 10% of each other.
//!
//! Not a timing test: the backend's capacity is set by its sleeping workers, not by this
//! machine's speed, and the plateau is a count of requests served. The load (at most 500
//! requests/s through the proxy) is light even for a shared 2-core machine. About 20 s.

use spillway_load::demo::simulated as demo;
use spillway_load::demo::{run_mode, DemoConfig, Mode};
use spillway_sim::run_one;

#[test]
fn simulated_demo_plateau_is_within_10_percent_of_the_measured_one() {
    let mut cfg = DemoConfig::quick();
    cfg.dashboard = None;
    let sc = demo::scenario(&cfg, Mode::Spillway).expect("the demo's scenario simulates");
    let simulated = run_one(&sc, "spillway").expect("runs");
    let sim = demo::plateau(&cfg, &simulated.report).expect("plateau seconds simulated");

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let measured = runtime
        .block_on(run_mode(&cfg, Mode::Spillway, false))
        .expect("the demo runs on loopback");
    let real = demo::plateau(&cfg, &measured).expect("plateau seconds measured");

    let apart = (sim - real).abs() / real;
    println!(
        "goodput plateau over seconds {:?} (x capacity {}/s): simulated {:.3}, measured {:.3} \
         ({:.1}% apart)",
        demo::plateau_seconds(&cfg),
        cfg.capacity(),
        sim,
        real,
        apart * 100.0
    );
    assert!(apart <= 0.10, "simulated {sim:.3} vs measured {real:.3}");
}
