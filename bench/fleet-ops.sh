#!/usr/bin/env bash
# Fleet-wide quotas (issue 31): Redis operations per second against the request rate, and the
# fleet's admitted rate, with examples/proxy/fleet.toml run as documented (README, "Running a
# fleet") — except that Redis gets a free loopback port of its own, never a shared 6379.
#
# What runs (all on 127.0.0.1, bounded, every process killed on exit): one redis-server, one
# `spillway backend`, three `spillway proxy --config examples/proxy/fleet.toml --listen ..
# --admin ..`, and three `spillway load` of customer acme (CRITICAL, cost 1, one attempt,
# evenly spaced arrivals) split 80/15/5 over the proxies, for each total RATES (requests/s).
# For each rate it prints the EVALSHA (lease) calls Redis counted (`INFO commandstats`) per
# second and the requests acme got admitted per second across the fleet (global quota 100/s).
#
#   cargo build --release
#   SKIP_BUILD=1 bench/fleet-ops.sh
#
# Env: RATES ("300 3000"), SECS (20), BIN (target/release/spillway), SKIP_BUILD.
set -euo pipefail
cd "$(dirname "$0")/.."
RATES=${RATES:-"300 3000"}
SECS=${SECS:-20}
BIN=${BIN:-target/release/spillway}
[ -n "${SKIP_BUILD:-}" ] || cargo build --release --bin spillway
command -v redis-server >/dev/null || { echo "needs redis-server (apt-get install redis-server)"; exit 1; }

TMP=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 never opened"; exit 1; }
calls() { redis-cli -p "$RP" info commandstats | tr -d '\r' | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p' | grep . || echo 0; }

RP=$(free_port)
redis-server --port "$RP" --bind 127.0.0.1 --save '' --appendonly no >"$TMP/redis.log" 2>&1 &
PIDS+=($!)
wait_port "$RP"
BP=$(free_port)
"$BIN" backend --listen "127.0.0.1:$BP" --workers 256 --service-time 1ms --dist constant >"$TMP/backend.log" 2>&1 &
PIDS+=($!)
wait_port "$BP"
sed -e "s#redis://127.0.0.1:6379/0#redis://127.0.0.1:$RP/0#" -e "s#127.0.0.1:9100#127.0.0.1:$BP#" \
  examples/proxy/fleet.toml >"$TMP/fleet.toml"
LP=()
AP=()
for i in 1 2 3; do
  p=$(free_port); a=$(free_port); AP+=("$a")
  "$BIN" proxy --config "$TMP/fleet.toml" --listen "127.0.0.1:$p" --admin "127.0.0.1:$a" \
    >"$TMP/proxy$i.log" 2>&1 &
  PIDS+=($!)
  wait_port "$p"
  LP+=("$p")
done
sleep 2

for rate in $RATES; do
  for i in 0 1 2; do curl -s "127.0.0.1:${AP[$i]}/status" >"$TMP/before-$i.json"; done
  before=$(calls)
  t0=$(date +%s.%N)
  LOADS=()
  i=0
  for share in 0.80 0.15 0.05; do
    r=$(python3 -c "print(round($rate * $share, 3))")
    "$BIN" load --target "127.0.0.1:${LP[$i]}" --rate "$r" --arrivals uniform --attempts 1 \
      --duration "${SECS}s" --class criticality=CRITICAL,customer=acme --quiet \
      --json "$TMP/load-$rate-$i.json" >/dev/null 2>&1 &
    LOADS+=($!)
    i=$((i + 1))
  done
  wait "${LOADS[@]}"
  t1=$(date +%s.%N)
  after=$(calls)
  for i in 0 1 2; do curl -s "127.0.0.1:${AP[$i]}/status" >"$TMP/after-$i.json"; done
  python3 - "$rate" "$before" "$after" "$t0" "$t1" "$TMP" <<'EOF'
import json, sys
rate, before, after, t0, t1, tmp = sys.argv[1:7]
secs = float(t1) - float(t0)
def admitted(path):
    a = json.load(open(path))["admission"]["admitted"]
    return sum(a) if isinstance(a, list) else sum(a.values())
each = [(admitted(f"{tmp}/after-{i}.json") - admitted(f"{tmp}/before-{i}.json")) / secs
        for i in range(3)]
calls = int(after) - int(before)
print(f"offered {rate}/s of acme (80/15/5): admitted {sum(each):.1f}/s "
      f"({', '.join(f'{x:.1f}' for x in each)}); {calls} EVALSHA in {secs:.1f} s = "
      f"{calls / secs:.2f} lease calls/s for 3 proxies")
EOF
done
redis-cli -p "$RP" info commandstats | tr -d '\r' | grep cmdstat_
for i in 1 2 3; do grep -h "quota store" "$TMP/proxy$i.log" || true; done
