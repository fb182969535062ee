#!/usr/bin/env bash
# The most a 2-shard simulator could gain on this machine: the 10⁴-task fleet alone, half of
# it alone, and two independent halves at once (what a parallel engine with free
# synchronisation would run), per round. See bench/results/sim-speed.md, "What a parallel
# engine could buy".
#
#   flock /work/measure.lock bench/sim/parallel-bound.sh BIN [ROUNDS]
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 BIN [ROUNDS]" >&2; exit 2; }
bin=$1 rounds=${2:-2}
[ -x "$bin" ] || { echo "not an executable: $bin" >&2; exit 2; }
case "$rounds" in '' | *[!0-9]* | 0) echo "ROUNDS must be a positive integer (got $rounds)" >&2; exit 2 ;; esac
tmp=$(mktemp -d)
wall() { /usr/bin/time -f "%e" "$bin" sim fleet --scale "$1" 2>&1 >/dev/null | tail -1; }
echo "uptime before: $(uptime)"
for r in $(seq "$rounds"); do
  whole=$(wall 1); half=$(wall 0.5)
  ( wall 0.5 >"$tmp/a" ) & ( wall 0.5 >"$tmp/b" ); wait
  python3 - "$whole" "$half" "$(cat "$tmp/a")" "$(cat "$tmp/b")" "$r" <<'PY'
import sys
whole, half, a, b = map(float, sys.argv[1:5]); r = sys.argv[5]
both = max(a, b)
print(f"round {r}: whole alone {whole:.2f} s; half alone {half:.2f} s; two halves at once "
      f"{a:.2f} and {b:.2f} s; whole / two halves {whole / both:.2f}x")
PY
done
echo "uptime after: $(uptime)"
