//! `spillway calc` end to end: the reference text's figures appear, JSON is machine-readable,
//! and bad arguments exit 2 with a message naming the flag (never a panic, NaN or inf).

use std::process::{Command, Output};

fn calc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .arg("calc")
        .args(args)
        .output()
        .expect("the spillway binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn assert_no_nan_or_inf(text: &str) {
    let lower = text.to_lowercase();
    assert!(
        !lower.contains("nan") && !lower.contains("inf"),
        "NaN/inf in output:\n{text}"
    );
}

#[test]
fn table_shows_the_reference_figures() {
    let o = calc(&[
        "--service-time",
        "40ms",
        "--workers",
        "40",
        "--utilisation",
        "0.9",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    // 90% row: one worker waits 360 ms, forty wait 4.12 ms; response 44.1 ms.
    let row = out
        .lines()
        .find(|l| l.trim_start().starts_with("90%"))
        .expect("a 90% row");
    assert!(row.contains("360 ms"), "{row}");
    assert!(row.contains("4.12 ms"), "{row}");
    assert!(out.contains("44.1 ms"), "{out}");
    assert!(out.contains("knee") && out.contains("1/√c"), "{out}");
    assert!(out.contains("Start refusing above 899 req/s"), "{out}");
    assert_no_nan_or_inf(&out);
}

#[test]
fn reference_default_overload_is_unbounded_and_shedding_fixes_it() {
    let o = calc(&[
        "--service-time",
        "0.04s",
        "--capacity",
        "1000",
        "--arrival-rate",
        "1150",
        "--sheddable-share",
        "30%",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let unshed = out
        .lines()
        .find(|l| l.starts_with("without shedding"))
        .expect("an unshed row");
    assert!(unshed.contains("unbounded"), "{unshed}");
    assert!(out.contains("meets the target"), "{out}");
    assert_no_nan_or_inf(&out);
}

#[test]
fn json_has_the_expected_fields() {
    let o = calc(&[
        "--service-time",
        "40ms",
        "--workers",
        "40",
        "--arrival-rate",
        "1150",
        "--sheddable-share",
        "0.3",
        "--target-wait",
        "50ms",
        "--target-percentile",
        "99",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
    assert_eq!(v["servers"], 40);
    assert_eq!(v["model"], "M/M/c");
    assert!((v["capacity_rps"].as_f64().unwrap() - 1000.0).abs() < 1e-9);
    let plan = &v["plan"];
    assert!(plan["without_shedding"].is_null(), "unbounded is null");
    assert_eq!(plan["input"]["target"]["kind"], "quantile");
    assert_eq!(plan["meets_target"], true);
    let refuse = plan["refuse_above_rate"].as_f64().unwrap();
    assert!(refuse > 0.0 && refuse < 1000.0, "{refuse}");
    let p99 = plan["with_shedding"]["p99_wait_secs"].as_f64().unwrap();
    assert!(p99 <= 0.05 * (1.0 + 1e-9), "{p99}");
    let table = v["knee_table"].as_array().unwrap();
    let one = table.iter().find(|c| c["servers"] == 1).unwrap();
    let at90 = one["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| (r["utilisation"].as_f64().unwrap() - 0.9).abs() < 1e-12)
        .unwrap();
    assert!((at90["mean_wait_secs"].as_f64().unwrap() - 0.36).abs() < 1e-9);
    assert!(table.iter().all(|c| c["knee_utilisation"].is_number()));
}

#[test]
fn unusual_worker_count_gets_its_own_column() {
    let o = calc(&[
        "--service-time",
        "400ms",
        "--capacity",
        "1000",
        "--utilisation",
        "0.5",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["servers"], 400);
    assert_eq!(v["servers_from"], "capacity");
    assert!(v["knee_table"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["servers"] == 400));
}

/// Exit code 2, stderr names `flag`, no panic.
fn assert_usage_error(args: &[&str], flag: &str) {
    let o = calc(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "args {args:?}: {err}");
    assert!(
        err.contains(flag),
        "args {args:?}: stderr does not name {flag}: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_arguments_exit_2_naming_the_flag() {
    let base = ["--service-time", "40ms"];
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        base.iter().copied().chain(extra.iter().copied()).collect()
    };
    assert_usage_error(
        &with(&["--workers", "0", "--utilisation", "0.9"]),
        "--workers",
    );
    assert_usage_error(
        &with(&["--workers", "4", "--arrival-rate", "-5"]),
        "--arrival-rate",
    );
    assert_usage_error(
        &with(&["--workers", "4", "--arrival-rate", "NaN"]),
        "--arrival-rate",
    );
    assert_usage_error(
        &with(&["--workers", "4", "--utilisation", "-0.1"]),
        "--utilisation",
    );
    assert_usage_error(
        &with(&[
            "--workers",
            "4",
            "--utilisation",
            "0.5",
            "--sheddable-share",
            "1.5",
        ]),
        "--sheddable-share",
    );
    // Both, and neither, of each exclusive pair.
    assert_usage_error(
        &with(&[
            "--workers",
            "4",
            "--capacity",
            "100",
            "--utilisation",
            "0.5",
        ]),
        "--capacity",
    );
    assert_usage_error(&with(&["--utilisation", "0.5"]), "--workers");
    assert_usage_error(
        &with(&[
            "--workers",
            "4",
            "--utilisation",
            "0.5",
            "--arrival-rate",
            "5",
        ]),
        "--arrival-rate",
    );
    assert_usage_error(&with(&["--workers", "4"]), "--utilisation");
    // Capacity too small for one worker at this service time.
    assert_usage_error(
        &with(&["--capacity", "1", "--utilisation", "0.5"]),
        "--capacity",
    );
    assert_usage_error(
        &[
            "--service-time",
            "40xs",
            "--workers",
            "4",
            "--utilisation",
            "0.5",
        ],
        "--service-time",
    );
    assert_usage_error(
        &[
            "--service-time",
            "0ms",
            "--workers",
            "4",
            "--utilisation",
            "0.5",
        ],
        "--service-time",
    );
    assert_usage_error(
        &with(&[
            "--workers",
            "4",
            "--utilisation",
            "0.5",
            "--target-percentile",
            "99",
        ]),
        "--target-wait",
    );
}
