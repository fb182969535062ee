#!/usr/bin/env bash
# Several `spillway sim` builds on one run, in rounds whose order rotates (A B C, B C A, ...),
# so a slow spell of the shared machine hits every build alike. Prints, per build, the sum of
# its wall times and the median of the per-round ratios "first build's time / this build's
# time" (above 1: this build was faster), their range and in how many rounds it was faster.
# On this shared host the same build's runs move ±10–20% between rounds; a per-round ratio
# cancels the spell, and the median of many rounds steadies it.
#
#   flock /work/measure.lock bench/sim/rounds.sh ROUNDS "SIM ARGS" BIN [BIN ...]
#
# e.g. bench/sim/rounds.sh 10 "fleet --duration 10s --network-ms 0.5" /tmp/old /tmp/new
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 ROUNDS \"SIM ARGS\" BIN [BIN ...]" >&2; exit 2; }
rounds=$1 args=$2
shift 2
case "$rounds" in '' | *[!0-9]* | 0) echo "ROUNDS must be a positive integer (got $rounds)" >&2; exit 2 ;; esac
for bin in "$@"; do [ -x "$bin" ] || { echo "not an executable: $bin" >&2; exit 2; }; done
bins=("$@")
n=${#bins[@]}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "uptime before: $(uptime)"
for r in $(seq "$rounds"); do
  for k in $(seq 0 $((n - 1))); do
    i=$(((k + r) % n))
    # shellcheck disable=SC2086 # the scenario's arguments are split on purpose
    /usr/bin/time -o "$work/t" -f "%e" "${bins[$i]}" sim $args >/dev/null 2>&1 \
      || { echo "${bins[$i]} sim $args failed" >&2; exit 1; }
    echo "$r $i $(tail -1 "$work/t")" >>"$work/rows"
  done
done
python3 - "$work/rows" "${bins[@]}" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
bins = sys.argv[2:]
t = {}
for r, i, s in rows:
    t.setdefault(int(i), {})[int(r)] = float(s)
for i, b in enumerate(bins):
    ratio = [t[0][r] / t[i][r] for r in t[0]]
    print(f"{b}: sum {sum(t[i].values()):.2f} s; first/this median {statistics.median(ratio):.3f} "
          f"(range {min(ratio):.3f}-{max(ratio):.3f}), faster in {sum(x > 1 for x in ratio)} of {len(ratio)}")
PY
echo "uptime after: $(uptime)"
