#!/usr/bin/env bash
# The zero-config proxy's p99 added at one rate, paired with the direct path in the same round,
# after the same rate sequence bench/proxy-overhead.sh gives it (an overload phase at twice the
# rate, then 3,000/s), with nothing else running: tells the proxy's own tail from the tail the
# full benchmark's other fronts and phases leave behind on the shared host.
#
#   flock /work/measure.lock bench/overhead/zeroconf-p99.sh     # BIN, RATE (7400), ROUNDS (3)
#
# Everything on 127.0.0.1; every phase bounded; processes killed on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-target/release/spillway}
RATE=${RATE:-7400}
ROUNDS=${ROUNDS:-3}
BACKEND=127.0.0.1:21511
PROXY=127.0.0.1:21512
WORK=$(mktemp -d /tmp/spillway-zc-p99.XXXXXX)
. bench/lib/procs.sh

"$BIN" backend --listen "$BACKEND" --workers 2048 --service-time 1ms --dist constant \
  --duration 600s >"$WORK/backend.log" 2>&1 &
PIDS+=($!)
printf '[listen]\naddress = "%s"\n[upstream]\naddresses = ["%s"]\n[admin]\nlisten = "127.0.0.1:21513"\n' \
  "$PROXY" "$BACKEND" >"$WORK/zeroconf.toml"
"$BIN" proxy --config "$WORK/zeroconf.toml" >"$WORK/proxy.log" 2>&1 &
PIDS+=($!)
wait_port "$BACKEND" && wait_port "$PROXY"

run() { # target rate seconds [json]
  "$BIN" load --target "$1" --rate "$2" --duration "${3}s" --attempts 1 --timeout 500ms --quiet \
    ${4:+--json "$4"} >/dev/null 2>&1
}
report() { # json label
  python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); x = d[0] if isinstance(d, list) else d
s, l = x["summary"], x["latency"]["total"]
print(f"{sys.argv[2]:<10} sent {s['sent']:>6}  refused {s['rejected']:>4}  p50 {l['p50_ms']:.2f} ms  p99 {l['p99_ms']:.2f} ms")
PY
}
uptime
for round in $(seq "$ROUNDS"); do
  echo "round $round at $RATE/s"
  run "$BACKEND" "$RATE" 2
  run "$BACKEND" "$RATE" 6 "$WORK/direct.$round.json"
  report "$WORK/direct.$round.json" direct
  run "$PROXY" $((RATE * 2)) 6
  run "$PROXY" 3000 8
  run "$PROXY" "$RATE" 2
  run "$PROXY" "$RATE" 6 "$WORK/zeroconf.$round.json"
  report "$WORK/zeroconf.$round.json" zero-config
done
uptime
