//! Bad scenario files get errors that name the key, the value and what is accepted.

use spillway_sim::{builtin, Scenario};

const BASE: &str = r#"
name = "t"
duration_s = 1

[[client]]
name = "users"
load = { shape = "constant", rps = 10 }

[[layer]]
name = "api"
workers = 4
service = { dist = "exp", mean_ms = 10 }
"#;

fn err(text: &str) -> String {
    match Scenario::from_toml(text, "test.toml") {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_base_scenario_is_valid_and_runs() {
    let sc = Scenario::from_toml(BASE, "test.toml").expect("valid");
    let runs = spillway_sim::run_scenario(&sc).expect("runs");
    assert_eq!(runs.len(), 1);
    assert!(runs[0].offered > 0);
}

#[test]
fn unknown_keys_are_errors_with_the_line() {
    let e = err(&BASE.replace("workers = 4", "workers = 4\nwrokers = 5"));
    assert!(e.contains("wrokers") && e.contains("test.toml"), "{e}");
    assert!(e.contains("line"), "{e}");
}

#[test]
fn out_of_range_values_name_the_key() {
    let e = err(&BASE.replace("workers = 4", "workers = 0"));
    assert!(
        e.contains("layer[api].workers") && e.contains("1..=100000"),
        "{e}"
    );
    let e = err(&BASE.replace("workers = 4", "workers = 4\nnetwork_ms = -1"));
    assert!(
        e.contains("layer[api].network_ms") && e.contains("[0, 3600000]"),
        "{e}"
    );
    let e = err(&BASE.replace("duration_s = 1", "duration_s = 1\nshards = 0"));
    assert!(e.contains("shards") && e.contains("1..=64"), "{e}");
    let e = err(&BASE.replace("duration_s = 1", "duration_s = 1\nshards = 65"));
    assert!(e.contains("shards") && e.contains("1..=64"), "{e}");
    // Shards run apart for one network delay at a time: without one, they cannot.
    let e = err(&BASE.replace("duration_s = 1", "duration_s = 1\nshards = 2"));
    assert!(
        e.contains("layer[api].network_ms") && e.contains("shards > 1"),
        "{e}"
    );
    let sharded = BASE
        .replace("duration_s = 1", "duration_s = 1\nshards = 2")
        .replace("workers = 4", "workers = 4\nnetwork_ms = 0.5");
    Scenario::from_toml(&sharded, "test.toml").expect("two shards with a delay");
    let e = err(&BASE.replace("rps = 10", "rps = -1"));
    assert!(e.contains("client[users].load.rps"), "{e}");
    let e = err(&BASE.replace(
        "name = \"users\"",
        "name = \"users\"\ncriticality = \"urgent\"",
    ));
    assert!(
        e.contains("client[users].criticality") && e.contains("SHEDDABLE"),
        "{e}"
    );
    let e = err(&format!("{BASE}\n[[fault]]\nkind = \"capacity\"\nlayer = \"db\"\nfactor = 0.5\nat_s = 1\nfor_s = 1\n"));
    assert!(e.contains("fault[0].layer") && e.contains("db"), "{e}");
    let e = err(&BASE.replace(
        "service = { dist = \"exp\", mean_ms = 10 }",
        "service = { dist = \"exp\", mean_ms = 10 }\nadmission = { shed_thresholds = [0.9, 0.8] }",
    ));
    assert!(e.contains("layer[api].admission.shed_thresholds"), "{e}");
}

#[test]
fn the_envoy_limit_is_seeded_so_runs_repeat_exactly() {
    // The Envoy gradient draws jitter for its minRTT windows; the simulator seeds it, so two
    // runs of one scenario are identical.
    let text = BASE.replace(
        "service = { dist = \"exp\", mean_ms = 10 }",
        "service = { dist = \"exp\", mean_ms = 10 }\nadmission = { limit = { algorithm = \"envoy_gradient\", interval_ms = 200.0, request_count = 5 } }",
    )
    .replace("duration_s = 1", "duration_s = 3")
    .replace("rps = 10", "rps = 600"); // past the 4 workers' ~400/s, so the limit matters
    let sc = Scenario::from_toml(&text, "test.toml").expect("envoy_gradient is accepted");
    let json = || {
        let runs = spillway_sim::run_scenario(&sc).expect("runs");
        assert!(runs[0].offered > 0);
        serde_json::to_string(&runs.iter().map(|r| &r.report).collect::<Vec<_>>()).expect("json")
    };
    assert_eq!(json(), json());
}

#[test]
fn shipped_scenarios_are_all_reachable_by_name() {
    for name in builtin::names() {
        let sc = builtin::scenario(name).expect("listed").expect("valid");
        assert_eq!(sc.name, name);
    }
    assert!(builtin::scenario("no-such").is_none());
}
