//! The shipped container and Kubernetes files agree with the binary and with each other: the
//! manifests parse as YAML, the configuration in the ConfigMap passes `spillway proxy --check`,
//! the ports, probe paths and mounts the Deployment names are the ones that configuration
//! uses, and the Dockerfile builds with a Rust at least the workspace's `rust-version` and runs
//! as a non-root user.

use std::path::{Path, PathBuf};
use std::process::Command;

use yaml_rust2::{Yaml, YamlLoader};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every document of every `.yaml` file under `deploy/kubernetes`, by file name.
fn manifests() -> Vec<(String, Yaml)> {
    let dir = root().join("deploy/kubernetes");
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "{files:?}");
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let docs = YamlLoader::load_from_str(&text)
            .unwrap_or_else(|e| panic!("{}: not YAML: {e}", f.display()));
        assert!(!docs.is_empty(), "{}: empty", f.display());
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        out.extend(docs.into_iter().map(|d| (name.clone(), d)));
    }
    out
}

fn of_kind<'a>(docs: &'a [(String, Yaml)], kind: &str) -> &'a Yaml {
    &docs
        .iter()
        .find(|(_, d)| d["kind"].as_str() == Some(kind))
        .unwrap_or_else(|| panic!("no {kind}"))
        .1
}

fn str_of<'a>(y: &'a Yaml, what: &str) -> &'a str {
    y.as_str()
        .unwrap_or_else(|| panic!("{what}: not a string: {y:?}"))
}

/// The port of `host:port`.
fn port(addr: &str) -> i64 {
    addr.rsplit_once(':').unwrap().1.parse().unwrap()
}

/// A value of `key = "..."` in the TOML text (the config is small and flat per table).
fn toml_value<'a>(toml: &'a str, table: &str, key: &str) -> &'a str {
    let body = toml
        .split(&format!("[{table}]\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("no [{table}]"));
    let line = body
        .lines()
        .take_while(|l| !l.starts_with('['))
        .find(|l| l.starts_with(&format!("{key} = ")))
        .unwrap_or_else(|| panic!("no {table}.{key}"));
    line.split_once(" = ")
        .unwrap()
        .1
        .trim_matches(['"', '[', ']'])
}

#[test]
fn every_manifest_parses_and_names_its_kind() {
    let docs = manifests();
    for (file, d) in &docs {
        assert!(d["apiVersion"].as_str().is_some(), "{file}: apiVersion");
        assert!(d["kind"].as_str().is_some(), "{file}: kind");
    }
    let kinds: Vec<&str> = docs
        .iter()
        .filter_map(|(_, d)| d["kind"].as_str())
        .collect();
    for k in ["ConfigMap", "Deployment", "Service", "Kustomization"] {
        assert!(kinds.contains(&k), "{k} in {kinds:?}");
    }
    // The kustomization lists every other manifest file.
    let k = of_kind(&docs, "Kustomization");
    let listed: Vec<&str> = k["resources"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|r| str_of(r, "resource"))
        .collect();
    for (file, d) in &docs {
        if d["kind"].as_str() != Some("Kustomization") {
            assert!(listed.contains(&file.as_str()), "{file} not in {listed:?}");
        }
    }
}

#[test]
fn the_configmap_config_passes_check_and_matches_the_deployment() {
    let docs = manifests();
    let cm = of_kind(&docs, "ConfigMap");
    let toml = str_of(&cm["data"]["proxy.toml"], "data.proxy.toml");

    // The token file comes from a Secret at run time: stand one in, and change nothing else.
    let dir = std::env::temp_dir().join(format!("spillway-deploy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token_path = toml_value(toml, "admin", "token_file");
    let stand_in = dir.join("token");
    std::fs::write(&stand_in, "0123456789abcdef0123456789abcdef\n").unwrap();
    let checked = toml.replace(token_path, stand_in.to_str().unwrap());
    assert_ne!(checked, toml, "the token file path was replaced");
    let cfg = dir.join("proxy.toml");
    std::fs::write(&cfg, &checked).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["proxy", "--config"])
        .arg(&cfg)
        .arg("--check")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        o.status.success(),
        "--check: {}",
        String::from_utf8_lossy(&o.stderr)
    );

    let dep = of_kind(&docs, "Deployment");
    let spec = &dep["spec"]["template"]["spec"];
    let containers = spec["containers"].as_vec().unwrap();
    let proxy = containers
        .iter()
        .find(|c| c["name"].as_str() == Some("spillway"))
        .expect("a spillway container");
    let args: Vec<&str> = proxy["args"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|a| str_of(a, "arg"))
        .collect();
    assert_eq!(args[..2], ["proxy", "--config"]);
    let config_path = Path::new(args[2]);

    // Named ports are the config's listen and admin ports.
    let named_port = |name: &str| {
        proxy["ports"]
            .as_vec()
            .unwrap()
            .iter()
            .find(|p| p["name"].as_str() == Some(name))
            .and_then(|p| p["containerPort"].as_i64())
            .unwrap_or_else(|| panic!("port {name}"))
    };
    assert_eq!(
        named_port("http"),
        port(toml_value(toml, "listen", "address"))
    );
    assert_eq!(
        named_port("admin"),
        port(toml_value(toml, "admin", "listen"))
    );

    // Probes hit the admin's readiness and liveness endpoints.
    assert_eq!(
        proxy["readinessProbe"]["httpGet"]["path"].as_str(),
        Some("/ready")
    );
    assert_eq!(
        proxy["readinessProbe"]["httpGet"]["port"].as_str(),
        Some("admin")
    );
    assert_eq!(
        proxy["livenessProbe"]["httpGet"]["path"].as_str(),
        Some("/live")
    );

    // The ConfigMap is mounted where --config looks, and the Secret where token_file points.
    let mounts = proxy["volumeMounts"].as_vec().unwrap();
    let volumes = spec["volumes"].as_vec().unwrap();
    let source_of = |path: &Path| {
        let m = mounts
            .iter()
            .find(|m| path.starts_with(str_of(&m["mountPath"], "mountPath")))
            .unwrap_or_else(|| panic!("nothing mounted at {}", path.display()));
        let name = m["name"].as_str().unwrap();
        volumes
            .iter()
            .find(|v| v["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no volume {name}"))
    };
    let config_volume = source_of(config_path);
    assert_eq!(
        config_volume["configMap"]["name"].as_str(),
        cm["metadata"]["name"].as_str()
    );
    assert_eq!(config_path.file_name().unwrap(), "proxy.toml");
    let token_volume = source_of(Path::new(token_path));
    assert!(token_volume["secret"]["secretName"].as_str().is_some());

    // The upstream is the service container, on loopback in the same pod.
    let upstream = toml_value(toml, "upstream", "addresses");
    let service = containers
        .iter()
        .find(|c| c["name"].as_str() != Some("spillway"))
        .expect("the service container");
    let service_args: Vec<&str> = service["args"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|a| str_of(a, "arg"))
        .collect();
    let listen_at = service_args.iter().position(|a| *a == "--listen").unwrap();
    assert_eq!(service_args[listen_at + 1], upstream);

    // Room to drain: the grace period outlasts the delay and the drain timeout.
    let grace = spec["terminationGracePeriodSeconds"].as_i64().unwrap() * 1000;
    let drain: i64 = toml_value(toml, "shutdown", "drain_delay_ms")
        .parse::<i64>()
        .unwrap()
        + toml_value(toml, "shutdown", "drain_timeout_ms")
            .parse::<i64>()
            .unwrap();
    assert!(grace > drain, "grace {grace} ms <= drain {drain} ms");
    assert_eq!(
        spec["securityContext"]["runAsNonRoot"].as_bool(),
        Some(true)
    );

    // The Service sends to the proxy, not around it.
    let svc = of_kind(&docs, "Service");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"].as_str(), Some("http"));
}

#[test]
fn the_dockerfile_builds_with_a_supported_rust_and_runs_unprivileged() {
    let text = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let needed = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .unwrap()
        .trim_matches('"');
    let given = text
        .lines()
        .find_map(|l| l.strip_prefix("ARG RUST_VERSION="))
        .expect("ARG RUST_VERSION=");
    let v = |s: &str| -> Vec<u32> { s.split('.').map(|p| p.parse().unwrap()).collect() };
    assert!(
        v(given) >= v(needed),
        "Dockerfile Rust {given} < rust-version {needed}"
    );
    assert!(
        text.contains("FROM docker.io/library/rust:${RUST_VERSION}"),
        "the build stage uses the ARG"
    );
    assert!(text.contains("cargo build --release --locked --bin spillway"));
    let froms = text.lines().filter(|l| l.starts_with("FROM ")).count();
    assert!(froms >= 2, "multi-stage");
    let user = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER line");
    assert!(
        !user.starts_with('0') && !user.starts_with("root"),
        "USER {user}"
    );
    assert!(text.contains("COPY --from=build /src/target/release/spillway"));
}
