#!/usr/bin/env python3
"""Checks that each workspace crate's `rust-version` is not older than what its dependencies need.

Why: a `rust-version` that is lower than a dependency's is a false promise — a user on that
toolchain gets a build error from the dependency, not from us. Only one toolchain can be
installed on the build machines, so the MSRV is verified in two halves: this script takes, for
every workspace crate, the highest `rust-version` declared by the packages in its normal and
build dependency graph (as locked in Cargo.lock, for Linux), and clippy's `incompatible_msrv`
(run by .ci/run) checks the standard-library APIs our own code calls against the declared value.

Exit status 1 names each crate whose declared value is too old, and the dependency that needs more.
"""
import json
import subprocess
import sys

TARGET = "x86_64-unknown-linux-gnu"


def version_key(v):
    parts = [int(x) for x in v.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def main():
    meta = json.loads(
        subprocess.check_output(["cargo", "metadata", "--format-version", "1", "--locked"])
    )
    declared = {}
    by_id = {}
    for p in meta["packages"]:
        by_id[(p["name"], p["version"])] = p.get("rust_version")
        if p["id"] in meta["workspace_members"]:
            declared[p["name"]] = p.get("rust_version")
    failures = []
    for crate, own in sorted(declared.items()):
        if own is None:
            failures.append(f"{crate}: no rust-version declared")
            continue
        tree = subprocess.check_output(
            ["cargo", "tree", "--locked", "-e", "normal,build", "-p", crate, "--target", TARGET,
             "--prefix", "none", "--format", "{p}"],
            text=True,
        )
        need, who = own, crate
        for line in tree.splitlines():
            parts = line.split()
            if len(parts) < 2 or not parts[1].startswith("v"):
                continue
            rv = by_id.get((parts[0], parts[1][1:]))
            if rv and version_key(rv) > version_key(need):
                need, who = rv, f"{parts[0]} {parts[1]}"
        too_old = version_key(need) > version_key(own)
        status = f"TOO OLD: {who} needs {need}" if too_old else "ok"
        print(f"{crate}: rust-version {own}: {status}")
        if too_old:
            failures.append(f"{crate}: declares {own}, but {who} needs {need}")
    if failures:
        print("\n".join(failures), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
