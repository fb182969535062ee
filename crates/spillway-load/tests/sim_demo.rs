//! `spillway demo`'s scenario in the simulator, summarised with the demo's own table
//! (`spillway_load::demo::summarise`), so the simulated columns can be put next to a measured
//! `spillway demo` run. The measured side needs real traffic and wall-clock time, so it is not
//! asserted here (no timing in unit tests); this checks the simulated side's shape.

use spillway_load::demo::{render_table, summarise, DemoConfig};
use spillway_load::sim::{builtin, run_scenario};

#[test]
fn simulated_demo_plateaus_near_capacity_when_protected_and_collapses_when_not() {
    let sc = builtin::scenario("demo").expect("shipped").expect("valid");
    let cfg = DemoConfig::full();
    let runs = run_scenario(&sc).expect("runs");
    let rows: Vec<_> = runs.iter().map(|r| summarise(&cfg, &r.report)).collect();
    println!("{}", render_table(&rows));
    let row = |name: &str| rows.iter().find(|r| r.title == name).expect("variant");
    let ramp_min = |name: &str, from: usize| {
        // LEVELS are 0.5x, 1x, 2x, 5x, 10x of the ramp.
        row(name).goodput_at[from..]
            .iter()
            .map(|g| g.expect("second exists"))
            .fold(f64::INFINITY, f64::min)
    };
    // Unprotected: collapsed from 5x on (its 2x second still drains within the timeout).
    assert!(
        ramp_min("unprotected", 3) < 0.05,
        "{}",
        ramp_min("unprotected", 3)
    );
    // Protected: a plateau at capacity from 2x to 10x, and through the jump.
    assert!(
        ramp_min("spillway", 2) > 0.85,
        "{}",
        ramp_min("spillway", 2)
    );
    assert!(row("spillway").jump_goodput.expect("jump") > 0.85);
    // CRITICAL is not fully kept with the zero-config Gradient2 limit: it lets the backend's own
    // FIFO fill behind the admitted SHEDDABLE work (as the measured demo shows too); recorded,
    // not asserted.
    println!(
        "simulated CRITICAL success: spillway {:?}, spillway+throttle {:?}",
        row("spillway").critical_success,
        row("spillway+throttle").critical_success
    );
}
