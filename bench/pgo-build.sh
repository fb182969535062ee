#!/usr/bin/env bash
# A profile-guided (PGO) build of `spillway`, trained on the proxy benchmark's own workload and
# on the simulator's fleet scenarios.
#
# Why: the proxy's forwarding path is larger than the 32 KiB instruction cache (cachegrind:
# ~2,600 I1 misses on each ~41,000-instruction forwarded request, bench/results/
# proxy-forwarding.md, sixth round), so where code sits matters as much as how much of it runs.
# With a profile LLVM knows which branches and functions are hot: it inlines along the hot
# path, lays hot blocks out together and moves cold ones (error paths, start-up) out of the way
# (rustc book, "Profile-guided Optimization"; LLVM's `-fprofile-instr-generate/-use` scheme).
# Whether it pays is measured in proxy-forwarding.md, "Sixth round, part 2", and for the
# simulator (whose 10⁴-task fleet is bound by memory more than by code) in sim-speed.md,
# "Twelfth round".
#
#   bench/pgo-build.sh                 # -> /tmp/spillway-pgo (prints the path at the end)
#   PGO_TARGET=/tmp/t OUT=/tmp/bin TRAIN_SECS=5 bench/pgo-build.sh
#   TRAIN=sim bench/pgo-build.sh       # train the simulator only (no wrk needed)
#
# Steps: (1) `cargo build --release` (the workspace's release profile: fat LTO, one codegen
# unit) with RUSTFLAGS=-Cprofile-generate in its own target dir, PGO_TARGET (/tmp/pgo-target),
# so the shared target/ is untouched; (2) training, on 127.0.0.1 only, every phase bounded:
# `spillway backend` (1 ms sleep, as bench/overhead/ab.sh) behind `spillway proxy` in ab.sh's
# fixed-limit configuration and in its zero-config one, each driven by wrk (-t1 -c64,
# TRAIN_SECS) and by `spillway load` with four criticalities, then a proxy with a fixed limit of
# 2 under `spillway load` past it, so the refusal path (429/503) is trained too; then
# `spillway sim` on the fleet in one loop and in two shards and on `fleet-million-clients` in
# two (a few simulated seconds each), then on every other shipped scenario; (3) merging the
# proxy's and the simulator's raw profiles (not the backend's or the load generator's: they
# write theirs elsewhere, LLVM_PROFILE_FILE) with llvm-profdata; (4) the release build again
# with -Cprofile-use (functions without a profile are left as they are, without warnings:
# -pgo-warn-missing-function is not passed). The instrumented build's artefacts are deleted at
# the end unless KEEP_TARGET=1; the merged profile stays in PGO_TARGET.
#
# TRAIN (default "proxy sim") names the workloads trained: "proxy", "sim" or both.
#
# Needs: rustup's llvm-tools component (llvm-profdata of rustc's own LLVM version — a distro
# llvm-profdata of another version cannot read rustc's raw profiles), wrk (for "proxy"), and
# ~2 clean release builds of time (with fat LTO on 2 shared cores: 159 s instrumented from
# clean, ~2 min optimised; the whole script 5 min 11 s with dependencies already built).
set -euo pipefail
cd "$(dirname "$0")/.."
PGO_TARGET=${PGO_TARGET:-/tmp/pgo-target}
OUT=${OUT:-/tmp/spillway-pgo}
TRAIN_SECS=${TRAIN_SECS:-8}
TRAIN=${TRAIN:-proxy sim}
BACKEND=127.0.0.1:21481
PROXY=127.0.0.1:21482

. bench/lib/procs.sh

die() { echo "pgo-build: $*" >&2; exit 1; }
case "$TRAIN_SECS" in
  [1-9] | [1-5][0-9] | 60) ;;
  *) die "TRAIN_SECS must be a whole number of seconds from 1 to 60 (got '$TRAIN_SECS')" ;;
esac
train_proxy=0 train_sim=0
for w in $TRAIN; do
  case "$w" in
    proxy) train_proxy=1 ;;
    sim) train_sim=1 ;;
    *) die "TRAIN names the workloads to train, \"proxy\", \"sim\" or both (got '$w')" ;;
  esac
done
[ $((train_proxy + train_sim)) -gt 0 ] || die "TRAIN names no workload (accepted: \"proxy\", \"sim\" or both)"
have cargo && have rustc || die "needs cargo and rustc (https://rustup.rs)"
[ "$train_proxy" = 0 ] || have wrk || die "needs wrk for the training load (Debian/Ubuntu: apt-get install wrk)"
HOST=$(rustc -vV | awk '/^host:/ {print $2}')
RUSTC_LLVM=$(rustc -vV | awk '/^LLVM version:/ {split($3, v, "."); print v[1]}')
PROFDATA=${LLVM_PROFDATA:-$(rustc --print sysroot)/lib/rustlib/$HOST/bin/llvm-profdata}
[ -x "$PROFDATA" ] || die "needs llvm-profdata of rustc's LLVM $RUSTC_LLVM at $PROFDATA: run
  rustup component add llvm-tools
(or set LLVM_PROFDATA to an llvm-profdata of LLVM $RUSTC_LLVM)"
PROF_LLVM=$({ "$PROFDATA" merge --version 2>&1 || true; } | sed -nE 's/.*LLVM version ([0-9]+).*/\1/p' | head -1)
[ "$PROF_LLVM" = "$RUSTC_LLVM" ] ||
  die "$PROFDATA is LLVM ${PROF_LLVM:-?}, rustc is LLVM $RUSTC_LLVM: raw profiles only merge with the same major version (rustup component add llvm-tools)"

# RUSTFLAGS also instruments build scripts and proc macros (without --target cargo builds them
# with the same flags), which write their profiles while the workspace compiles: those go to
# the -Cprofile-generate directory, DISCARD, with the backend's and the load generator's; the
# proxy's and the simulator's go to PROFILES by LLVM_PROFILE_FILE, and only those are merged.
PROFILES=$PGO_TARGET/profiles      # the proxy's and the simulator's raw profiles: merged
DISCARD=$PGO_TARGET/other-profiles # build scripts', the backend's, the load generator's
MERGED=$PGO_TARGET/spillway.profdata
INSTRUMENTED=$PGO_TARGET/spillway-instrumented
rm -rf "$PROFILES" "$DISCARD"
mkdir -p "$PROFILES" "$DISCARD"

build() { # $1 = extra RUSTFLAGS; the workspace's release profile, in PGO_TARGET
  local t0=$SECONDS
  RUSTFLAGS="${RUSTFLAGS:-} $1" cargo build --release --locked -p spillway --bin spillway \
    --target-dir "$PGO_TARGET"
  echo "pgo-build: built in $((SECONDS - t0)) s with RUSTFLAGS+='$1'"
}

echo "pgo-build: 1/4 instrumented build (-Cprofile-generate) in $PGO_TARGET"
build "-Cprofile-generate=$DISCARD"
cp "$PGO_TARGET/release/spillway" "$INSTRUMENTED"

echo "pgo-build: 2/4 training ($TRAIN; the proxy on 127.0.0.1, ${TRAIN_SECS} s per phase)"
WORK=$(mktemp -d)
if [ "$train_proxy" = 1 ]; then
  LLVM_PROFILE_FILE="$DISCARD/backend-%p.profraw" "$INSTRUMENTED" backend --listen "$BACKEND" \
    --workers 2048 --service-time 1ms --dist constant --cpu sleep --duration 600s \
    >"$WORK/backend.log" 2>&1 &
  BACKEND_PID=$!
  PIDS+=($BACKEND_PID)
  wait_port "$BACKEND" || die "the training backend did not listen on $BACKEND: $(cat "$WORK/backend.log")"

  # The configurations of bench/overhead/ab.sh (fixed, zeroconf) and one that refuses.
  printf '[listen]\naddress = "%s"\n[upstream]\naddresses = ["%s"]\nmax_requests_per_task = 1024\nmax_idle_per_task = 1024\n[admission.limit]\nalgorithm = "fixed"\nlimit = 10000\n[classify]\ntrusted = ["127.0.0.0/8"]\n[admin]\nenabled = false\n' \
    "$PROXY" "$BACKEND" >"$WORK/fixed.toml"
  printf '[listen]\naddress = "%s"\n[upstream]\naddresses = ["%s"]\n[admin]\nenabled = false\n' \
    "$PROXY" "$BACKEND" >"$WORK/zeroconf.toml"
  printf '[listen]\naddress = "%s"\n[upstream]\naddresses = ["%s"]\n[admission.limit]\nalgorithm = "fixed"\nlimit = 2\n[classify]\ntrusted = ["127.0.0.0/8"]\n[admin]\nenabled = false\n' \
    "$PROXY" "$BACKEND" >"$WORK/refusing.toml"

  CLASSES=(--class criticality=CRITICAL_PLUS,customer=a --class criticality=CRITICAL,customer=b
    --class criticality=SHEDDABLE_PLUS,customer=c --class criticality=SHEDDABLE,customer=d,weight=2)
  load() { # $1 = rate, $2 = seconds: criticality-tagged open-loop traffic, one attempt each
    LLVM_PROFILE_FILE="$DISCARD/load-%p.profraw" "$INSTRUMENTED" load --target "$PROXY" \
      --rate "$1" --duration "${2}s" --attempts 1 --timeout 1s --quiet "${CLASSES[@]}" \
      --json "$WORK/load.json" >/dev/null
  }
  train() { # $1 = configuration name; $2 = wrk (yes/no); $3 = load rate
    local pid i
    LLVM_PROFILE_FILE="$PROFILES/proxy-$1-%p.profraw" "$INSTRUMENTED" proxy \
      --config "$WORK/$1.toml" >"$WORK/$1.log" 2>&1 &
    pid=$!
    PIDS+=($pid)
    wait_port "$PROXY" || die "the instrumented proxy ($1) did not listen: $(cat "$WORK/$1.log")"
    if [ "$2" = yes ]; then
      wrk -t1 -c64 -d"${TRAIN_SECS}s" "http://$PROXY/" | awk -v c="$1" '/Requests\/sec/ {print "pgo-build:   " c ": wrk " $2 " req/s"}'
    fi
    load "$3" "$TRAIN_SECS" || die "spillway load against the $1 proxy failed"
    python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))[0]["summary"]; print("pgo-build:   " + sys.argv[2] + ": load", {k: s[k] for k in ("sent", "goodput") if k in s})' \
      "$WORK/load.json" "$1" 2>/dev/null || true
    # SIGTERM: the proxy shuts down and returns from main, which writes its profile (a kill -9
    # would write nothing).
    kill -TERM "$pid"
    for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && die "the instrumented proxy ($1) did not exit within 10 s of SIGTERM"
    stop "$pid"
  }
  train fixed yes 2000
  train zeroconf yes 2000
  train refusing no 4000
  ls "$PROFILES"/proxy-*.profraw >/dev/null 2>&1 || die "the proxy wrote no profile into $PROFILES"
  stop "$BACKEND_PID"
fi

# The simulator: the fleet (10⁴ tasks) in one loop and in two shards with a network delay, as
# bench/sim/shards.sh measures it, then every other shipped scenario whole (each runs in
# seconds). Each run is bounded by its simulated duration.
if [ "$train_sim" = 1 ]; then
  sim() { # the arguments of one `spillway sim` run
    LLVM_PROFILE_FILE="$PROFILES/sim-%p.profraw" "$INSTRUMENTED" sim "$@" --json "$WORK/sim.json" \
      >"$WORK/sim.log" 2>&1 || die "spillway sim $* failed: $(tail -3 "$WORK/sim.log")"
    echo "pgo-build:   sim $*: $(grep -o 'in [0-9.]* s wall.*' "$WORK/sim.log" | head -1)"
  }
  sim fleet --duration 5 --network-ms 0.5 --shards 2
  sim fleet --duration 4
  sim fleet-million-clients --duration 3 --network-ms 0.5 --shards 2
  for name in retry-amplification local-overload datacenter-overload metastable customer-quotas \
    criticality-spike demo mmc; do
    sim "$name"
  done
fi

echo "pgo-build: 3/4 merging $(ls "$PROFILES"/*.profraw | wc -l) raw profiles -> $MERGED"
"$PROFDATA" merge -o "$MERGED" "$PROFILES"/*.profraw

echo "pgo-build: 4/4 optimised build (-Cprofile-use)"
build "-Cprofile-use=$MERGED"
cp "$PGO_TARGET/release/spillway" "$OUT"
rm -rf "$WORK" "$DISCARD"
if [ "${KEEP_TARGET:-0}" != 1 ]; then
  rm -rf "$PGO_TARGET/release" "$INSTRUMENTED" "$PROFILES"
fi
echo "pgo-build: done: $OUT (profile: $MERGED)"
