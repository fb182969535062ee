//! The examples run as tests (each serves on loopback, checks what it sees and stops), and the
//! README's Rust snippets are checked to be the examples' code, so what a reader copies is what
//! CI compiled and ran.

#[path = "../examples/axum_quickstart.rs"]
mod axum_quickstart;
#[path = "../examples/axum_service.rs"]
mod axum_service;
#[path = "../examples/tonic_service.rs"]
mod tonic_service;

#[test]
fn axum_quickstart_example_passes_its_checks() {
    axum_quickstart::main().unwrap();
}

#[test]
fn axum_service_example_passes_its_checks() {
    axum_service::main().unwrap();
}

#[test]
fn tonic_service_example_passes_its_checks() {
    tonic_service::main().unwrap();
}

const README: &str = include_str!("../../../README.md");

/// The lines of `source` between `// {tag}:begin` and `// {tag}:end`.
fn region(source: &str, tag: &str) -> Option<String> {
    let begin = format!("// {tag}:begin");
    let end = format!("// {tag}:end");
    let mut lines = source.lines().skip_while(|l| l.trim() != begin);
    lines.next()?;
    let body: Vec<&str> = lines.take_while(|l| l.trim() != end).collect();
    Some(body.join("\n"))
}

/// Every ```rust block of the README follows a `<!-- snippet: PATH TAG -->` marker and is that
/// region of that file, byte for byte.
#[test]
fn readme_rust_snippets_are_the_examples_code() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../");
    let lines: Vec<&str> = README.lines().collect();
    let mut checked = 0;
    for (i, line) in lines.iter().enumerate() {
        if line.trim() != "```rust" {
            continue;
        }
        let marker = lines[..i]
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .and_then(|l| l.trim().strip_prefix("<!-- snippet: "))
            .and_then(|l| l.strip_suffix(" -->"))
            .unwrap_or_else(|| {
                panic!(
                    "README line {}: a Rust block without a `<!-- snippet: PATH TAG -->` marker",
                    i + 1
                )
            });
        let (path, tag) = marker.split_once(' ').expect("marker is `PATH TAG`");
        let source = std::fs::read_to_string(format!("{root}{path}"))
            .unwrap_or_else(|e| panic!("README line {}: {path}: {e}", i + 1));
        let want =
            region(&source, tag).unwrap_or_else(|| panic!("{path} has no `// {tag}:begin` region"));
        let block: Vec<&str> = lines[i + 1..]
            .iter()
            .take_while(|l| l.trim() != "```")
            .copied()
            .collect();
        assert_eq!(
            block.join("\n"),
            want,
            "README line {}: the snippet differs from {path} ({tag}); copy the region again",
            i + 1
        );
        checked += 1;
    }
    assert!(
        checked >= 2,
        "the README shows the server and client snippets"
    );
}
