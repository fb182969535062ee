//! `spillway demo`'s scenario in the simulator — built from the demo's own `DemoConfig`
//! (`spillway_load::demo::simulated`), summarised with the demo's own table
//! (`spillway_load::demo::summarise`) — has the demo's shape: the unprotected backend collapses
//! under the staircase to 10×, the protected one holds a plateau near capacity. The measured
//! comparison is `sim_demo_measured.rs`.

use spillway_load::demo::simulated as demo;
use spillway_load::demo::{render_table, summarise, DemoConfig, Mode};
use spillway_sim::run_one;

#[test]
fn simulated_demo_plateaus_near_capacity_when_protected_and_collapses_when_not() {
    let cfg = DemoConfig::full();
    let run = |mode: Mode| {
        let sc = demo::scenario(&cfg, mode).expect("simulates");
        let mut report = run_one(&sc, mode.title()).expect("runs").report;
        report.title = mode.title().into();
        report
    };
    let (unprotected, protected) = (run(Mode::Unprotected), run(Mode::Spillway));
    let rows = [summarise(&cfg, &unprotected), summarise(&cfg, &protected)];
    println!("{}", render_table(&rows));
    let plateau = |r| demo::plateau(&cfg, r).expect("plateau seconds");
    let (u, p) = (plateau(&unprotected), plateau(&protected));
    println!("goodput plateau x capacity: unprotected {u:.3}, spillway {p:.3}");
    assert!(u < 0.2, "unprotected plateau {u}");
    assert!(p > 0.85, "protected plateau {p}");
    // Fixed seed, byte-identical JSON, with the proxy's admission (its limit's jitter seeded).
    let again = run(Mode::Spillway);
    assert_eq!(
        serde_json::to_string(&protected).expect("json"),
        serde_json::to_string(&again).expect("json")
    );
    // The throttling-clients mode is refused with a reason, not simulated wrongly.
    let err = demo::scenario(&cfg, Mode::SpillwayThrottled).expect_err("not simulated");
    assert!(
        err.contains("spillway+throttle") && err.contains("accepted"),
        "{err}"
    );
}
