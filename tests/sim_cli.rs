//! `spillway sim` end to end: the sharding flags run a scenario in shards and report it, and
//! bad values exit 2 with a message naming the key and the flag that fixes it.

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
        "5",
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
