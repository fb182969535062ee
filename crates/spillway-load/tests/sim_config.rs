//! Bad scenario files get errors that name the key, the value and what is accepted.

use spillway_load::sim::{builtin, Scenario};

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
    let runs = spillway_load::sim::run_scenario(&sc).expect("runs");
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
fn the_envoy_limit_is_refused_because_it_cannot_be_seeded() {
    let e = err(&BASE.replace(
        "service = { dist = \"exp\", mean_ms = 10 }",
        "service = { dist = \"exp\", mean_ms = 10 }\nadmission = { limit = { algorithm = \"envoy_gradient\" } }",
    ));
    assert!(
        e.contains("envoy_gradient") && e.contains("reproducible"),
        "{e}"
    );
}

#[test]
fn shipped_scenarios_are_all_reachable_by_name() {
    for name in builtin::names() {
        let sc = builtin::scenario(name).expect("listed").expect("valid");
        assert_eq!(sc.name, name);
    }
    assert!(builtin::scenario("no-such").is_none());
}
