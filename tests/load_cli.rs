//! `spillway load` and `spillway backend` end to end over loopback: a short run writes its JSON
//! and HTML reports; bad flags and non-loopback addresses exit 2 naming the flag; a capped run
//! (--allow-remote --max-rate) prints its cap first. Nothing here sends beyond loopback.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn spillway(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(args)
        .output()
        .expect("the spillway binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    let cases: &[(&[&str], &str)] = &[
        (&["load", "--target", "10.0.0.1:80"], "--target"),
        (&["load", "--target", "example.com:80"], "--target"),
        (
            &["load", "--target", "127.0.0.1:9", "--rate", "fast"],
            "--rate",
        ),
        (
            &["load", "--target", "127.0.0.1:9", "--rate", "ramp:1"],
            "--rate",
        ),
        (
            &["load", "--target", "127.0.0.1:9", "--duration", "2h"],
            "--duration",
        ),
        (
            &["load", "--target", "127.0.0.1:9", "--timeout", "-1s"],
            "--timeout",
        ),
        (
            &[
                "load",
                "--target",
                "127.0.0.1:9",
                "--class",
                "criticality=HIGH",
            ],
            "--class",
        ),
        (
            &["load", "--target", "127.0.0.1:9", "--attempts", "0"],
            "--attempts",
        ),
        (
            &["load", "--target", "127.0.0.1:9", "--retry-budget", "2"],
            "--retry-budget",
        ),
        (
            &[
                "load",
                "--target",
                "127.0.0.1:9",
                "--rate",
                "20000",
                "--timeout",
                "10s",
            ],
            "--rate",
        ),
        (
            &["load", "--target", "127.0.0.1:9", "--behaviour", "polite"],
            "--behaviour",
        ),
        (&["backend", "--listen", "0.0.0.0:8080"], "--listen"),
        (&["backend", "--workers", "0"], "--workers"),
        (&["backend", "--service-time", "0s"], "--service-time"),
        (&["backend", "--dist", "pareto"], "--dist"),
        (&["backend", "--slowdown-alpha", "-1"], "--slowdown-alpha"),
        (
            &["load", "--target", "127.0.0.1:9", "--throttle-k", "-2"],
            "--throttle-k",
        ),
        (
            &["backend", "--dist", "uniform", "--spread", "2"],
            "--spread",
        ),
        (&["backend", "--drop-at", "1s"], "--drop-for"),
        (
            &[
                "backend",
                "--drop-at",
                "1s",
                "--drop-for",
                "1s",
                "--drop-workers",
                "99",
            ],
            "--drop-workers",
        ),
    ];
    for (args, flag) in cases {
        let o = spillway(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains(flag), "{args:?} should name {flag}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn a_short_run_against_the_backend_writes_reports() {
    // A backend on a free port, stopped by its own --duration.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    let mut backend = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args([
            "backend",
            "--listen",
            &addr,
            "--workers",
            "2",
            "--service-time",
            "5ms",
        ])
        .args(["--duration", "6s"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let ready = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(30));
        std::net::TcpStream::connect(&addr).is_ok()
    });
    assert!(ready, "backend did not start");
    let dir = std::env::temp_dir().join(format!("spillway-load-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, html) = (dir.join("r.json"), dir.join("r.html"));
    let o = spillway(&[
        "load",
        "--target",
        &addr,
        "--rate",
        "stages:50/1s,100/1s",
        "--class",
        "criticality=SHEDDABLE,customer=b",
        "--class",
        "customer=a",
        "--json",
        json.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
    ]);
    let _ = backend.kill();
    let _ = backend.wait();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("goodput") && out.contains("SHEDDABLE"),
        "{out}"
    );
    let runs: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let run = &runs[0];
    assert_eq!(run["seconds"].as_array().unwrap().len(), 2);
    let offered = run["summary"]["offered"].as_u64().unwrap();
    assert!((100..=200).contains(&offered), "{offered}");
    assert!(
        run["summary"]["goodput"].as_u64().unwrap() > offered * 9 / 10,
        "{run}"
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<svg") && !page.contains("<script"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_closed_stdout_ends_quietly() {
    // Nothing listens on the port: every request fails fast, then the summary meets a closed pipe.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["load", "--target", &format!("127.0.0.1:{port}")])
        .args(["--rate", "20", "--duration", "500ms", "--attempts", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
}

#[test]
fn a_remote_target_needs_allow_remote_and_a_cap_that_holds() {
    let cases: &[(&[&str], &[&str])] = &[
        // Without the flag: refused, and the message names the flag that would allow it.
        (
            &["load", "--target", "10.0.0.1:80"],
            &["--target", "--allow-remote"],
        ),
        // The flag without a cap.
        (
            &["load", "--target", "10.0.0.1:80", "--allow-remote"],
            &["--max-rate"],
        ),
        // A cap below what the run could send (peak 100/s × 3 attempts = 300/s).
        (
            &[
                "load",
                "--target",
                "10.0.0.1:80",
                "--allow-remote",
                "--max-rate",
                "200",
            ],
            &["--max-rate", "300"],
        ),
        (
            &[
                "load",
                "--target",
                "10.0.0.1:80",
                "--allow-remote",
                "--max-rate",
                "0",
                "--rate",
                "1",
            ],
            &["--max-rate"],
        ),
        // A closed loop cannot be capped.
        (
            &[
                "load",
                "--target",
                "10.0.0.1:80",
                "--allow-remote",
                "--max-rate",
                "100",
                "--connections",
                "4",
            ],
            &["--connections"],
        ),
        // HTTPS to another machine needs the flag too; without the `tls` feature it is
        // refused, not sent in cleartext.
        (
            &["load", "--target", "https://10.0.0.1"],
            if cfg!(feature = "tls") {
                &["--target", "--allow-remote"]
            } else {
                &["--target", "cleartext", "--features tls"]
            },
        ),
        // A CA bundle is for an HTTPS target only.
        (
            &["load", "--target", "127.0.0.1:9", "--ca-file", "ca.pem"],
            &["--ca-file", "cleartext"],
        ),
    ];
    for (args, words) in cases {
        let o = spillway(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        for w in *words {
            assert!(err.contains(w), "{args:?} should say {w}: {err}");
        }
        assert!(
            !err.contains("sending at most"),
            "refused before starting: {err}"
        );
    }
}

#[test]
fn allow_remote_with_a_loopback_target_prints_its_cap_and_runs() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    let mut backend = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["backend", "--listen", &addr, "--service-time", "1ms"])
        .args(["--duration", "5s"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let ready = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(30));
        std::net::TcpStream::connect(&addr).is_ok()
    });
    assert!(ready, "backend did not start");
    let o = spillway(&[
        "load",
        "--target",
        &addr,
        "--allow-remote",
        "--max-rate",
        "40",
        "--rate",
        "20",
        "--attempts",
        "2",
        "--duration",
        "1s",
        "--quiet",
    ]);
    let _ = backend.kill();
    let _ = backend.wait();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!("sending at most 40 req/s to {addr} for 1s")),
        "{err}"
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("goodput"), "{out}");
}
