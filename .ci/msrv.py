#!/usr/bin/env python3
"""Checks that each workspace crate's `rust-version` is not older than what its dependencies need,
for every feature, not only the default ones.

Why: a `rust-version` that is lower than a dependency's is a false promise — a user on that
toolchain gets a build error from the dependency, not from us. Only one toolchain can be
installed on the build machines, so the MSRV is verified in two halves: this script takes, for
every workspace crate, the highest `rust-version` declared by the packages in its normal and
build dependency graph (as locked in Cargo.lock, for Linux), and clippy's `incompatible_msrv`
(run by .ci/run) checks the standard-library APIs our own code calls against the declared value.

Why per feature: an optional feature can pull in a dependency that needs a newer Rust than the
crate (spillway-tower's `fleet`: redis → url → idna → icu_* need 1.88, the crate 1.85), and
Cargo's `rust-version` cannot be per feature. Such a feature declares its own minimum in the
crate's manifest, and its docs say so:

    [package.metadata.spillway.feature-rust-version]
    fleet = "1.88"

Each crate is checked with its default features, with each feature alone (its minimum: the
highest declared by it and the features it turns on, else the crate's `rust-version`), and with
all of them. A feature that needs more than it declares, or a declaration for a feature that
does not exist, fails the check.

Exit status 1 names each crate and feature set whose declared value is too old, and the
dependency that needs more.
"""
import json
import subprocess
import sys

TARGET = "x86_64-unknown-linux-gnu"


def version_key(v):
    parts = [int(x) for x in v.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def closure(features, table):
    """The features `features` turn on within the crate (`dep:` and `crate/feature` left out)."""
    seen, todo = set(), list(features)
    while todo:
        f = todo.pop()
        if f in seen or f not in table:
            continue
        seen.add(f)
        todo.extend(x for x in table[f] if not x.startswith("dep:") and "/" not in x)
    return seen


def need_of(crate, flags, by_id, floor):
    """The highest rust-version in `crate`'s normal and build graph with `flags`, and who."""
    tree = subprocess.check_output(
        ["cargo", "tree", "--locked", "-e", "normal,build", "-p", crate, "--target", TARGET,
         "--prefix", "none", "--format", "{p}", *flags],
        text=True,
    )
    need, who = floor, crate
    for line in tree.splitlines():
        parts = line.split()
        if len(parts) < 2 or not parts[1].startswith("v"):
            continue
        rv = by_id.get((parts[0], parts[1][1:]))
        if rv and version_key(rv) > version_key(need):
            need, who = rv, f"{parts[0]} {parts[1]}"
    return need, who


def main():
    meta = json.loads(
        subprocess.check_output(["cargo", "metadata", "--format-version", "1", "--locked"])
    )
    by_id = {}
    members = []
    for p in meta["packages"]:
        by_id[(p["name"], p["version"])] = p.get("rust_version")
        if p["id"] in meta["workspace_members"]:
            members.append(p)
    failures = []
    for p in sorted(members, key=lambda p: p["name"]):
        crate, own = p["name"], p.get("rust_version")
        if own is None:
            failures.append(f"{crate}: no rust-version declared")
            continue
        table = p.get("features", {})
        declared = (
            ((p.get("metadata") or {}).get("spillway") or {}).get("feature-rust-version") or {}
        )
        for f in declared:
            if f not in table:
                failures.append(f"{crate}: feature-rust-version names {f!r}, not a feature")
        # (label, cargo flags, features turned on beyond the defaults)
        sets = [("default features", [], closure(table.get("default", []), table))]
        for f in sorted(table):
            if f != "default":
                sets.append((f"feature {f}", ["--features", f], closure([f], table)))
        if len(sets) > 2:
            sets.append(("all features", ["--all-features"], set(table) - {"default"}))
        for label, flags, on in sets:
            promised = max([own] + [declared[f] for f in on if f in declared], key=version_key)
            need, who = need_of(crate, flags, by_id, promised)
            too_old = version_key(need) > version_key(promised)
            status = f"TOO OLD: {who} needs {need}" if too_old else "ok"
            print(f"{crate} ({label}): rust-version {promised}: {status}")
            if too_old:
                failures.append(f"{crate} ({label}): declares {promised}, but {who} needs {need}")
    if failures:
        print("\n".join(failures), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
