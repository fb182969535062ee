#!/bin/bash
# The fleet quota script's cost in Redis (issue 31): server-side time per EVALSHA of
# crates/spillway-tower/src/lease/share.lua for CUSTOMERS x CRITICALITIES shared buckets and
# INSTANCES lease clients, from INFO commandstats (usec_per_call), on a private redis-server
# on a free loopback port.
#
#   bench/fleet-script-cost.sh CUSTOMERS CRITICALITIES INSTANCES ROUNDS [REUSE_MS [ACTIVE_PCT [SEND_IDLE]]]
#
# ACTIVE_PCT (default 100): the share of buckets each instance has traffic for (a fixed random
# choice per instance); the others are idle there. SEND_IDLE=1 sends the idle ones too, with a
# demand of 0, as the lease client did before it left idle buckets out; 0 (the default) sends
# only the active ones, as it does now.
#
# Each round is one call per instance with random demands (0-20 of a global 100 per bucket);
# the first round fills the hashes and is not counted. REUSE_MS is the script's ARGV[3] (how
# long a bucket's level is reused; the lease client passes half an interval, 250 at 500 ms; 0
# computes it at every call, as the script did before). With REUSE_MS > 0 the rounds are 0.5 s
# apart, one lease interval, so each bucket's level is computed once per round.
# Redis's work per second is then usec_per_call x INSTANCES / interval, whatever the request
# rate. Measure with `flock /work/measure.lock` on a shared machine.
set -euo pipefail
C=$1; K=$2; N=$3; R=$4; REUSE=${5:-0}; ACTIVE=${6:-100}; SEND_IDLE=${7:-0}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no >/dev/null 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
SHA=$(redis-cli -p "$PORT" SCRIPT LOAD "$(cat "$ROOT/crates/spillway-tower/src/lease/share.lua")")
python3 - "$SHA" "$C" "$K" "$N" "$R" "$REUSE" "$ACTIVE" "$SEND_IDLE" > "$WORK/cmds.txt" <<'PY'
import sys, random
sha, C, K, N, R, reuse = sys.argv[1], *map(int, sys.argv[2:6]), sys.argv[6]
active, send_idle = int(sys.argv[7]), sys.argv[8] == "1"
crits = ["SHEDDABLE", "SHEDDABLE_PLUS", "CRITICAL", "CRITICAL_PLUS"][:K]
buckets = [f"{{spillway}}:quota:demand:{c}:c:cust{j}" for j in range(C) for c in crits]
random.seed(1)
mine = [set(random.sample(range(len(buckets)), max(1, len(buckets) * active // 100)))
        for _ in range(N)]
for r in range(R):
    for i in range(N):
        keys, args = ["{spillway}:quota:members"], [f"inst{i}", "1000000", reuse]
        for b, key in enumerate(buckets):
            if b in mine[i]:
                keys.append(key)
                args += ["100.0", f"{random.uniform(0, 20):.3f}"]
            elif send_idle:
                keys.append(key)
                args += ["100.0", "0"]
        print(" ".join(["EVALSHA", sha, str(len(keys))] + keys + args))
PY
head -n "$N" "$WORK/cmds.txt" | redis-cli -p "$PORT" >/dev/null
redis-cli -p "$PORT" CONFIG RESETSTAT >/dev/null
for r in $(seq 2 "$R"); do
  sed -n "$(( (r - 1) * N + 1 )),$(( r * N ))p" "$WORK/cmds.txt" | redis-cli -p "$PORT" >/dev/null
  [ "$REUSE" = 0 ] || sleep 0.5
done
redis-cli -p "$PORT" INFO commandstats | grep -E "cmdstat_evalsha"
