#!/usr/bin/env bash
# A/B of `spillway sim` builds on one scenario, in alternated rounds (A B, then B A, ...), so a
# slow spell of the shared machine hits both builds alike. Prints each run's wall, user and
# system time and peak RSS, then the sums, their ratio and in how many rounds B was faster.
#
#   flock /work/measure.lock bench/sim/ab.sh ROUNDS BIN_A BIN_B [SIM ARGS ...]
#
# SIM ARGS default to `fleet --scale 1` (10⁴ tasks, 60 simulated s, 12.0 M requests: the
# speed target's case). Builds to compare: `cargo build --release -p spillway`, copied aside
# (a `git worktree` or `git archive` of the other commit, in its own target directory).
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 ROUNDS BIN_A BIN_B [SIM ARGS ...]" >&2; exit 2; }
rounds=$1 a=$2 b=$3; shift 3
case "$rounds" in '' | *[!0-9]* | 0) echo "ROUNDS must be a positive integer (got $rounds)" >&2; exit 2 ;; esac
for bin in "$a" "$b"; do [ -x "$bin" ] || { echo "not an executable: $bin" >&2; exit 2; }; done
[ $# -gt 0 ] || set -- fleet --scale 1
echo "uptime before: $(uptime)"
sum_a=0 sum_b=0 wins=0
run() { # BIN SIM-ARGS... -> wall seconds on stdout; the run's line on stderr
  local bin=$1 out; shift
  out=$(/usr/bin/time -f "%e s wall %U user %S sys %M KB" "$bin" sim "$@" 2>&1 >/dev/null | tail -1)
  echo "$bin: $out" >&2
  echo "${out%% s wall*}"
}
for i in $(seq "$rounds"); do
  if [ $((i % 2)) -eq 1 ]; then
    ta=$(run "$a" "$@"); tb=$(run "$b" "$@")
  else
    tb=$(run "$b" "$@"); ta=$(run "$a" "$@")
  fi
  sum_a=$(python3 -c "print($sum_a + $ta)"); sum_b=$(python3 -c "print($sum_b + $tb)")
  wins=$(python3 -c "print($wins + ($tb < $ta))")
done
echo "uptime after: $(uptime)"
python3 -c "print(f'sum A {$sum_a:.2f} s, sum B {$sum_b:.2f} s: A/B {$sum_a / $sum_b:.3f}x; B faster in $wins of $rounds rounds')"
