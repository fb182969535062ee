//! `spillway sim` end to end: the sharding flags run a scenario in shards and report it, and
//! bad values exit 2 with a message naming the key and the flag that fixes it; `--sweep` prints
//! its verdicts and writes its cells; `--demo-seeds` tallies the demo's targets over seeds.

use std::process::{Command, Output};

fn sim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .arg("sim")
        .args(args)
        .output()
        .expect("the spillway binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn shards_without_a_delay_name_the_key_and_the_flag() {
    let o = sim(&["mmc", "--shards", "2"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains(".network_ms") && e.contains("--network-ms"),
        "{e}"
    );
    let o = sim(&["mmc", "--shards", "65", "--network-ms", "1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("shards") && stderr(&o).contains("1..=64"));
}

#[test]
fn a_scenario_runs_in_shards_and_its_report_says_so() {
    let dir = std::env::temp_dir().join(format!("spillway-sim-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let json = dir.join("mmc.json");
    let o = sim(&[
        "mmc",
        "--duration",
        "5s",
        "--network-ms",
        "0.5",
        "--shards",
        "2",
        "--json",
        json.to_str().expect("utf-8 path"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&json).expect("report written");
    let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let report = if v.is_array() { &v[0] } else { &v };
    assert_eq!(
        report["meta"]["shards"],
        2,
        "{}",
        &text[..text.len().min(400)]
    );
    assert!(report["summary"]["offered"].as_u64().unwrap_or(0) > 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_sweep_prints_each_requirement_and_writes_its_cells() {
    let dir = std::env::temp_dir().join(format!("spillway-sweep-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("sweep.toml");
    std::fs::write(
        &file,
        "name = \"tiny\"\nmax_requests = 500\nmin_duration_s = 0.05\n[[matrix]]\n\
         name = \"m\"\nworkers = [4]\nmean_ms = [5]\ndistribution = [\"exp\"]\n\
         timeout_x = [5]\noffered = [0.5, 2]\ncritical_share = [0.5]\n\
         arrivals = [\"poisson\"]\n",
    )
    .expect("write sweep file");
    let (json, html) = (dir.join("sweep.json"), dir.join("sweep.html"));
    let o = sim(&[
        "--sweep",
        file.to_str().expect("utf-8 path"),
        "--json",
        json.to_str().expect("utf-8 path"),
        "--html",
        html.to_str().expect("utf-8 path"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for id in ["R1 ", "R2 ", "R3 ", "R4a", "R4b"] {
        assert!(out.contains(id), "{id} missing:\n{out}");
    }
    assert!(
        out.contains("2 cells") && out.contains("worst: c=4 mean=5ms"),
        "{out}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("JSON written")).expect("JSON");
    assert_eq!(v["cells"].as_array().map(Vec::len), Some(2));
    assert!(std::fs::read_to_string(&html)
        .expect("HTML written")
        .contains("<table>"));
    // --cell runs the cells whose label contains it; one that names none is a usage error
    // that shows what a label looks like; without --sweep it is refused, not ignored.
    let path = file.to_str().expect("utf-8 path");
    let o = sim(&["--sweep", path, "--cell", "offered=2x"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("1 cells") && out.contains("offered=2x"),
        "{out}"
    );
    let o = sim(&["--sweep", path, "--cell", "offered=3x"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no cell's label contains it") && stderr(&o).contains("c=4 mean=5ms"),
        "{}",
        stderr(&o)
    );
    let o = sim(&["metastable", "--cell", "offered=2x"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--sweep"), "{}", stderr(&o));
    std::fs::write(&file, "name = \"bad\"\nmatrix = []\n").expect("write");
    let o = sim(&["--sweep", file.to_str().expect("utf-8 path")]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("matrix"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The CRITICAL counts `--demo-seeds` prints: (succeeded, offered) over its seeds.
fn demo_critical(out: &str) -> (u64, u64) {
    let line = out
        .lines()
        .find(|l| l.starts_with("CRITICAL: "))
        .unwrap_or_else(|| panic!("no CRITICAL line:\n{out}"));
    let counts = line["CRITICAL: ".len()..]
        .split_whitespace()
        .next()
        .expect("counts");
    let (ok, of) = counts.split_once('/').expect("ok/offered");
    (ok.parse().expect("ok"), of.parse().expect("offered"))
}

#[test]
fn demo_seeds_tallies_the_demo_targets_over_its_seeds() {
    let o = sim(&["--demo-seeds", "2", "--seed", "2", "--quick"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    for part in [
        "seeds 2..=3",
        "@1×",
        "@10×",
        "jump",
        "`good`",
        "recovery",
        "of 2 seeds",
    ] {
        assert!(out.contains(part), "{part} missing:\n{out}");
    }
    // The tally is the sum of the seeds' own runs.
    let one = |seed: &str| {
        let o = sim(&["--demo-seeds", "1", "--seed", seed, "--quick"]);
        assert!(o.status.success(), "{}", stderr(&o));
        demo_critical(&String::from_utf8_lossy(&o.stdout))
    };
    let (a, b) = (one("2"), one("3"));
    assert!(a.1 > 0 && b.1 > 0);
    assert_eq!(demo_critical(&out), (a.0 + b.0, a.1 + b.1));
    // No seeds, too many, or a flag it would ignore: a usage error.
    for args in [
        &["--demo-seeds", "0"][..],
        &["--demo-seeds", "100001"],
        &["--demo-seeds", "1", "--json", "x.json"],
    ] {
        let o = sim(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }
    assert!(stderr(&sim(&["--demo-seeds", "0"])).contains("expected 1 to 100000"));
}
