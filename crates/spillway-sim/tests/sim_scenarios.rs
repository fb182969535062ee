//! The shipped scenarios' conclusions, on fixed seeds (SRE book ch. 21 and 22; AWS Builders'
//! Library, "Using load shedding to avoid overload"). Scenarios are shortened or scaled down so
//! each test runs in a few seconds in a debug build; the shapes of the results are the same.

use spillway_sim::report::{Counts, RunReport};
use spillway_sim::{builtin, run_scenario, Scenario, SimRun};

fn shipped(name: &str) -> Scenario {
    builtin::scenario(name)
        .expect("shipped scenario")
        .expect("valid scenario")
}

fn run(sc: &Scenario) -> Vec<SimRun> {
    let runs = run_scenario(sc).expect("scenario runs");
    for r in &runs {
        // Every offered request ended exactly one way.
        assert!(r.report.summary.counts.is_balanced(), "{}", r.report.title);
        // The engine seals a second only once no request offered in it is open: no success
        // may land in a sealed second (the report is then the same as without sealing).
        assert!(
            !r.report.meta.contains_key("late_after_seal"),
            "{}: {:?}",
            r.report.title,
            r.report.meta.get("late_after_seal")
        );
        assert!(
            r.report.seconds.iter().any(|s| s.latency.is_some()),
            "{}: per-second latency kept through sealing",
            r.report.title
        );
    }
    runs
}

fn variant<'a>(runs: &'a [SimRun], name: &str) -> &'a SimRun {
    runs.iter()
        .find(|r| r.report.title == name)
        .unwrap_or_else(|| panic!("variant {name}"))
}

/// Counts of the requests offered in seconds `[from, to)`, optionally of one criticality or
/// customer.
fn window(
    r: &RunReport,
    from: u64,
    to: u64,
    pick: impl Fn(&spillway_sim::report::SecondStats) -> Option<Counts>,
) -> Counts {
    let mut c = Counts::default();
    for s in r.seconds.iter().filter(|s| s.t >= from && s.t < to) {
        if let Some(x) = pick(s) {
            c.add(&x);
        }
    }
    c
}

fn success(c: &Counts) -> f64 {
    c.success_ratio().expect("requests offered")
}

#[test]
fn retry_amplification_27x_naive_vs_at_most_1_2x_gated() {
    let mut sc = shipped("retry-amplification");
    sc.duration_s = 3.0;
    let runs = run(&sc);
    let naive = variant(&runs, "naive");
    let gated = variant(&runs, "gated");
    let bottom = |r: &SimRun| r.layers.last().expect("layers").amplification;
    println!(
        "bottom amplification: naive {:.2}x, gated {:.3}x",
        bottom(naive),
        bottom(gated)
    );
    assert!(
        bottom(naive) >= 24.0 && bottom(naive) <= 27.0,
        "{}",
        bottom(naive)
    );
    // 3 attempts per layer, compounded: 3x, 9x, ~27x.
    assert!(naive.layers[0].amplification > 2.8 && naive.layers[1].amplification > 8.0);
    assert!(
        bottom(gated) >= 1.0 && bottom(gated) <= 1.2,
        "{}",
        bottom(gated)
    );
    // Only the layer right above the overload retries: the upper layers see ~1x.
    assert!(gated.layers[0].amplification < 1.05 && gated.layers[1].amplification < 1.05);
}

#[test]
fn metastable_unprotected_stays_collapsed_protected_recovers() {
    let sc = shipped("metastable").scaled(0.5);
    let runs = run(&sc);
    let all = |s: &spillway_sim::report::SecondStats| Some(s.counts);
    for r in &runs {
        let before = success(&window(&r.report, 5, 20, all));
        let after = success(&window(&r.report, 40, 90, all));
        println!(
            "{}: success {:.1}% before the trigger, {:.1}% from 10 s after it ends",
            r.report.title,
            before * 100.0,
            after * 100.0
        );
        assert!(
            before > 0.99,
            "{}: healthy before the trigger ({before})",
            r.report.title
        );
    }
    let after = |name: &str| success(&window(&variant(&runs, name).report, 40, 90, all));
    // The trigger (t = 20..30 s) is long gone, load is back to 70 % of capacity...
    assert!(
        after("unprotected") < 0.05,
        "unprotected recovered: {}",
        after("unprotected")
    );
    assert!(
        after("protected") > 0.99,
        "protected did not recover: {}",
        after("protected")
    );
    // ... and the unprotected service is still working, for callers that have left.
    let unprotected = variant(&runs, "unprotected");
    let layer = &unprotected.layers[0];
    let wasted: u64 = layer.wasted_per_s[40..90].iter().sum();
    let served: u64 = layer.served_per_s[40..90].iter().sum();
    assert!(
        wasted as f64 > 0.95 * served as f64,
        "wasted {wasted} of {served}"
    );
}

#[test]
fn quotas_protect_the_well_behaved_customer() {
    let mut sc = shipped("customer-quotas").scaled(0.2);
    sc.duration_s = 20.0;
    let runs = run(&sc);
    let good = |name: &str| {
        // From t = 10 s: after the start-up transient (quota buckets start full).
        success(&window(&variant(&runs, name).report, 10, 20, |s| {
            s.by_customer.get("good").copied()
        }))
    };
    let bad_share = |name: &str| {
        let r = &variant(&runs, name).report;
        success(&window(r, 10, 20, |s| s.by_customer.get("bad").copied()))
    };
    println!(
        "good customer success: {:.1}% with quotas, {:.1}% without; bad: {:.1}% / {:.1}%",
        good("quotas") * 100.0,
        good("no-quotas") * 100.0,
        bad_share("quotas") * 100.0,
        bad_share("no-quotas") * 100.0
    );
    assert!(good("quotas") > 0.95, "{}", good("quotas"));
    assert!(good("no-quotas") < 0.2, "{}", good("no-quotas"));
    // The misbehaving customer still gets its quota's worth, not nothing.
    assert!(bad_share("quotas") > 0.1, "{}", bad_share("quotas"));
}

#[test]
fn critical_kept_under_a_12x_sheddable_spike() {
    let sc = shipped("criticality-spike").scaled(0.3);
    let runs = run(&sc);
    let during = |name: &str, c: &str| {
        success(&window(&variant(&runs, name).report, 21, 40, |s| {
            s.by_criticality.get(c).copied()
        }))
    };
    println!(
        "during the spike: CRITICAL {:.1}% protected / {:.1}% unprotected; SHEDDABLE {:.1}% / {:.1}%",
        during("protected", "CRITICAL") * 100.0,
        during("unprotected", "CRITICAL") * 100.0,
        during("protected", "SHEDDABLE") * 100.0,
        during("unprotected", "SHEDDABLE") * 100.0
    );
    assert!(during("protected", "CRITICAL") > 0.99);
    assert!(during("unprotected", "CRITICAL") < 0.5);
    // The spike is what gets shed.
    assert!(during("protected", "SHEDDABLE") < 0.5);
    let p = variant(&runs, "protected");
    assert!(
        p.layers[0].refused.contains_key("shed"),
        "{:?}",
        p.layers[0].refused
    );
}

#[test]
fn local_overload_retrying_elsewhere_helps() {
    let mut sc = shipped("local-overload").scaled(0.5);
    sc.duration_s = 10.0;
    let runs = run(&sc);
    let ok = |name: &str| success(&variant(&runs, name).report.summary.counts);
    println!(
        "local overload success: no-retry {:.1}%, gated {:.1}%, naive {:.1}%",
        ok("no-retry") * 100.0,
        ok("gated") * 100.0,
        ok("naive") * 100.0
    );
    assert!(ok("gated") > ok("no-retry") + 0.04);
    assert!(ok("naive") > ok("no-retry") + 0.1);
    // Within the 10 % budget (plus the floor of 1 retry/s per client instance).
    assert!(variant(&runs, "gated").report.summary.amplification < 1.2);
}

#[test]
fn datacenter_overload_retrying_makes_it_worse_gates_pass_the_error_up() {
    let mut sc = shipped("datacenter-overload").scaled(0.5);
    sc.duration_s = 10.0;
    let runs = run(&sc);
    let goodput = |name: &str| variant(&runs, name).report.summary.goodput_rps;
    let amp = |name: &str| variant(&runs, name).report.summary.amplification;
    println!("datacenter overload goodput/s: no-retry {:.0}, naive {:.0} ({:.2}x attempts), gated {:.0} ({:.2}x)",
        goodput("no-retry"), goodput("naive"), amp("naive"), goodput("gated"), amp("gated"));
    // Refusals cost CPU: naive retries take capacity away from useful work.
    assert!(goodput("naive") < 0.9 * goodput("no-retry"));
    assert!(amp("naive") > 2.0);
    // The widespread check and the budget: near-1x, goodput kept.
    assert!(amp("gated") < 1.2);
    assert!(goodput("gated") > 0.95 * goodput("no-retry"));
}

#[test]
fn same_seed_gives_byte_identical_json_and_another_seed_differs() {
    let mut sc = shipped("criticality-spike").scaled(0.1);
    sc.duration_s = 25.0;
    let json = |sc: &Scenario| {
        let reports: Vec<RunReport> = run(sc).into_iter().map(|r| r.report).collect();
        serde_json::to_string_pretty(&reports).expect("serialises")
    };
    let a = json(&sc);
    let b = json(&sc);
    assert_eq!(a, b);
    sc.seed += 1;
    assert_ne!(a, json(&sc));
}

/// Variants run side by side (one thread each) give the same JSON as one after another, in
/// the variants' order — and the variants differ, so a swap of two would show.
#[test]
fn variants_at_once_give_the_json_of_variants_in_turn() {
    let mut sc = shipped("datacenter-overload").scaled(0.1);
    sc.duration_s = 20.0;
    let json = |jobs: usize| {
        let runs = spillway_sim::run_scenario_with(&sc, jobs).expect("scenario runs");
        let reports: Vec<RunReport> = runs.into_iter().map(|r| r.report).collect();
        assert_eq!(reports.len(), 3, "the three variants");
        assert_ne!(
            serde_json::to_string(&reports[0].summary).expect("serialises"),
            serde_json::to_string(&reports[1].summary).expect("serialises"),
            "the variants' results differ"
        );
        serde_json::to_string_pretty(&reports).expect("serialises")
    };
    let in_turn = json(1);
    assert_eq!(in_turn, json(3), "three at once");
    assert_eq!(in_turn, json(2), "two threads for three variants");
}

#[test]
fn the_demo_scenario_keeps_critical_whole_behind_the_proxy_admission() {
    let sc = shipped("demo");
    let runs = run(&sc);
    for name in ["spillway", "spillway+throttle"] {
        let r = &variant(&runs, name).report;
        let crit = window(r, 0, 34, |s| s.by_criticality.get("CRITICAL").copied());
        let noisy = window(r, 0, 34, |s| s.by_customer.get("noisy").copied());
        println!(
            "{name}: CRITICAL {:.2}% of {}, noisy {:.1}%",
            success(&crit) * 100.0,
            crit.offered,
            success(&noisy) * 100.0
        );
        // CRITICAL peaks at half of capacity: requirement 2 of issue 28 asks ≥ 99.9 %.
        assert!(success(&crit) >= 0.999, "{name}");
        assert!(
            success(&noisy) < 0.3,
            "{name}: the surge is what is refused"
        );
    }
    let unprotected = &variant(&runs, "unprotected").report;
    let crit = window(unprotected, 0, 34, |s| {
        s.by_criticality.get("CRITICAL").copied()
    });
    assert!(
        success(&crit) < 0.2,
        "unprotected, CRITICAL drowns with the rest"
    );
}
