#!/usr/bin/env bash
# Heap allocations per forwarded request of `spillway proxy` builds, counted by heaptrack (every
# malloc/calloc/realloc call, exact, unaffected by other work on the machine). Each build's
# proxy runs under heaptrack twice, serving N1 and then N2 requests (fixed limit, as in
# bench/proxy-overhead.sh); (calls(N2) - calls(N1)) / (N2 - N1) removes start-up and warm-up.
# A build with a global allocator that bypasses malloc (mimalloc) is invisible to heaptrack.
#
#   flock /work/measure.lock bench/overhead/allocs.sh LABEL=BIN [LABEL=BIN ...]
set -euo pipefail
N1=${N1:-2000}
N2=${N2:-12000}
RATE=${RATE:-2000}
BACKEND=127.0.0.1:21191
PROXY=127.0.0.1:21192
ADMIN=127.0.0.1:21193
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
wait_port() { for _ in $(seq 200); do (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
first=${1#*=}
"$first" backend --listen "$BACKEND" --workers 2048 --service-time 1ms --dist constant \
  --cpu sleep --duration 1800s >"$WORK/backend.log" 2>&1 &
PIDS+=($!)
wait_port "$BACKEND"
printf '[listen]\naddress = "%s"\n[upstream]\naddresses = ["%s"]\nmax_requests_per_task = 1024\nmax_idle_per_task = 1024\n[admission.limit]\nalgorithm = "fixed"\nlimit = 10000\n[admin]\nlisten = "%s"\n' \
  "$PROXY" "$BACKEND" "$ADMIN" >"$WORK/p.toml"
echo "uptime before: $(uptime)"
for ab in "$@"; do
  label=${ab%%=*} bin=${ab#*=}
  declare -A calls=()
  for n in "$N1" "$N2"; do
    heaptrack -o "$WORK/$label.$n" "$bin" proxy --config "$WORK/p.toml" >"$WORK/$label.$n.log" 2>&1 &
    hp=$!
    wait_port "$PROXY"
    secs=$(python3 -c "print(max(1, round($n / $RATE)))")
    "$first" load --target "$PROXY" --rate "$(python3 -c "print($n / $secs)")" --duration "${secs}s" \
      --attempts 1 --timeout 2s --quiet --json "$WORK/$label.$n.json" >/dev/null
    sent=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[0]['summary']['goodput'])" "$WORK/$label.$n.json")
    # heaptrack's wrapper runs the proxy as its child: stop the proxy, let heaptrack finish.
    kill -INT "$(pgrep -f -- "proxy --config $WORK/p.toml" | tail -1)" 2>/dev/null || true
    wait "$hp" 2>/dev/null || true
    f=$(ls "$WORK/$label.$n".* | grep -E '\.(zst|gz)$' | head -1)
    c=$(heaptrack_print -f "$f" 2>/dev/null | awk '/^calls to allocation functions:/ {print $5}')
    calls[$n]="$c $sent"
    echo "$label: $sent requests answered 2xx, $c allocation calls in total"
  done
  read -r c1 s1 <<<"${calls[$N1]}"
  read -r c2 s2 <<<"${calls[$N2]}"
  python3 -c "print('$label: allocations per forwarded request', round(($c2 - $c1) / max($s2 - $s1, 1), 2))"
  unset calls
done
echo "uptime after: $(uptime)"
