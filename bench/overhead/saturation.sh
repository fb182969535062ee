#!/usr/bin/env bash
# Where the machine's CPU goes at wrk's closed-loop maximum, per forwarded request: the front
# (`spillway proxy` in ab.sh's fixed-limit configuration, or nginx as in bench/lib/nginx.sh),
# the backend (`spillway backend`, 1 ms sleep), wrk itself, the whole machine busy, and the
# machine idle. Fronts alternate in every round. Answers "is wrk's maximum bound by CPU?":
# when the machine still idles at the maximum, the loop is bound by latency (64 connections,
# each waiting ~1–2 ms on the backend's sleep) and the front's CPU per request counts through
# the queueing it adds, not one for one. Loopback only; each run is bounded (wrk -d).
#
#   flock /work/measure.lock bench/overhead/saturation.sh BIN [ROUNDS]
#
# Env: WRK_SECS (5), PORT_BASE (21181: backend, +1 the front, +2 the proxy's admin).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 BIN [ROUNDS]" >&2; exit 2; }
bin=$1 rounds=${2:-4}
[ -x "$bin" ] || { echo "not an executable: $bin" >&2; exit 2; }
case "$rounds" in '' | *[!0-9]* | 0) echo "ROUNDS must be a positive integer (got $rounds)" >&2; exit 2 ;; esac
for tool in wrk nginx; do
  command -v "$tool" >/dev/null || { echo "$tool is not installed (bench/proxy-overhead.sh installs it)" >&2; exit 2; }
done
WRK_SECS=${WRK_SECS:-5}
base=${PORT_BASE:-21181}
BACKEND=127.0.0.1:$base PROXY=127.0.0.1:$((base + 1)) ADMIN=127.0.0.1:$((base + 2))
here=$(dirname "$0")
. "$here/../lib/host.sh"
. "$here/../lib/nginx.sh"
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
HZ=$(getconf CLK_TCK)

"$bin" backend --listen "$BACKEND" --workers 2048 --service-time 1ms --dist constant \
  --cpu sleep --duration 1800s >"$WORK/backend.log" 2>&1 &
backend=$!
PIDS+=("$backend")
wait_port "$BACKEND"
printf '[listen]\naddress = "%s"\n[upstream]\naddresses = ["%s"]\nmax_requests_per_task = 1024\nmax_idle_per_task = 1024\n[admission.limit]\nalgorithm = "fixed"\nlimit = 10000\n[classify]\ntrusted = ["127.0.0.0/8"]\n[admin]\nlisten = "%s"\n' \
  "$PROXY" "$BACKEND" "$ADMIN" >"$WORK/p.toml"
nginx_conf "$WORK/nginx" "$PROXY" "$BACKEND" reuseport

echo "uptime before: $(uptime)"
echo "wrk -t1 -c64 -d${WRK_SECS}s; CPU per request in µs (front, backend, wrk, machine busy, machine idle)"
for r in $(seq "$rounds"); do
  for front in proxy nginx; do
    if [ "$front" = proxy ]; then
      "$bin" proxy --config "$WORK/p.toml" >"$WORK/proxy.log" 2>&1 &
    else
      nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" -g "daemon off;" >"$WORK/nginx.log" 2>&1 &
    fi
    fp=$!
    PIDS+=("$fp")
    wait_port "$PROXY"
    sleep 0.3
    wrk -t1 -c64 -d2s "http://$PROXY/" >/dev/null 2>&1 || true # warm-up: pools, limit
    f0=$(tree_ticks "$fp") b0=$(cpu_ticks "$backend") s0=$(head -1 /proc/stat)
    /usr/bin/time -o "$WORK/wrk.time" -f "%U %S" wrk -t1 -c64 -d"${WRK_SECS}s" "http://$PROXY/" >"$WORK/wrk.out" 2>&1
    f1=$(tree_ticks "$fp") b1=$(cpu_ticks "$backend") s1=$(head -1 /proc/stat)
    python3 - "$front" "$r" "$WORK/wrk.out" "$((f1 - f0))" "$((b1 - b0))" "$(cat "$WORK/wrk.time")" "$s0" "$s1" "$HZ" <<'PY'
import re, sys
front, r, out, ft, bt, wt, s0, s1, hz = sys.argv[1:]
text = open(out).read()
n = int(re.search(r"(\d+) requests in", text).group(1))
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
wu, ws = map(float, wt.split())
# /proc/stat's cpu line: user nice system idle iowait irq softirq steal ...
d = [b - a for a, b in zip(map(int, s0.split()[1:]), map(int, s1.split()[1:]))]
busy, idle = sum(d[:8]) - d[3] - d[4], d[3] + d[4]
us = lambda ticks: ticks / int(hz) / n * 1e6
print(f"round={r} front={front} wrk_rps={rps:.0f} front_us={us(int(ft)):.1f} backend_us={us(int(bt)):.1f} "
      f"wrk_us={(wu + ws) / n * 1e6:.1f} busy_us={us(busy):.1f} idle_us={us(idle):.1f}")
PY
    kill "$fp"
    wait "$fp" 2>/dev/null || true
  done
done
echo "uptime after: $(uptime)"
