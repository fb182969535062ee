//! The proxy's top-level modules as a graph of their imports, checked for cycles.
//!
//! Why a test: "the layers run one way" (listener → forward → upstream → http1) is a property
//! of the code, and a claim in a document drifts the day someone adds one `use`. This test
//! reads `src/` the way a newcomer would — every `crate::<module>` path outside comments and
//! unit tests (files named `tests.rs`, `*_tests.rs` or under a `tests/` folder: a test may
//! build what it checks from anywhere) is an edge from the file's top-level module to that
//! module — and fails on any cycle, naming it.
//!
//! The layers, from the top: listener → forward → state → body (the response bodies) →
//! upstream → request_body → http1, with `progress`, `tls`, `path` and the protocol layer
//! importing nothing of the proxy. `cargo test -p spillway-proxy --test module_layers --
//! --nocapture` prints the graph by layer.
//!
//! [`KNOWN_BACK_EDGES`] is where an import allowed to run upwards would be listed, with what it
//! would take to remove it; it is empty (issue 30 removed the last three), and adding an entry
//! to make a new cycle pass is a design decision, to be made in review, not to silence this
//! test.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Imports that still run against the layering, as (from, to, what would remove it).
const KNOWN_BACK_EDGES: &[(&str, &str, &str)] = &[];

/// The protocol layer, the modules that own their option types below `config` (the TLS
/// loaders, the path normaliser), and a client connection's progress (which every layer a
/// request passes through reports to): they must import nothing of the proxy's own.
const BOTTOM: &[&str] = &["http1", "read_buffer", "tls", "path", "progress"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Whether `rel` (relative to src/) holds unit tests only.
fn is_test_file(rel: &Path) -> bool {
    let name = rel.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || rel.components().any(|c| c.as_os_str() == "tests")
}

/// The top-level modules `text` refers to as `crate::<name>`, outside comments.
fn referenced(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let preceded_by_ident = rest[..at]
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || c == '_');
            let after = &rest[at + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !preceded_by_ident && !name.is_empty() {
                found.insert(name);
            }
            rest = after;
        }
    }
    found
}

/// module → (module it imports → the files that do).
type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

fn graph() -> Graph {
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut g = Graph::new();
    for path in files {
        let rel = path.strip_prefix(&root).expect("under src/").to_path_buf();
        if is_test_file(&rel) {
            continue;
        }
        let first = rel.components().next().expect("a component");
        let top = first
            .as_os_str()
            .to_str()
            .expect("UTF-8 names")
            .trim_end_matches(".rs")
            .to_string();
        if top == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("readable source");
        let node = g.entry(top.clone()).or_default();
        for to in referenced(&text) {
            if to != top {
                node.entry(to)
                    .or_default()
                    .insert(rel.display().to_string());
            }
        }
    }
    g
}

/// Each module's layer: 0 for one that imports no other, else one more than the highest layer
/// it imports (`g` must be acyclic).
fn layers(g: &Graph) -> BTreeMap<String, usize> {
    fn layer(g: &Graph, at: &str, done: &mut BTreeMap<String, usize>) -> usize {
        if let Some(&l) = done.get(at) {
            return l;
        }
        let l = g
            .get(at)
            .into_iter()
            .flat_map(|e| e.keys())
            .map(|to| layer(g, to, done) + 1)
            .max()
            .unwrap_or(0);
        done.insert(at.to_string(), l);
        l
    }
    let mut done = BTreeMap::new();
    for m in g.keys() {
        layer(g, m, &mut done);
    }
    done
}

/// A cycle in `g`, if there is one, as the modules along it.
fn find_cycle(g: &Graph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        g: &Graph,
        at: &str,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(at) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let from = path.iter().position(|m| m == at).unwrap_or(0);
                let mut cycle = path[from..].to_vec();
                cycle.push(at.to_string());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(at.to_string(), Mark::Open);
        path.push(at.to_string());
        for to in g.get(at).into_iter().flat_map(|e| e.keys()) {
            if let Some(c) = visit(g, to, marks, path) {
                return Some(c);
            }
        }
        path.pop();
        marks.insert(at.to_string(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for start in g.keys() {
        if let Some(c) = visit(g, start, &mut marks, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

/// The graph without the imports [`KNOWN_BACK_EDGES`] allows.
fn layered_graph() -> Graph {
    let mut g = graph();
    for (from, to, _) in KNOWN_BACK_EDGES {
        if let Some(e) = g.get_mut(*from) {
            e.remove(*to);
        }
    }
    g
}

#[test]
fn the_top_level_modules_form_a_dag_once_the_known_back_edges_are_set_aside() {
    let g = layered_graph();
    if let Some(cycle) = find_cycle(&g) {
        let hops: Vec<String> = cycle
            .windows(2)
            .map(|w| format!("{} -> {} (in {:?})", w[0], w[1], g[&w[0]][&w[1]]))
            .collect();
        panic!(
            "the proxy's modules import each other in a cycle:\n  {}",
            hops.join("\n  ")
        );
    }
    let layers = layers(&g);
    let top = layers.values().copied().max().unwrap_or(0);
    for l in (0..=top).rev() {
        for (m, _) in layers.iter().filter(|(_, &ml)| ml == l) {
            let to: Vec<&str> = g
                .get(m)
                .into_iter()
                .flat_map(|e| e.keys().map(String::as_str))
                .collect();
            eprintln!("layer {l:2}: {m} -> {}", to.join(", "));
        }
    }
}

#[test]
fn a_request_runs_down_the_layers() {
    let g = layered_graph();
    assert!(find_cycle(&g).is_none(), "a cycle: see the test above");
    let layers = layers(&g);
    let path = [
        "listener",
        "forward",
        "body",
        "upstream",
        "request_body",
        "http1",
    ];
    for pair in path.windows(2) {
        let (above, below) = (pair[0], pair[1]);
        assert!(
            layers[above] > layers[below],
            "{above} (layer {}) must sit above {below} (layer {})",
            layers[above],
            layers[below]
        );
    }
}

#[test]
fn every_known_back_edge_still_exists() {
    let g = graph();
    for (from, to, why) in KNOWN_BACK_EDGES {
        assert!(
            g.get(*from).is_some_and(|e| e.contains_key(*to)),
            "{from} no longer imports {to} ({why}): remove the entry from KNOWN_BACK_EDGES"
        );
    }
}

#[test]
fn the_protocol_layer_imports_nothing_of_the_proxy() {
    let g = graph();
    assert!(
        g.contains_key("http1"),
        "src/http1 is where the codecs live"
    );
    for bottom in BOTTOM {
        let up: Vec<_> = g.get(*bottom).into_iter().flat_map(|e| e.keys()).collect();
        assert!(up.is_empty(), "{bottom} imports {up:?}");
    }
}

#[test]
fn config_does_not_import_admin() {
    let g = graph();
    let admin = g.get("config").and_then(|e| e.get("admin"));
    assert!(admin.is_none(), "config imports admin in {admin:?}");
}

#[test]
fn a_reference_is_found_in_code_and_not_in_comments() {
    let text = "use crate::upstream::Pool;\n// crate::admin in a comment\n\
                let x = crate::metrics::Fault::Io; // and crate::state here\n\
                use spillway_core::crate_like::x;";
    let found: Vec<String> = referenced(text).into_iter().collect();
    assert_eq!(found, ["metrics", "upstream"]);
}
