//! `spillway demo --quick` as a smoke test: the shape of the result, not its timing. Offered
//! 2×–10× capacity, the unprotected backend's goodput collapses while the protected one stays
//! on a plateau, and the well-behaved customer keeps more of its traffic through it. Bounds are
//! generous (shared 2-core machines, debug builds); about 50 s.

use std::process::Command;

fn runs(json: &serde_json::Value) -> Vec<(String, f64, f64, f64)> {
    // (title, mean goodput/s over the seconds offered at least 2× capacity, capacity,
    //  customer `good`'s success ratio over the run)
    json.as_array()
        .expect("an array of runs")
        .iter()
        .map(|r| {
            let capacity = r["meta"]["capacity_rps"].as_f64().unwrap();
            let overloaded: Vec<f64> = r["seconds"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| s["offered"].as_f64().unwrap() >= 2.0 * capacity)
                .map(|s| s["goodput"].as_f64().unwrap())
                .collect();
            assert!(
                overloaded.len() >= 4,
                "the scenario overloads for several seconds"
            );
            let mean = overloaded.iter().sum::<f64>() / overloaded.len() as f64;
            let good = &r["summary"]["by_customer"]["good"];
            let good = good["goodput"].as_f64().unwrap() / good["offered"].as_f64().unwrap();
            (
                r["title"].as_str().unwrap().to_owned(),
                mean,
                capacity,
                good,
            )
        })
        .collect()
}

#[test]
fn quick_demo_shows_plateau_vs_collapse() {
    let dir = std::env::temp_dir().join(format!("spillway-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, html) = (dir.join("demo.json"), dir.join("demo.html"));
    let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["demo", "--quick", "--quiet", "--json"])
        .arg(&json)
        .arg("--html")
        .arg(&html)
        .output()
        .expect("spillway runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("| unprotected |") && stdout.contains("Targets:"),
        "{stdout}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let runs = runs(&report);
    assert_eq!(runs.len(), 3, "{runs:?}");
    let (_, unprotected, capacity, good_unprotected) = &runs[0];
    let (_, protected, _, good_protected) = &runs[1];
    // Collapse: overloaded, the unprotected backend serves almost nothing within the timeout.
    assert!(*unprotected < 0.2 * capacity, "{runs:?}");
    // Plateau: through Spillway it keeps serving a good share of its capacity (generous: the
    // proxy's adaptive limit is still settling in a 15 s run on a shared machine).
    assert!(*protected > 0.25 * capacity, "{runs:?}");
    assert!(*protected > unprotected + 0.2 * capacity, "{runs:?}");
    // The steady customer: collapsed with everyone else unprotected, mostly served through
    // Spillway (its CRITICAL and SHEDDABLE_PLUS go before the surge's SHEDDABLE).
    assert!(*good_protected > good_unprotected + 0.3, "{runs:?}");
    assert!(std::fs::read_to_string(&html).unwrap().contains("<svg"));
    std::fs::remove_dir_all(&dir).ok();
}
