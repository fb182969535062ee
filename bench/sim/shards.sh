#!/usr/bin/env bash
# One build, three ways of running the 10⁴-task fleet, in alternated rounds (A B C, then C B A,
# ...): A as shipped (one loop, no network delay), B with 0.5 ms each way on one loop, C with
# 0.5 ms in 2 shards (`--shards 2`). Prints each run's simulated requests, wall and user time.
# See bench/results/sim-speed.md, "Ninth round".
#
#   flock /work/measure.lock bench/sim/shards.sh BIN [ROUNDS] [SIM ARGS ...]
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 BIN [ROUNDS] [SIM ARGS ...]" >&2; exit 2; }
bin=$1 rounds=${2:-3}
shift $(( $# >= 2 ? 2 : 1 ))
[ -x "$bin" ] || { echo "not an executable: $bin" >&2; exit 2; }
case "$rounds" in '' | *[!0-9]* | 0) echo "ROUNDS must be a positive integer (got $rounds)" >&2; exit 2 ;; esac
for r in $(seq "$rounds"); do
  echo "round $r: $(uptime)"
  order="a b c"; [ $((r % 2)) = 0 ] && order="c b a"
  for o in $order; do
    case $o in
      a) args=() ;;
      b) args=(--network-ms 0.5) ;;
      c) args=(--network-ms 0.5 --shards 2) ;;
    esac
    /usr/bin/time -f "$o: %e s wall %U s user %M KB" "$bin" sim fleet "${args[@]}" "$@" 2>&1 \
      | grep -E "^simulated|s wall" | tr '\n' ' '
    echo
  done
done
echo "uptime after: $(uptime)"
