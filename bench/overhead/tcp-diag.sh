#!/usr/bin/env bash
# TCP counters (nstat deltas) and the client's send lag around open-loop runs at RATE/s (7,600),
# direct and through the fixed-limit proxy, twice each: tells a proxy whose tail blew up because
# of lost packets (retransmits, listen overflows) from one that fell behind (the open-loop client
# lags and opens new connections for requests it cannot put on busy ones).
#
#   flock /work/measure.lock bench/overhead/tcp-diag.sh    # BIN (target/release/spillway), RATE
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-target/release/spillway}
W=$(mktemp -d)
B=127.0.0.1:18470; P=127.0.0.1:18471; A=127.0.0.1:18472
$BIN backend --listen $B --workers 2048 --service-time 1ms --dist constant --cpu sleep --duration 120s > $W/b.log 2>&1 &
bpid=$!
printf '[listen]\naddress = "%s"\n[upstream]\naddresses = ["%s"]\nmax_requests_per_task = 1024\nmax_idle_per_task = 1024\n[admission.limit]\nalgorithm = "fixed"\nlimit = 10000\n[classify]\ntrusted = ["127.0.0.0/8"]\n[admin]\nlisten = "%s"\n' $P $B $A > $W/p.toml
$BIN proxy --config $W/p.toml > $W/p.log 2>&1 &
pid=$!
trap 'kill $pid $bpid' EXIT
sleep 0.5
for t in $B $P $B $P; do
  $BIN load --target $t --rate "${RATE:-7600}" --duration 2s --attempts 1 --timeout 500ms --quiet >/dev/null
  nstat -n >/dev/null
  $BIN load --target $t --rate "${RATE:-7600}" --duration 6s --attempts 1 --timeout 500ms --quiet --json $W/l.json >/dev/null
  echo "== $t: $(python3 -c "import json; r=json.load(open('$W/l.json'))[0]; s=r['summary']; l=r['latency']['total']; print('ok', s['goodput'], '/', s['sent'], 'p99', l['p99_ms'], 'p999', l['p999_ms'], 'lag99', r['meta']['send_lag']['p99_ms'])")"
  nstat 2>/dev/null | grep -E "ListenOverflows|ListenDrops|TCPTimeouts|RetransSegs|TCPLossProbes|ActiveOpens|PassiveOpens|TCPAbortOnClose|TCPSynRetrans" | tr -s ' ' | paste -sd';'
done
