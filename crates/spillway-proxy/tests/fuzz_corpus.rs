//! The kept fuzz corpora (`fuzz/corpus/TARGET/`, minimised with `cargo fuzz cmin`) and the
//! inputs that once failed (`fuzz/regressions/TARGET/`) run through the same checks as the fuzz
//! targets, on stable: a regression in any of the parsers the fuzzers cover is caught by
//! `cargo test` without nightly. The checks themselves are in
//! `spillway_proxy::fuzzing`; docs/fuzzing.md says what each target checks and how the corpora
//! were made.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// The files of `dir`, sorted (none when it does not exist).
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("a directory entry").path())
        .collect();
    files.sort();
    files
}

/// Runs every file of `target`'s kept corpus, and of its regressions (`fuzz/regressions/TARGET`:
/// inputs that once failed, kept by name whether or not they add coverage), through its
/// harness; fails naming the files that failed (and how many ran).
fn run(target: &str) {
    let (_, harness) = spillway_proxy::fuzzing::TARGETS
        .into_iter()
        .find(|(name, _)| *name == target)
        .expect("a target of that name");
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let corpus = files(&fuzz.join("corpus").join(target));
    assert!(!corpus.is_empty(), "{target}: no kept corpus");
    let all: Vec<PathBuf> = corpus
        .into_iter()
        .chain(files(&fuzz.join("regressions").join(target)))
        .collect();
    let mut failed = Vec::new();
    for f in &all {
        let data = std::fs::read(f).expect("a corpus file");
        if catch_unwind(AssertUnwindSafe(|| harness(&data))).is_err() {
            failed.push(f.display().to_string());
        }
    }
    eprintln!("{target}: {} inputs", all.len());
    assert!(
        failed.is_empty(),
        "{} of {} inputs of {target} failed: {failed:#?}",
        failed.len(),
        all.len()
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
