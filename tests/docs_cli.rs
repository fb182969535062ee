//! `spillway completions` and `spillway man`: generated from clap, non-empty, and naming every
//! subcommand (so a new subcommand cannot be missing from them).

use std::process::{Command, Output};

const SUBCOMMANDS: [&str; 8] = [
    "calc",
    "load",
    "backend",
    "demo",
    "proxy",
    "sim",
    "completions",
    "man",
];

fn spillway(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(args)
        .output()
        .expect("the spillway binary runs")
}

fn stdout_of(args: &[&str]) -> String {
    let o = spillway(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).expect("UTF-8 output")
}

#[test]
fn completions_name_every_subcommand_in_every_shell() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = stdout_of(&["completions", shell]);
        assert!(script.len() > 1000, "{shell}: {} bytes", script.len());
        for sub in SUBCOMMANDS {
            assert!(script.contains(sub), "{shell} completions miss {sub}");
        }
        // Flags of a subcommand are completed too, e.g. the new load flags.
        assert!(script.contains("allow-remote"), "{shell}: --allow-remote");
    }
    let o = spillway(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn man_page_names_every_subcommand() {
    let page = stdout_of(&["man"]);
    assert!(page.starts_with(".ie") || page.contains(".TH"), "{page}");
    assert!(page.contains("spillway"));
    for sub in SUBCOMMANDS {
        assert!(page.contains(sub), "the man page misses {sub}");
    }
}

#[test]
fn man_out_dir_writes_a_page_per_command() {
    let dir = std::env::temp_dir().join(format!("spillway-man-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    stdout_of(&["man", "--out-dir", dir.to_str().unwrap()]);
    for sub in SUBCOMMANDS {
        let page = std::fs::read_to_string(dir.join(format!("spillway-{sub}.1")))
            .unwrap_or_else(|e| panic!("spillway-{sub}.1: {e}"));
        assert!(page.contains(".TH"), "spillway-{sub}.1 is not a man page");
    }
    let load = std::fs::read_to_string(dir.join("spillway-load.1")).unwrap();
    assert!(load.contains("allow\\-remote") || load.contains("allow-remote"));
    assert!(dir.join("spillway.1").exists());
    std::fs::remove_dir_all(&dir).ok();
}
