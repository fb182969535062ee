#!/usr/bin/env bash
# A/B of `spillway proxy` builds: proxy CPU per forwarded request at a fixed open-loop rate and
# wrk's closed-loop maximum, in interleaved rounds (A B A B ...), so a slow moment of the shared
# machine hits every build alike. CPU per request is utime + stime of the proxy process from
# /proc/PID/stat across the run (the method of bench/proxy-overhead.sh), and — with `perf` —
# the proxy's instructions per request (user + kernel), which other work on the machine barely
# moves (CPU time does: cache misses and context switches under contention); wrk's maximum
# moves with whatever else runs. The front's CPU per request during the wrk run is kept too
# (`wrk_cpu_us`): at the maximum, with the three processes contending for the cores and the
# front holding WRK_CONNS connections at once, what a request costs there is what decides the
# front's share of the machine. The backend's and wrk's CPU per request in that run are kept
# too (`wrk_backend_us`, `wrk_client_us`): they move with the front's way of forwarding and with
# the machine's state, which a front's figure alone cannot tell apart.
#
#   flock /work/measure.lock bench/overhead/ab.sh LABEL=BIN [LABEL=BIN ...] [nginx]
#
# `nginx` (a bare word, needs nginx installed) adds nginx as a keep-alive reverse proxy to the
# same backend on the same port, configured as in bench/proxy-overhead.sh (2 workers, upstream
# keepalive 256), measured the same way (its CPU is the master's and the workers'), so its
# figures interleave with the builds' in every round. The first argument must be a build.
#
# A front may end with one option: `LABEL=BIN,threads=N` runs that build with N data-plane
# threads (`[listen] threads`; default: one per CPU), `nginx,workers=N` runs nginx with N worker
# processes (default 2) and is labelled nginx-wN — so both settings compare in the same rounds
# (e.g. `a=BIN a1=BIN,threads=1 nginx nginx,workers=1`). `LABEL=BIN,access=SAMPLE` runs that
# build with the access log on (`[log.access]`, JSON, sampled at SAMPLE, to a file in the
# temporary directory), so the log's cost is read against the same build without it
# (e.g. `off=BIN on=BIN,access=1.0`).
#
# Env: RATE (7100), SECS (10), WRK_SECS (5, 0 = skip wrk), WRK_CONNS (64: against the backend's
# 1 ms sleep, which tokio's millisecond timer makes 1-2 ms, 64 connections hold wrk near a latency
# ceiling — the direct path's ~35,000/s, 64 / 1.75 ms — which nginx comes within ~7% of; 256 leave
# the maximum bound by CPU, the direct path's ~66,000/s), ROUNDS (3), MODE (fixed | zeroconf:
# the proxy with only listen/upstream/admin set, i.e. the zero-config defaults), OUT (a file for
# the raw rows), SAMPLE (a path prefix: /status's limit, in-flight, queued and utilisation every
# 100 ms into PREFIX.LABEL.ROUND; costs the proxy the admin requests). The backend is the first build's `spillway backend` (1 ms sleep, 2048 workers).
set -euo pipefail
RATE=${RATE:-7100}
SECS=${SECS:-10}
WRK_SECS=${WRK_SECS:-5}
WRK_CONNS=${WRK_CONNS:-64}
ROUNDS=${ROUNDS:-3}
MODE=${MODE:-fixed}
BACKEND=127.0.0.1:21181
PROXY=127.0.0.1:21182
ADMIN=127.0.0.1:21183
WORK=$(mktemp -d)
OUT=${OUT:-$WORK/rows}
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
cpu_ticks() { # the process and its children's (nginx's workers)
  local t=0 p
  for p in "$1" $(pgrep -P "$1" || true); do
    t=$((t + $(sed 's/^.*) //' "/proc/$p/stat" | awk '{print $12 + $13}')))
  done
  echo "$t"
}
HZ=$(getconf CLK_TCK)

first=${1%%,*}
first=${first#*=}
"$first" backend --listen "$BACKEND" --workers 2048 --service-time 1ms --dist constant \
  --cpu sleep --duration 1800s >"$WORK/backend.log" 2>&1 &
BACKEND_PID=$!
PIDS+=($BACKEND_PID)
wait_port "$BACKEND"

# proxy_conf FILE [THREADS] [ACCESS_SAMPLE]: the proxy's configuration for this run.
proxy_conf() {
  local threads=${2:+threads = $2\\n}
  local access=${3:+[log.access]\\nenabled = true\\nformat = \"json\"\\nsample = $3\\npath = \"$1.access.log\"\\n}
  if [ "$MODE" = zeroconf ]; then
    printf "[listen]\\naddress = \"%s\"\\n${threads}[upstream]\\naddresses = [\"%s\"]\\n[admin]\\nlisten = \"%s\"\\n" \
      "$PROXY" "$BACKEND" "$ADMIN" >"$1"
    printf "${access}" >>"$1"
  else
    printf "[listen]\\naddress = \"%s\"\\n${threads}[upstream]\\naddresses = [\"%s\"]\\nmax_requests_per_task = 1024\\nmax_idle_per_task = 1024\\n[admission.limit]\\nalgorithm = \"fixed\"\\nlimit = 10000\\n[classify]\\ntrusted = [\"127.0.0.0/8\"]\\n[admin]\\nlisten = \"%s\"\\n" \
      "$PROXY" "$BACKEND" "$ADMIN" >"$1"
    printf "${access}" >>"$1"
  fi
}
proxy_conf "$WORK/p.toml"

. "$(dirname "$0")/../lib/nginx.sh"
# Each front's label, command line and configuration, from its argument.
declare -A FRONT_LABEL=() FRONT_BIN=() FRONT_CONF=()
for ab in "$@"; do
  spec=${ab%%,*} opt=
  [ "$spec" = "$ab" ] || opt=${ab#*,}
  case "$spec:$opt" in
    nginx:) label=nginx ;;
    nginx:workers=[1-9]*) label=nginx-w${opt#workers=} ;;
    *=*:) label=${spec%%=*} ;;
    *=*:threads=[1-9]*) label=${spec%%=*} ;;
    *=*:access=[0-9]*) label=${spec%%=*} ;;
    *) echo "bad front '$ab': expected LABEL=BIN, LABEL=BIN,threads=N, LABEL=BIN,access=SAMPLE, nginx or nginx,workers=N" >&2; exit 2 ;;
  esac
  [ -z "${FRONT_LABEL[$ab]:-}" ] || { echo "front '$ab' given twice" >&2; exit 2; }
  FRONT_LABEL[$ab]=$label
  if [ "$spec" = nginx ]; then
    FRONT_CONF[$ab]=$WORK/$label
    nginx_conf "$WORK/$label" "$PROXY" "$BACKEND" reuseport
    [ -z "$opt" ] || sed -i "s/^worker_processes .*/worker_processes ${opt#workers=};/" "$WORK/$label/nginx.conf"
  else
    FRONT_BIN[$ab]=${spec#*=}
    FRONT_CONF[$ab]=$WORK/p.toml
    if [ -n "$opt" ]; then
      FRONT_CONF[$ab]=$WORK/p.$label.toml
      case "$opt" in
        access=*) proxy_conf "$WORK/p.$label.toml" "" "${opt#access=}" ;;
        *) proxy_conf "$WORK/p.$label.toml" "${opt#threads=}" ;;
      esac
    fi
  fi
done

echo "uptime before: $(uptime)"
echo "mode=$MODE rate=$RATE/s secs=$SECS wrk=${WRK_SECS}s x $WRK_CONNS conns rounds=$ROUNDS"
for r in $(seq "$ROUNDS"); do
  for ab in "$@"; do
    label=${FRONT_LABEL[$ab]} conf=${FRONT_CONF[$ab]}
    if [ -z "${FRONT_BIN[$ab]:-}" ]; then
      nginx -p "$conf" -c "$conf/nginx.conf" -g "daemon off;" >"$WORK/$label.log" 2>&1 &
    else
      "${FRONT_BIN[$ab]}" proxy --config "$conf" >"$WORK/$label.log" 2>&1 &
    fi
    pid=$!
    PIDS+=($pid)
    wait_port "$PROXY"
    sleep 0.2
    kill -0 "$pid" 2>/dev/null || { echo "$label did not start: $(cat "$WORK/$label.log")"; exit 1; }
    "$first" load --target "$PROXY" --rate 1000 --duration 2s --attempts 1 --quiet >/dev/null 2>&1 || true
    perf_pid=
    if [ -n "${FRONT_BIN[$ab]:-}" ] && command -v perf >/dev/null; then
      perf stat -x, -e instructions:u,instructions:k -p "$pid" -o "$WORK/$label.$r.perf" &
      perf_pid=$!
      sleep 0.2
    fi
    t0=$(cpu_ticks "$pid")
    "$first" load --target "$PROXY" --rate "$RATE" --duration "${SECS}s" --attempts 1 \
      --timeout 500ms --quiet --json "$WORK/$label.$r.json" >"$WORK/$label.$r.txt" &
    lpid=$!
    if [ -n "${SAMPLE:-}" ]; then # the controller's state every 100 ms (adds the admin's CPU)
      while kill -0 "$lpid" 2>/dev/null; do
        curl -s "http://$ADMIN/status" | python3 -c 'import json,sys,time; a=json.load(sys.stdin)["admission"]; print(round(time.time(),2), a.get("limit"), a.get("in_flight"), a.get("queued"), a.get("utilisation"))' >>"$SAMPLE.$label.$r" 2>/dev/null || true
        sleep 0.1
      done
    fi
    wait "$lpid"
    t1=$(cpu_ticks "$pid")
    insn=-
    if [ -n "$perf_pid" ]; then
      kill -INT "$perf_pid" 2>/dev/null || true
      wait "$perf_pid" 2>/dev/null || true
      # "<not supported>" where the machine has no hardware counters (VMs often do not).
      insn=$(awk -F, '$3 ~ /instructions/ && $1 ~ /^[0-9]+$/ {s += $1; n++} END {print n ? s : "-"}' "$WORK/$label.$r.perf")
    fi
    read -r sent p50 p99 < <(python3 - "$WORK/$label.$r.json" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))[0]
lat = run["latency"]["total"]
print(run["summary"]["sent"], lat.get("p50_ms", "?"), lat.get("p99_ms", "?"))
PY
)
    rps=- wrk_us=- back_us=- client_us=-
    if [ "$WRK_SECS" != 0 ]; then
      w0=$(cpu_ticks "$pid") b0=$(cpu_ticks "$BACKEND_PID")
      TIMEFORMAT='%U %S'
      { time wrk -t1 -c"$WRK_CONNS" -d"${WRK_SECS}s" "http://$PROXY/" >"$WORK/$label.$r.wrk" 2>/dev/null || true; } 2>"$WORK/$label.$r.wrktime"
      w1=$(cpu_ticks "$pid") b1=$(cpu_ticks "$BACKEND_PID")
      rps=$(awk '/Requests\/sec:/ {print int($2)}' "$WORK/$label.$r.wrk")
      n=$(awk '/requests in/ {print $1}' "$WORK/$label.$r.wrk")
      per_req() { awk -v s="$1" -v n="${n:-0}" 'BEGIN {print n ? sprintf("%.1f", s * 1e6 / n) : "-"}'; }
      # CPU per request at wrk's maximum, where the three processes contend for the cores: the
      # front's, and the backend's and wrk's, which the front's way of forwarding can move too
      # (how many upstream connections, how many requests each wakeup finds).
      wrk_us=$(per_req "$(awk -v t=$((w1 - w0)) -v hz="$HZ" 'BEGIN {print t / hz}')")
      back_us=$(per_req "$(awk -v t=$((b1 - b0)) -v hz="$HZ" 'BEGIN {print t / hz}')")
      client_us=$(per_req "$(awk '{print $1 + $2}' "$WORK/$label.$r.wrktime")")
    fi
    us=$(python3 -c "print(round(($t1 - $t0) / $HZ * 1e6 / max($sent, 1), 1))")
    kinsn=$(python3 -c "print('-' if '$insn' in ('-', '') else round(float('$insn') / max($sent, 1) / 1e3, 1))")
    echo "round=$r build=$label cpu_us_per_req=$us kinsn_per_req=$kinsn sent=$sent p50_ms=$p50 p99_ms=$p99 wrk_rps=$rps wrk_cpu_us=$wrk_us wrk_backend_us=$back_us wrk_client_us=$client_us" | tee -a "$OUT"
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    sleep 1
  done
done
echo "uptime after: $(uptime)"
python3 - "$OUT" <<'PY'
import sys, collections, statistics
rows = [dict(kv.split("=", 1) for kv in l.split()) for l in open(sys.argv[1]) if l.strip()]
by = collections.defaultdict(list)
for r in rows:
    by[r["build"]].append(r)
for b, rs in by.items():
    cpu = [float(r["cpu_us_per_req"]) for r in rs]
    w = [int(r["wrk_rps"]) for r in rs if r["wrk_rps"] not in ("-", "")]
    ki = [float(r["kinsn_per_req"]) for r in rs if r.get("kinsn_per_req", "-") != "-"]
    wc = [float(r["wrk_cpu_us"]) for r in rs if r.get("wrk_cpu_us", "-") != "-"]
    wb = [float(r["wrk_backend_us"]) for r in rs if r.get("wrk_backend_us", "-") != "-"]
    wk = [float(r["wrk_client_us"]) for r in rs if r.get("wrk_client_us", "-") != "-"]
    print(f"{b}: cpu/req median {statistics.median(cpu):.1f} us (runs {cpu})"
          + (f"; instructions/req median {statistics.median(ki):.1f} k (runs {ki})" if ki else "")
          + (f"; wrk median {statistics.median(w)}/s (runs {w})" if w else "")
          + (f"; cpu/req at wrk's maximum median {statistics.median(wc):.1f} us (runs {wc})" if wc else "")
          + (f"; backend's {statistics.median(wb):.1f} us (runs {wb})" if wb else "")
          + (f"; wrk's {statistics.median(wk):.1f} us (runs {wk})" if wk else ""))
PY
