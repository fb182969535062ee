//! `spillway proxy`'s logs as an operator reads them: the JSON start-up line, the access log's
//! fields for an admitted and a refused request, sampling 0 writing nothing, and bad logging
//! flags refused with what is accepted.
//!
//! Why processes: the subscriber is installed by the binary alone, and the access log's writer
//! runs on a thread of the proxy's own; only a real process shows what reaches stderr and the
//! file. Everything runs on loopback and is bounded in time (backends stop by themselves; every
//! wait has a deadline).
#![cfg(unix)]

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

mod common;

use common::{backend, free_port, local, spawn, temp_dir, wait_for, Proc};

/// `GET /x` as `customer` (loopback is trusted, so the header is honoured): the status.
fn get_as(addr: SocketAddr, customer: &str) -> Option<u16> {
    let mut s = common::connect(addr)?;
    write!(
        s,
        "GET /x HTTP/1.1\r\nhost: test\r\nx-spillway-customer: {customer}\r\n\
         connection: close\r\n\r\n"
    )
    .ok()?;
    common::read_response(&mut s).ok().map(|r| r.0)
}

/// A proxy config on `data` → `backend`: loopback trusted, customer `broke` has (next to) no
/// quota, enforced always, so its requests are refused 429 and everyone else's admitted.
fn write_config(path: &Path, data: u16, backend: u16, access: &str) {
    std::fs::write(
        path,
        format!(
            "[listen]\naddress = \"127.0.0.1:{data}\"\n\n[admin]\nenabled = false\n\n\
             [upstream]\naddresses = [\"127.0.0.1:{backend}\"]\n\n\
             [classify]\ntrusted = [\"127.0.0.1/32\"]\n\n\
             [admission.quota]\nenforcement = \"always\"\n\
             customers = [[\"broke\", {{ per_criticality = [0.0, 0.0, 0.0, 0.0] }}]]\n\n\
             [[routes]]\nname = \"api\"\npath = \"/\"\n\n[log.access]\n{access}"
        ),
    )
    .expect("write the config file");
}

fn stop(mut proxy: Proc) -> String {
    proxy.signal("-TERM");
    let status = proxy
        .wait_exit(Duration::from_secs(15))
        .expect("the proxy exits after SIGTERM");
    assert!(status.success(), "proxy exit status {status}");
    proxy.stderr()
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_json_access_log_carries_every_field_and_the_start_up_line_is_json() {
    let dir = temp_dir("access-json");
    let (config, log) = (dir.join("proxy.toml"), dir.join("access.log"));
    let (data_port, backend_port) = (free_port(), free_port());
    let _backend = backend(backend_port, 4, 1, 60, &[]);
    let access = format!("enabled = true\npath = {:?}\n", log.display().to_string());
    write_config(&config, data_port, backend_port, &access);
    let proxy = spawn(&[
        "proxy",
        "--config",
        config.to_str().expect("utf-8 path"),
        "--log-format",
        "json",
    ]);
    let data = local(data_port);
    wait_for(
        "the proxy to forward a request",
        Duration::from_secs(15),
        || get_as(data, "acme").filter(|s| *s == 200),
    );
    assert_eq!(get_as(data, "broke"), Some(429), "over quota");

    // The writer thread flushes whenever it catches up: both lines arrive without a shutdown.
    let found = wait_for("both access lines", Duration::from_secs(10), || {
        let parsed: Vec<Value> = lines(&log)
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
            .collect();
        let admitted = parsed.iter().find(|v| v["decision"] == "admitted").cloned();
        let refused = parsed.iter().find(|v| v["decision"] == "refused").cloned();
        admitted.zip(refused)
    });
    let (admitted, refused) = found;
    const FIELDS: [&str; 10] = [
        "time",
        "route",
        "criticality",
        "customer",
        "decision",
        "reason",
        "queue_ms",
        "upstream_ms",
        "status",
        "attempt",
    ];
    for v in [&admitted, &refused] {
        let missing: Vec<_> = FIELDS.iter().filter(|f| v.get(**f).is_none()).collect();
        assert!(missing.is_empty(), "{v} lacks {missing:?}");
        assert_eq!(v["route"], "api", "{v}");
        assert_eq!(v["criticality"], "CRITICAL", "{v}");
        assert_eq!(v["attempt"], 1, "{v}");
        assert!(v["time"].as_str().is_some_and(|t| t.ends_with('Z')), "{v}");
    }
    assert_eq!(admitted["customer"], "acme");
    assert_eq!(admitted["status"], 200);
    assert!(admitted["reason"].is_null(), "{admitted}");
    assert!(admitted["queue_ms"].as_f64().is_some_and(|q| q >= 0.0));
    assert!(admitted["upstream_ms"].as_f64().is_some_and(|u| u > 0.0));
    assert_eq!(refused["customer"], "broke");
    assert_eq!(refused["status"], 429);
    assert_eq!(refused["reason"], "over_quota", "{refused}");
    assert!(refused["queue_ms"].is_null() && refused["upstream_ms"].is_null());

    let stderr = stop(proxy);
    let started = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["fields"]["message"] == "spillway proxy started")
        .unwrap_or_else(|| panic!("no JSON start-up line in:\n{stderr}"));
    assert_eq!(started["level"], "INFO");
    let f = &started["fields"];
    assert_eq!(f["listen"], format!("127.0.0.1:{data_port}"));
    assert_eq!(f["upstreams"], format!("127.0.0.1:{backend_port}"));
    assert_eq!(f["admin"], "off");
    assert_eq!(f["trusted"], "127.0.0.1/32");
    assert_eq!(f["quota_store"], "off");
    assert_eq!(f["access_log"], "on");
    assert!(f["limit"].is_string() && f["queue"].is_string(), "{f}");
    // Every line on stderr is JSON: the access log went to its file, nothing else printed.
    for l in stderr.lines() {
        assert!(serde_json::from_str::<Value>(l).is_ok(), "not JSON: {l}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sampling_zero_writes_nothing() {
    let dir = temp_dir("access-sample0");
    let (config, log) = (dir.join("proxy.toml"), dir.join("access.log"));
    let (data_port, backend_port) = (free_port(), free_port());
    let _backend = backend(backend_port, 4, 1, 60, &[]);
    let access = format!(
        "enabled = true\nsample = 0.0\nformat = \"text\"\npath = {:?}\n",
        log.display().to_string()
    );
    write_config(&config, data_port, backend_port, &access);
    let proxy = spawn(&["proxy", "--config", config.to_str().expect("utf-8 path")]);
    let data = local(data_port);
    wait_for(
        "the proxy to forward a request",
        Duration::from_secs(15),
        || get_as(data, "acme").filter(|s| *s == 200),
    );
    let mut refused = 0;
    for _ in 0..20 {
        assert_eq!(get_as(data, "acme"), Some(200));
        refused += usize::from(get_as(data, "broke") == Some(429));
    }
    assert_eq!(refused, 20, "broke is over quota");
    let stderr = stop(proxy);
    assert!(log.exists(), "the log file is opened at start");
    assert_eq!(lines(&log), Vec::<String>::new());
    assert!(!stderr.contains(" access "), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_logging_flags_are_refused_naming_what_is_accepted() {
    let run = |args: &[&str], rust_log: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_spillway"));
        c.args(args).stdout(Stdio::null()).stderr(Stdio::piped());
        match rust_log {
            Some(v) => c.env("RUST_LOG", v),
            None => c.env_remove("RUST_LOG"),
        };
        let out = c.output().expect("the spillway binary runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let check = [
        "proxy",
        "--listen",
        "127.0.0.1:1",
        "--upstream",
        "127.0.0.1:2",
    ];

    let (code, err) = run(&[&check[..], &["--log-format", "xml"]].concat(), None);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("xml") && err.contains("text") && err.contains("json"),
        "{err}"
    );

    let (code, err) = run(&[&check[..], &["--log-level", "verbose"]].concat(), None);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--log-level") && err.contains("verbose"),
        "{err}"
    );
    assert!(
        err.contains("debug") && err.contains("info,spillway_proxy=debug"),
        "{err}"
    );

    let (code, err) = run(&check, Some("loud"));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("RUST_LOG") && err.contains("loud"), "{err}");

    // A good filter is taken, and global: any subcommand accepts the flags.
    let (code, err) = run(
        &[
            "calc",
            "--log-level",
            "warn,spillway_proxy=debug",
            "--log-format",
            "json",
            "--help",
        ],
        None,
    );
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn a_bad_access_log_key_is_refused_with_its_path() {
    let dir = temp_dir("access-bad");
    let config = dir.join("proxy.toml");
    write_config(
        &config,
        free_port(),
        free_port(),
        "enabled = true\nsample = 2.0\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args([
            "proxy",
            "--check",
            "--config",
            config.to_str().expect("utf-8"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("log.access.sample") && err.contains("0.0 to 1.0"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sighup_reopens_the_access_log_for_logrotate() {
    let dir = temp_dir("access-rotate");
    let (config, log) = (dir.join("proxy.toml"), dir.join("access.log"));
    let rotated = dir.join("access.log.1");
    let (data_port, backend_port) = (free_port(), free_port());
    let _backend = backend(backend_port, 4, 1, 60, &[]);
    let access = format!(
        "enabled = true\nformat = \"text\"\npath = {:?}\n",
        log.display().to_string()
    );
    write_config(&config, data_port, backend_port, &access);
    let proxy = spawn(&["proxy", "--config", config.to_str().expect("utf-8 path")]);
    let data = local(data_port);
    wait_for("a line in the log", Duration::from_secs(15), || {
        get_as(data, "before");
        lines(&log)
            .iter()
            .any(|l| l.contains("customer=before"))
            .then_some(())
    });
    // logrotate: move the file, then SIGHUP; the proxy writes to a new file at the old path.
    std::fs::rename(&log, &rotated).expect("rotate");
    proxy.signal("-HUP");
    wait_for("a line in the new file", Duration::from_secs(15), || {
        get_as(data, "after");
        lines(&log)
            .iter()
            .any(|l| l.contains("customer=after"))
            .then_some(())
    });
    let old = lines(&rotated);
    assert!(old.iter().any(|l| l.contains("customer=before")), "{old:?}");
    assert!(
        lines(&log).iter().all(|l| !l.contains("customer=before")),
        "the new file starts after the reload"
    );
    stop(proxy);
    let _ = std::fs::remove_dir_all(&dir);
}
