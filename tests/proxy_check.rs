//! `spillway proxy --config FILE --check` refuses what the proxy would act on wrongly or not at
//! all — a path that cannot be a request target, a size, count or duration past its stated
//! bound, an empty API key, a CIDR with spaces around it or host bits set — exiting 2 with
//! `FILE:LINE: KEY: what was wrong: expected what is accepted`; and takes the same values at
//! their bounds.

use std::path::PathBuf;
use std::process::Command;

/// Writes `toml` to a file of its own and runs `--check` on it: exit code, stdout, stderr and
/// the file's path.
fn check(name: &str, toml: &str) -> (i32, String, String, String) {
    let dir = std::env::temp_dir().join(format!("spillway-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path: PathBuf = dir.join(format!("{name}.toml"));
    std::fs::write(&path, toml).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["proxy", "--config"])
        .arg(&path)
        .arg("--check")
        .output()
        .expect("the spillway binary runs");
    let _ = std::fs::remove_file(&path);
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        path.display().to_string(),
    )
}

/// `toml` is refused, naming `line`, `key` and saying `says`.
fn refused(name: &str, toml: &str, line: usize, key: &str, says: &str) {
    let (code, _, err, path) = check(name, toml);
    assert_eq!(code, 2, "{name}: {err}");
    let head = format!("error: {path}:{line}: {key}: ");
    assert!(err.starts_with(&head), "{name}: wanted {head:?}, got {err}");
    assert!(err.contains(says), "{name}: wanted {says:?} in {err}");
    assert!(
        err.contains("expected"),
        "{name}: says what is accepted: {err}"
    );
}

fn accepted(name: &str, toml: &str) -> String {
    let (code, out, err, _) = check(name, toml);
    assert_eq!(code, 0, "{name}: {err}");
    out
}

const ORIGIN_FORM: &str = "expected an origin-form path";

#[test]
fn configured_paths_must_be_origin_form() {
    let hc = |p: &str| format!("[upstream.health_check]\nenabled = true\npath = {p}\n");
    for (name, value, says) in [
        ("hc-space", r#""/health z""#, "a space at byte 7"),
        (
            "hc-crlf",
            r#""/h\r\nx""#,
            "a carriage return (CR) at byte 2",
        ),
        ("hc-lf", r#""/h\nx""#, "a line feed (LF) at byte 2"),
        ("hc-tab", r#""/h\tx""#, "a tab at byte 2"),
        ("hc-nul", r#""/h\u0000x""#, "a control character at byte 2"),
        ("hc-hash", r##""/h#x""##, "a \"#\""),
        (
            "hc-pct",
            r#""/h%zz""#,
            "a \"%\" not followed by two hex digits",
        ),
        ("hc-utf8", r#""/café""#, "a non-ASCII character at byte 4"),
    ] {
        refused(name, &hc(value), 3, "upstream.health_check.path", says);
        refused(
            name,
            &hc(value),
            3,
            "upstream.health_check.path",
            ORIGIN_FORM,
        );
    }
    // The old rule and its message stand.
    refused(
        "hc-relative",
        &hc(r#""healthz""#),
        3,
        "upstream.health_check.path",
        "\"healthz\": expected a path starting with /",
    );
    // A query is a request target's too.
    accepted("hc-query", &hc(r#""/healthz?full=1&x=%20""#));

    let degrade = |p: &str| {
        format!("[[routes]]\nname = \"r\"\npath = \"/a\"\n[routes.degrade]\nupstream_path = {p}\n")
    };
    for (name, value, says) in [
        ("dg-space", r#""/cheap path""#, "a space at byte 6"),
        (
            "dg-crlf",
            r#""/cheap\r\n""#,
            "a carriage return (CR) at byte 6",
        ),
        (
            "dg-query",
            r#""/cheap?x=1""#,
            "the request's own query is kept",
        ),
        ("dg-hash", r##""/cheap#top""##, "a \"#\""),
    ] {
        refused(
            name,
            &degrade(value),
            5,
            "routes[0].degrade.upstream_path",
            says,
        );
    }
    accepted("dg-ok", &degrade(r#""/cheap/v1:list@x""#));

    refused(
        "route-space",
        "[[routes]]\nname = \"r\"\npath = \"/api v1/**\"\n",
        3,
        "routes[0].path",
        "a space at byte 4",
    );
    accepted(
        "route-glob",
        "[[routes]]\nname = \"r\"\npath = \"/api/*/x/**\"\n",
    );
    refused(
        "health-paths",
        "[classify]\nhealth_paths = [\"/healthz\", \"/ready?x\"]\n",
        2,
        "classify.health_paths[1]",
        "a \"?\"",
    );
}

#[test]
fn sizes_counts_and_durations_have_upper_bounds() {
    let big = "9223372036854775807";
    refused(
        "retry-buffer",
        &format!("[upstream]\nretry_buffer_bytes = {big}\n"),
        2,
        "upstream.retry_buffer_bytes",
        "expected bytes at most 67108864",
    );
    refused(
        "retry-total-huge",
        &format!("[upstream]\nretry_buffer_total_bytes = {big}\n"),
        2,
        "upstream.retry_buffer_total_bytes",
        "expected bytes at most 17179869184 (16 GiB)",
    );
    refused(
        "retry-total-small",
        "[upstream]\nretry_buffer_total_bytes = 1000\n",
        2,
        "upstream.retry_buffer_total_bytes",
        "expected bytes at least upstream.retry_buffer_bytes (65536)",
    );
    let out = accepted(
        "retry-bounds",
        "[upstream]\nretry_buffer_bytes = 67108864\nretry_buffer_total_bytes = 17179869184\n",
    );
    assert!(
        out.contains("\"retry_buffer_total_bytes\": 17179869184"),
        "{out}"
    );
    accepted(
        "retry-off",
        "[upstream]\nretry_buffer_bytes = 0\nretry_buffer_total_bytes = 0\n",
    );

    for (table, key) in [
        ("listen", "header_read_timeout_ms"),
        ("listen", "body_read_timeout_ms"),
        ("listen", "send_timeout_ms"),
        ("listen", "idle_timeout_ms"),
        ("upstream", "connect_timeout_ms"),
        ("upstream", "request_timeout_ms"),
        ("upstream", "response_body_timeout_ms"),
        ("upstream", "pool_wait_timeout_ms"),
        ("upstream", "idle_timeout_ms"),
        ("upstream.health_check", "timeout_ms"),
        ("upstream.health_check", "max_interval_ms"),
        ("upstream.ejection", "max_ms"),
        ("signals", "orca_max_age_ms"),
    ] {
        for v in ["86400001", big] {
            refused(
                &format!("{table}-{key}"),
                &format!("[{table}]\n{key} = {v}\n"),
                2,
                &format!("{table}.{key}"),
                "expected milliseconds in 1 ..= 86400000 (24 h)",
            );
        }
        accepted(
            &format!("{table}-{key}-ok"),
            &format!("[{table}]\n{key} = 86400000\n"),
        );
    }
    // Where a bound is between two keys, the other one says it first.
    refused(
        "hc-min-interval",
        "[upstream.health_check]\nmin_interval_ms = 86400001\nmax_interval_ms = 86400002\n",
        2,
        "upstream.health_check.min_interval_ms",
        "expected milliseconds in 1 ..= 86400000 (24 h)",
    );
    refused(
        "ejection-base",
        "[upstream.ejection]\nbase_ms = 86400001\nmax_ms = 86400002\n",
        2,
        "upstream.ejection.base_ms",
        "expected milliseconds in 1 ..= 86400000 (24 h)",
    );

    for (table, key, over, says) in [
        (
            "listen",
            "max_connections",
            "1000001",
            "connections at most 1000000",
        ),
        (
            "upstream",
            "max_requests_per_task",
            "100001",
            "requests at most 100000",
        ),
        (
            "upstream",
            "max_idle_per_task",
            "100001",
            "connections at most 100000",
        ),
        (
            "upstream.ejection",
            "consecutive_failures",
            "1000001",
            "failures at most 1000000",
        ),
        (
            "upstream.health_check",
            "per_requests",
            "1e10",
            "a number > 0 and at most 1e9",
        ),
    ] {
        refused(
            &format!("{table}-{key}"),
            &format!("[{table}]\n{key} = {over}\n"),
            2,
            &format!("{table}.{key}"),
            says,
        );
    }

    // The pressure-scaled idle timeout: its minimum a duration (above the idle timeout it is
    // the idle timeout), its start a percentage of the cap.
    for (toml, key, says) in [
        (
            "[listen]\nidle_timeout_min_ms = 0\n",
            "listen.idle_timeout_min_ms",
            "expected milliseconds >= 1",
        ),
        (
            "[listen]\nidle_timeout_min_ms = 86400001\n",
            "listen.idle_timeout_min_ms",
            "expected milliseconds in 1 ..= 86400000 (24 h)",
        ),
        (
            "[listen]\nidle_pressure_from_pct = 0\n",
            "listen.idle_pressure_from_pct",
            "expected a percentage of listen.max_connections in 1 ..= 100",
        ),
        (
            "[listen]\nidle_pressure_from_pct = 101\n",
            "listen.idle_pressure_from_pct",
            "expected a percentage of listen.max_connections in 1 ..= 100",
        ),
    ] {
        refused(key, toml, 2, key, says);
    }
    // A short idle timeout with the default minimum (2 s) is fine: the minimum is capped by it.
    accepted("idle-short", "[listen]\nidle_timeout_ms = 1500\n");
    let out = accepted(
        "idle-pressure-off",
        "[listen]\nidle_timeout_ms = 4000\nidle_timeout_min_ms = 4000\nidle_pressure_from_pct = 100\n",
    );
    assert!(out.contains("\"idle_timeout_min_ms\": 4000"), "{out}");
    let out = accepted("idle-pressure-defaults", "[listen]\n");
    assert!(out.contains("\"idle_timeout_min_ms\": 2000"), "{out}");
    assert!(out.contains("\"idle_pressure_from_pct\": 50"), "{out}");

    let list = |n: usize, f: &dyn Fn(usize) -> String| (0..n).map(f).collect::<Vec<_>>().join(", ");
    refused(
        "addresses",
        &format!(
            "[upstream]\naddresses = [{}]\n",
            list(1025, &|i| format!("\"127.0.0.1:{}\"", 1000 + i))
        ),
        2,
        "upstream.addresses",
        "1025 addresses: expected at most 1024 tasks",
    );
    refused(
        "trusted",
        &format!(
            "[classify]\ntrusted = [{}]\n",
            list(1025, &|i| format!("\"10.{}.{}.0/24\"", i / 256, i % 256))
        ),
        2,
        "classify.trusted",
        "1025 CIDRs: expected at most 1024 CIDRs",
    );
    refused(
        "health-paths-count",
        &format!(
            "[classify]\nhealth_paths = [{}]\n",
            list(257, &|i| format!("\"/h{i}\""))
        ),
        2,
        "classify.health_paths",
        "257 paths: expected at most 256 paths",
    );
    let mut keys = String::from("[classify.api_keys]\n");
    for i in 0..100_001 {
        keys.push_str(&format!("k{i} = \"c\"\n"));
    }
    refused(
        "api-keys-count",
        &keys,
        1,
        "classify.api_keys",
        "100001 keys: expected at most 100000 keys",
    );
    let mut routes = String::new();
    for i in 0..4097 {
        routes.push_str(&format!("[[routes]]\nname = \"r{i}\"\n"));
    }
    refused(
        "routes-count",
        &routes,
        1,
        "routes",
        "4097 routes: expected at most 4096 routes",
    );
    refused(
        "route-headers",
        &format!(
            "[[routes]]\nname = \"r\"\nheaders = {{ {} }}\n",
            list(65, &|i| format!("h{i} = \"v\""))
        ),
        3,
        "routes[0].headers",
        "65 headers: expected at most 64 headers",
    );
    refused(
        "degrade-body",
        &format!(
            "[[routes]]\nname = \"r\"\n[routes.degrade]\nbody = \"{}\"\n",
            "x".repeat((1 << 20) + 1)
        ),
        4,
        "routes[0].degrade.body",
        "1048577: expected bytes at most 1048576",
    );
}

/// The budgets that bound memory whatever callers send (issue 29): requests held at once, and
/// the series of each per-request metric family.
#[test]
fn request_and_series_budgets_have_bounds() {
    for (toml, key, says) in [
        (
            "[listen]\nmax_requests_in_progress = 0\n",
            "listen.max_requests_in_progress",
            "expected an integer >= 1",
        ),
        (
            "[listen]\nmax_requests_in_progress = 1000001\n",
            "listen.max_requests_in_progress",
            "expected requests at most 1000000",
        ),
        (
            "[admin]\nmax_series_per_family = 99\n",
            "admin.max_series_per_family",
            "expected an integer from 100 to 1000000",
        ),
        (
            "[admin]\nmax_series_per_family = 1000001\n",
            "admin.max_series_per_family",
            "expected an integer from 100 to 1000000",
        ),
    ] {
        refused(key, toml, 2, key, says);
    }
    let out = accepted("budgets-defaults", "[listen]\n");
    assert!(out.contains("\"max_requests_in_progress\": 4096"), "{out}");
    assert!(out.contains("\"max_series_per_family\": 1500"), "{out}");
}

#[test]
fn api_keys_are_not_empty_and_cidrs_are_written_canonically() {
    refused(
        "api-key-empty",
        "[classify]\ncustomer_from = \"api_key\"\napi_keys = { \"\" = \"x\" }\n",
        3,
        "classify.api_keys.\"\"",
        "an empty key would match an empty header",
    );
    refused(
        "api-key-space",
        "[classify]\napi_keys = { \" k1\" = \"x\" }\n",
        2,
        "classify.api_keys.\" k1\"",
        "expected a non-empty key of visible ASCII characters",
    );
    refused(
        "api-key-ctl",
        "[classify]\napi_keys = { \"k\\u0001\" = \"x\" }\n",
        2,
        "classify.api_keys.\"k\\u{1}\"",
        "expected a non-empty key",
    );
    accepted(
        "api-key-ok",
        "[classify]\napi_keys = { \"k1 2/x\" = \"acme\" }\n",
    );

    for (name, cidr, says) in [
        (
            "cidr-lead",
            " 10.0.0.0/8",
            "expected a CIDR without spaces around it",
        ),
        (
            "cidr-trail",
            "10.0.0.0/8 ",
            "expected a CIDR without spaces around it",
        ),
        (
            "cidr-tab",
            "\\t10.0.0.0/8",
            "expected a CIDR without spaces around it",
        ),
        (
            "cidr-host-bits",
            "10.0.0.1/8",
            "host bits set below the /8 prefix (the bits past the first 8 are not zero): \
             expected the network address, \"10.0.0.0/8\" (or \"10.0.0.1/32\" for that one host)",
        ),
        (
            "cidr-host-bits-v6",
            "fd00::1/64",
            "expected the network address, \"fd00::/64\" (or \"fd00::1/128\"",
        ),
        (
            "cidr-garbage",
            "10.0.0.0/33",
            "expected a CIDR such as 10.0.0.0/8",
        ),
    ] {
        refused(
            name,
            &format!("[classify]\ntrusted = [\"127.0.0.0/8\",\n  \"{cidr}\"]\n"),
            3,
            "classify.trusted[1]",
            says,
        );
    }
    accepted(
        "cidr-ok",
        "[classify]\ntrusted = [\"10.0.0.0/8\", \"10.1.2.3/32\", \"::1/128\", \"0.0.0.0/0\"]\n",
    );
}

#[test]
fn orca_metrics_are_names_of_a_report() {
    refused(
        "orca-metric-unknown",
        "[signals]\norca_metrics = [\"named_metrics.queue\", \"eps\"]\n",
        2,
        "signals.orca_metrics[1]",
        "expected cpu_utilization, mem_utilization, application_utilization, utilization.<key> or named_metrics.<key>",
    );
    refused(
        "orca-metric-empty-key",
        "[signals]\norca_metrics = [\"named_metrics.\"]\n",
        2,
        "signals.orca_metrics[0]",
        "\"named_metrics.\" is not an ORCA metric",
    );
    let many: Vec<String> = (0..17).map(|i| format!("\"named_metrics.m{i}\"")).collect();
    refused(
        "orca-metrics-too-many",
        &format!("[signals]\norca_metrics = [{}]\n", many.join(", ")),
        2,
        "signals.orca_metrics",
        "expected at most 16",
    );
    let out = accepted(
        "orca-metrics-ok",
        "[signals]\norca_metrics = [\"named_metrics.queue\", \"utilization.pool\", \"cpu_utilization\"]\n",
    );
    assert!(out.contains("named_metrics.queue"), "{out}");
}
