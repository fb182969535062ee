//! A fleet simulated in shards (`shards = N`): the same fleet, with each shard's own random
//! streams — so the same statistics, every request accounted for, the scenarios' conclusions
//! unchanged, and a run that repeats exactly whatever the threads' timing.

use spillway_sim::report::RunReport;
use spillway_sim::{builtin, run_one, run_scenario, Scenario, SimRun};

/// 40 tasks of 4 workers at 10 ms (16,000 requests/s), offered half of that by 40 client
/// instances through the whole protected path, 0.5 ms each way.
fn fleet(shards: u32) -> Scenario {
    let text = format!(
        r#"
name = "fleet"
seed = 3
duration_s = 10
shards = {shards}

[[client]]
name = "users"
instances = 40
timeout_ms = 500
load = {{ shape = "constant", rps = 8000 }}

[[layer]]
name = "service"
tasks = 40
workers = 4
service = {{ dist = "exp", mean_ms = 10 }}
network_ms = 0.5
"#
    );
    Scenario::from_toml(&text, "shards test").expect("valid")
}

fn one(sc: &Scenario) -> SimRun {
    run_one(sc, &sc.name).expect("runs")
}

fn p50(r: &RunReport) -> f64 {
    r.latency.as_ref().map_or(f64::NAN, |l| l.total.p50_ms)
}

#[test]
fn shards_simulate_the_same_fleet() {
    let whole = one(&fleet(1));
    for n in [2, 3] {
        let part = one(&fleet(n));
        let (w, p) = (&whole.report.summary.counts, &part.report.summary.counts);
        println!(
            "{n} shards: offered {} vs {}, goodput {} vs {}, p50 {:.2} vs {:.2} ms, mean wait \
             {:?} vs {:?}",
            p.offered,
            w.offered,
            p.goodput,
            w.goodput,
            p50(&part.report),
            p50(&whole.report),
            part.layers[0].mean_wait_ms,
            whole.layers[0].mean_wait_ms
        );
        // 80,000 requests: the Poisson count's spread is 0.35%.
        let near = |a: u64, b: u64, tol: f64| (a as f64 / b as f64 - 1.0).abs() < tol;
        assert!(near(p.offered, w.offered, 0.015), "{p:?} vs {w:?}");
        assert!(near(p.goodput, w.goodput, 0.015), "{p:?} vs {w:?}");
        assert!((p50(&part.report) / p50(&whole.report) - 1.0).abs() < 0.05);
        // Every request offered in any shard reached the one report, and ended one way.
        assert_eq!(p.offered, part.offered);
        assert!(p.is_balanced(), "{p:?}");
        assert!(!part.report.meta.contains_key("late_after_seal"));
        // Every attempt arrived at some shard's task, and was counted once.
        assert_eq!(part.layers[0].arrivals, part.attempts);
        assert_eq!(part.report.seconds.len(), whole.report.seconds.len());
    }
}

#[test]
fn a_sharded_run_repeats_exactly() {
    for n in [2, 3] {
        let mut sc = fleet(n);
        sc.duration_s = 2.0;
        let json = || serde_json::to_string(&one(&sc).report).expect("serialises");
        assert_eq!(json(), json(), "{n} shards");
    }
    let mut a = fleet(2);
    a.duration_s = 2.0;
    let mut b = a.clone();
    b.shards = 3;
    assert_ne!(
        serde_json::to_string(&one(&a).report).expect("serialises"),
        serde_json::to_string(&one(&b).report).expect("serialises"),
        "each shard draws its own streams: the shard count is part of the scenario"
    );
}

fn variant<'a>(runs: &'a [SimRun], name: &str) -> &'a SimRun {
    runs.iter()
        .find(|r| r.report.title == name)
        .unwrap_or_else(|| panic!("variant {name}"))
}

/// A shipped scenario with 0.5 ms each way, in two shards.
fn shipped_in_shards(name: &str) -> Scenario {
    let mut sc = builtin::scenario(name).expect("shipped").expect("valid");
    sc.layers.iter_mut().for_each(|l| l.network_ms = 0.5);
    sc.shards = 2;
    sc.validate().expect("valid in shards");
    sc
}

#[test]
fn retry_amplification_in_shards_27x_naive_at_most_1_2x_gated() {
    // Three layers of two tasks: calls cross between the shards at every layer.
    let mut sc = shipped_in_shards("retry-amplification");
    sc.duration_s = 3.0;
    let runs = run_scenario(&sc).expect("runs");
    let bottom = |name: &str| {
        let r = variant(&runs, name);
        r.layers.last().expect("layers").amplification
    };
    println!(
        "naive {:.2}x, gated {:.3}x",
        bottom("naive"),
        bottom("gated")
    );
    assert!(
        (24.0..=27.0).contains(&bottom("naive")),
        "{}",
        bottom("naive")
    );
    assert!(
        (1.0..=1.2).contains(&bottom("gated")),
        "{}",
        bottom("gated")
    );
}

#[test]
fn metastable_in_shards_unprotected_stays_collapsed_protected_recovers() {
    let sc = shipped_in_shards("metastable").scaled(0.5);
    let runs = run_scenario(&sc).expect("runs");
    let after = |name: &str| {
        let r = variant(&runs, name);
        let mut c = spillway_sim::report::Counts::default();
        for s in r.report.seconds.iter().filter(|s| s.t >= 40 && s.t < 90) {
            c.add(&s.counts);
        }
        c.success_ratio().expect("offered")
    };
    println!(
        "success from 10 s after the trigger: unprotected {:.3}, protected {:.3}",
        after("unprotected"),
        after("protected")
    );
    assert!(after("unprotected") < 0.05);
    assert!(after("protected") > 0.99);
}
