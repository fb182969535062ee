//! The kept fuzz corpora (`fuzz/corpus/TARGET/`, minimised with `cargo fuzz cmin`) run through
//! the same checks as the fuzz targets, on stable: a regression in any of the parsers the
//! fuzzers cover is caught by `cargo test` without nightly. The checks themselves are in
//! `spillway_proxy::fuzzing`; docs/fuzzing.md says what each target checks and how the corpora
//! were made.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// Runs every file of `target`'s corpus through its harness; fails naming the files that
/// failed (and how many ran).
fn run(target: &str) {
    let (_, harness) = spillway_proxy::fuzzing::TARGETS
        .into_iter()
        .find(|(name, _)| *name == target)
        .expect("a target of that name");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{}: no corpus", dir.display());
    let mut failed = Vec::new();
    for f in &files {
        let data = std::fs::read(f).expect("a corpus file");
        if catch_unwind(AssertUnwindSafe(|| harness(&data))).is_err() {
            failed.push(f.display().to_string());
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} inputs of {target} failed: {failed:#?}",
        failed.len(),
        files.len()
    );
}

#[test]
fn request_head_corpus() {
    run("request_head");
}

#[test]
fn chunked_corpus() {
    run("chunked");
}

#[test]
fn response_head_corpus() {
    run("response_head");
}

#[test]
fn path_route_corpus() {
    run("path_route");
}

#[test]
fn config_corpus() {
    run("config");
}

#[test]
fn header_values_corpus() {
    run("header_values");
}

#[test]
fn orca_corpus() {
    run("orca");
}

/// Every target the harnesses define has a test above (and so a kept corpus).
#[test]
fn every_target_is_run() {
    let names: Vec<&str> = spillway_proxy::fuzzing::TARGETS
        .iter()
        .map(|(n, _)| *n)
        .collect();
    assert_eq!(
        names,
        [
            "request_head",
            "chunked",
            "response_head",
            "path_route",
            "config",
            "header_values",
            "orca"
        ]
    );
}
