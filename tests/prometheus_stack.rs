//! The shipped Prometheus and Grafana files, checked by the real tools (issue 32, item 2).
//!
//! Why real tools and not string checks: a metric renamed in the code and not in a dashboard
//! shows "no data" only when someone needs it, and an alert on a name that does not exist never
//! fires. So `promtool` lints a live proxy's `/metrics` and runs the rules' unit tests, and a
//! real Prometheus scrapes a real proxy under load while every query of the Grafana dashboard,
//! of the alert rules and of the runbook must return data — and a query naming a metric that
//! does not exist must be caught (the checker's own test).
//!
//! Debian's `prometheus` package provides both binaries; `.ci/run` installs it. Without them the
//! tests are skipped with a message, unless `CI` is set, where that is a failure. Everything
//! runs on loopback, each process on its own free port and temp dir, bounded in time.
#![cfg(unix)]

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::local;

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// Whether `promtool` and `prometheus` run; `None` (after saying why) to skip. Panics under CI.
fn tools() -> Option<()> {
    let runs = |bin: &str| {
        Command::new(bin)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if runs("promtool") && runs("prometheus") {
        return Some(());
    }
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false") {
        panic!(
            "CI is set but promtool/prometheus are missing (.ci/run installs Debian's prometheus)"
        );
    }
    eprintln!(
        "SKIPPED: promtool/prometheus are not installed (apt-get install prometheus); CI runs this test"
    );
    None
}

/// `promtool ARGS` (stdin from `input` if given): (success, stdout + stderr).
fn promtool(args: &[&str], dir: &Path, input: Option<&str>) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool starts");
    if let Some(text) = input {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("write to promtool");
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("promtool ends");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn shipped_rules_pass_promtool_check_and_unit_tests() {
    if tools().is_none() {
        return;
    }
    let dir = repo("deploy/prometheus");
    let (ok, out) = promtool(&["check", "rules", "alerts.yml"], &dir, None);
    assert!(ok, "promtool check rules:\n{out}");
    assert!(out.contains("SUCCESS: 5 rules found"), "{out}");
    let (ok, out) = promtool(&["test", "rules", "alerts_test.yml"], &dir, None);
    assert!(ok, "promtool test rules:\n{out}");
}

/// `GET path` over HTTP/1.0 (so the body is neither chunked nor kept alive): (status, body).
fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nhost: 127.0.0.1\r\n\r\n").ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.get(9..12)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// Percent-encodes a query parameter (RFC 3986 unreserved characters kept).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A dashboard query as Prometheus can run it: Grafana's variables replaced by what "All"
/// and a short range would give.
fn as_promql(expr: &str) -> String {
    expr.replace("$__rate_interval", "10s")
        .replace("${job}", ".+")
        .replace("$job", ".+")
        .replace("${instance}", ".+")
        .replace("$instance", ".+")
}

/// The expression without its trailing threshold (`... > 0.05` → `...`): an alert's condition
/// is false on a healthy run, but the series it compares must still exist.
fn strip_threshold(expr: &str) -> String {
    let e = expr.trim();
    for op in [">=", "<=", "==", "!=", ">", "<"] {
        if let Some(i) = e.rfind(op) {
            let rest = e[i + op.len()..].trim();
            if !rest.is_empty() && rest.parse::<f64>().is_ok() {
                return e[..i].trim().to_string();
            }
        }
    }
    e.to_string()
}

/// Runs `expr` against the Prometheus at `prom`; `Err` says why it returned no data (an
/// unknown metric and a query error alike).
fn returns_data(prom: SocketAddr, expr: &str) -> Result<usize, String> {
    let (status, body) = http_get(prom, &format!("/api/v1/query?query={}", encode(expr)))
        .ok_or_else(|| "no answer from Prometheus".to_string())?;
    let v: serde_json::Value = serde_json::from_str(&body)
        .map_err(|e| format!("HTTP {status}, not JSON ({e}): {body}"))?;
    if v["status"] != "success" {
        return Err(format!("HTTP {status}: {}", v["error"]));
    }
    match v["data"]["result"].as_array().map(Vec::len) {
        Some(n) if n > 0 => Ok(n),
        _ => Err("empty result: no such series".to_string()),
    }
}

/// Every `expr` anywhere in a Grafana dashboard's JSON model.
fn dashboard_exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr", serde_json::Value::String(e)) => out.push(e.clone()),
                    _ => dashboard_exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| dashboard_exprs(v, out)),
        _ => {}
    }
}

/// The PromQL written in prose (backquoted spans that call `sum`, `max` or
/// `histogram_quantile` on a `spillway_` metric), so the runbook cannot drift either.
fn prose_queries(markdown: &str) -> Vec<String> {
    markdown
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|q| {
            q.contains("spillway_")
                && ["sum(", "sum by", "max(", "max by", "histogram_quantile("]
                    .iter()
                    .any(|f| q.starts_with(f))
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn queries_are_rewritten_as_prometheus_runs_them() {
    assert_eq!(
        prose_queries(
            "see `sum(rate(spillway_a_total[1m]))` and `jq .x`, `max by (i) (spillway_b)`"
        ),
        ["sum(rate(spillway_a_total[1m]))", "max by (i) (spillway_b)"]
    );
    assert_eq!(
        strip_threshold("sum(rate(a_total[5m]))\n  > 0.05\n"),
        "sum(rate(a_total[5m]))"
    );
    assert_eq!(strip_threshold("sum(x) by (kind) > 0"), "sum(x) by (kind)");
    assert_eq!(strip_threshold("sum(x{a=~\">\"})"), "sum(x{a=~\">\"})");
    assert_eq!(
        as_promql(r#"rate(a_total{job=~"$job", instance=~"$instance"}[$__rate_interval])"#),
        r#"rate(a_total{job=~".+", instance=~".+"}[10s])"#
    );
    let model: serde_json::Value = serde_json::from_str(
        r#"{"panels":[{"targets":[{"expr":"a"}]},{"panels":[{"targets":[{"expr":"b"}]}]}]}"#,
    )
    .unwrap();
    let mut found = Vec::new();
    dashboard_exprs(&model, &mut found);
    assert_eq!(found, ["a", "b"]);
}

/// The proxy in front of one `spillway backend` (100 requests/s of capacity) and one address
/// where nothing listens (connect faults, retries, an ejection); customer `greedy` has a quota
/// of 5 cost units/s, and `/batch/` is SHEDDABLE.
fn write_config(path: &Path, data: u16, admin: u16, up: u16, dead: u16) {
    std::fs::write(
        path,
        format!(
            r#"[listen]
address = "127.0.0.1:{data}"

[admin]
listen = "127.0.0.1:{admin}"

[upstream]
addresses = ["127.0.0.1:{up}", "127.0.0.1:{dead}"]

[classify]
customer_from = "header"
trusted = ["127.0.0.1/32"]

[admission.quota]
enforcement = "always"
default_customer = {{ per_criticality = [1000.0, 1000.0, 1000.0, 1000.0] }}
customers = [["greedy", {{ per_criticality = [5.0, 5.0, 5.0, 5.0] }}]]

[[routes]]
name = "batch"
path = "/batch/"
criticality = "SHEDDABLE"

[[routes]]
name = "api"
path = "/"
"#
        ),
    )
    .expect("write the proxy config");
}

#[test]
fn prometheus_scrapes_a_loaded_proxy_and_every_dashboard_and_alert_query_returns_data() {
    if tools().is_none() {
        return;
    }
    let dir = common::temp_dir("prometheus-stack");
    let (data, admin, up, dead, prom_port) = (
        common::free_port(),
        common::free_port(),
        common::free_port(),
        common::free_port(),
        common::free_port(),
    );
    let cfg = dir.join("proxy.toml");
    write_config(&cfg, data, admin, up, dead);
    // 2 workers x 20 ms = 100/s; the load offers 300/s, so every refusal reason shows up.
    let _backend = common::backend(up, 2, 20, 45, &[]);
    common::wait_for("the backend", Duration::from_secs(20), || {
        common::connect(local(up))
    });
    let _proxy = common::proxy(&cfg, data);

    let alerts = repo("deploy/prometheus/alerts.yml");
    let prom_cfg = dir.join("prometheus.yml");
    std::fs::write(
        &prom_cfg,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: spillway\n    static_configs:\n      - targets: [\"127.0.0.1:{admin}\"]\n",
            alerts.display()
        ),
    )
    .expect("write prometheus.yml");
    let listen = format!("--web.listen-address=127.0.0.1:{prom_port}");
    let tsdb = format!("--storage.tsdb.path={}", dir.join("tsdb").display());
    let config = format!("--config.file={}", prom_cfg.display());
    let _prometheus = common::Proc(
        Command::new("prometheus")
            .args([config.as_str(), &tsdb, &listen, "--log.level=warn"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus starts"),
    );
    let prom = local(prom_port);
    common::wait_for("Prometheus to be ready", Duration::from_secs(20), || {
        http_get(prom, "/-/ready").filter(|(s, _)| *s == 200)
    });

    let target = format!("127.0.0.1:{data}");
    let mut load = common::spawn_quiet(&[
        "load",
        "--target",
        &target,
        "--quiet",
        "--rate",
        "300",
        "--duration",
        "12s",
        "--attempts",
        "1",
        "--class",
        "criticality=CRITICAL,customer=acme,route=/api,weight=3",
        "--class",
        "criticality=SHEDDABLE,customer=acme,route=/batch/x,weight=3",
        "--class",
        "criticality=CRITICAL,customer=greedy,route=/api,weight=1",
    ]);
    // A header field with `_` in its name (dropped and counted).
    if let Some(mut s) = common::connect(local(data)) {
        let _ = write!(
            s,
            "GET /api/x HTTP/1.1\r\nhost: t\r\nx_odd: 1\r\nconnection: close\r\n\r\n"
        );
        let _ = common::read_response(&mut s);
    }

    // promtool's lint on the live exposition, once every family has samples.
    let metrics = common::wait_for("refusals in /metrics", Duration::from_secs(20), || {
        http_get(local(admin), "/metrics")
            .map(|(_, body)| body)
            .filter(|b| b.contains("reason=\"over_quota\"") && b.contains("ejections_total{"))
    });
    let (ok, out) = promtool(&["check", "metrics"], &dir, Some(&metrics));
    assert!(
        ok && out.trim().is_empty(),
        "promtool check metrics:\n{out}\n{metrics}"
    );

    let model: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo("deploy/grafana/spillway.json")).expect("dashboard"),
    )
    .expect("the dashboard is JSON");
    let mut dashboard = Vec::new();
    dashboard_exprs(&model, &mut dashboard);
    assert!(dashboard.len() >= 10, "{dashboard:?}");

    // The alert rules as Prometheus loaded them (it parsed alerts.yml itself).
    let rules = common::wait_for("the rules loaded", Duration::from_secs(10), || {
        let (_, body) = http_get(prom, "/api/v1/rules")?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        let rules: Vec<serde_json::Value> = v["data"]["groups"]
            .as_array()?
            .iter()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect();
        (!rules.is_empty()).then_some(rules)
    });
    assert_eq!(rules.len(), 5, "{rules:?}");
    let mut queries: Vec<(String, String)> = dashboard
        .iter()
        .map(|e| (format!("dashboard: {e}"), strip_threshold(&as_promql(e))))
        .collect();
    let runbook =
        prose_queries(&std::fs::read_to_string(repo("docs/runbook.md")).expect("runbook"));
    assert!(runbook.len() >= 6, "{runbook:?}");
    queries.extend(
        runbook
            .iter()
            .map(|q| (format!("docs/runbook.md: {q}"), q.clone())),
    );
    for r in &rules {
        let q = r["query"].as_str().expect("a rule's query");
        queries.push((format!("alert {}: {q}", r["name"]), strip_threshold(q)));
    }

    // Poll until every query returns data; the load lasts 12 s and scrapes come every second.
    let deadline = Instant::now() + Duration::from_secs(25);
    let failing = loop {
        let failing: Vec<String> = queries
            .iter()
            .filter_map(|(what, q)| {
                returns_data(prom, q)
                    .err()
                    .map(|e| format!("{what}\n  ran: {q}\n  {e}"))
            })
            .collect();
        if failing.is_empty() || Instant::now() > deadline {
            break failing;
        }
        std::thread::sleep(Duration::from_secs(1));
    };
    assert!(
        failing.is_empty(),
        "queries without data:\n{}",
        failing.join("\n")
    );

    // The checker catches a renamed metric (the old name of the utilisation gauge).
    let old = as_promql(r#"max(spillway_utilisation{job=~"$job"})"#);
    assert!(returns_data(prom, &old).is_err(), "{old} returned data");
    assert!(returns_data(prom, "sum(rate(spillway_no_such_metric_total[10s]))").is_err());
    assert!(returns_data(prom, "sum(rate(spillway_offered_requests_total[10s])").is_err());

    // Prometheus evaluated every rule without an error.
    let (_, body) = http_get(prom, "/api/v1/rules").expect("rules");
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    for g in v["data"]["groups"].as_array().expect("groups") {
        for r in g["rules"].as_array().expect("rules") {
            assert_eq!(r["health"], "ok", "{r}");
        }
    }

    let st = load.wait_exit(Duration::from_secs(30)).expect("load ends");
    assert!(st.success(), "spillway load exited {st}");
    drop((_prometheus, _proxy, _backend));
    let _ = std::fs::remove_dir_all(&dir);
}
