//! `spillway completions SHELL` and `spillway man`: shell completions and manual pages,
//! generated from the same clap definitions the binary parses with.
//!
//! Why subcommands rather than files generated at build time: they cannot drift from the
//! binary that prints them, packagers get them with one command (`spillway completions bash >
//! /usr/share/bash-completion/completions/spillway`), and the build stays free of a build script.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Command};
use clap_complete::Shell;

/// `spillway completions` arguments.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: Shell,
}

/// `spillway man` arguments.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write a page per command (spillway.1, spillway-load.1, …) into this directory instead of
    /// printing spillway.1 to stdout.
    #[arg(long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
}

/// Prints the completion script for `args.shell`.
pub fn completions(args: &CompletionsArgs, mut cmd: Command) -> Result<()> {
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "spillway", &mut out);
    std::io::stdout().write_all(&out)?;
    Ok(())
}

/// Prints the top-level page, or writes every page into `--out-dir`.
pub fn man(args: &ManArgs, cmd: Command) -> Result<()> {
    match &args.out_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating --out-dir {}", dir.display()))?;
            clap_mangen::generate_to(cmd, dir)
                .with_context(|| format!("writing pages into {}", dir.display()))?;
        }
        None => {
            let mut out = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut out)?;
            std::io::stdout().write_all(&out)?;
        }
    }
    Ok(())
}
