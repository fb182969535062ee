#!/usr/bin/env bash
# User-space instructions per forwarded request of `spillway proxy` builds, A/B in one run
# (valgrind cachegrind, or callgrind for call counts).
#
# Why instructions: CPU time per request on this shared 2-core host moves ±8-15 % between rounds
# with other work, while an instruction count of the same build repeats within ~1 % (there is
# no hardware counter in the VM, so `perf stat` cannot count them). Each build's proxy runs
# under valgrind twice, once short and once long, with the same load; the difference in
# instructions over the difference in answered requests removes start-up and shutdown.
# Kernel work (syscalls, wake-ups) is not counted. (The third round's script of
# bench/results/proxy-forwarding.md, with a wrk workload added.)
#
#   flock /work/measure.lock bench/overhead/ir.sh LABEL=BIN [LABEL=BIN ...] [nginx]
#
# `nginx` measures nginx's reverse proxy (bench/lib/nginx.sh's configuration, one process) the
# same way, for a like-for-like count beside the builds.
#
# Env: LOAD = spillway (default: `spillway load`, open loop at RATE/s, N1 then N2 requests; its
# requests carry ~5 x-spillway-* headers) | wrk (wrk -t1 -cWRK_CONNS, W1 then W2 seconds, closed loop:
# wrk's own request, a Host header only — the benchmark's workload); TOOL = cachegrind |
# callgrind; WORK = a directory to keep the valgrind files in (default: a new temporary one);
# CACHE_SIM = 1 (cachegrind only) simulates the caches too and adds I1, D1 and last-level (LL)
# misses per request (slower); LL = size,assoc,line (e.g. 1048576,16,64: one core's 1 MiB L2 on
# this host; default: valgrind's, the host's L3) sets the last level simulated; WRK_CONNS (8)
# is wrk's connection count — with 256 each connection's state has gone cold by its next
# request, as at wrk's maximum in ab.sh.
# The backend is the first build's `spillway backend` (1 ms sleep), the proxy's configuration
# that of ab.sh's fixed mode with the admin listener off (the dashboard's sampling scales with
# time, not requests) unless ADMIN=1.
set -euo pipefail
N1=${N1:-400}; N2=${N2:-2400}; RATE=${RATE:-200}
W1=${W1:-2}; W2=${W2:-8}
LOAD=${LOAD:-spillway}; TOOL=${TOOL:-cachegrind}; CACHE_SIM=${CACHE_SIM:-0}
BACKEND=127.0.0.1:21391; PROXY=127.0.0.1:21392
WORK=${WORK:-$(mktemp -d)}; mkdir -p "$WORK"; PIDS=(); echo "work: $WORK"
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
wait_port() { for _ in $(seq 600); do (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
case "$LOAD:$TOOL" in
  spillway:cachegrind | spillway:callgrind | wrk:cachegrind | wrk:callgrind) ;;
  *) echo "LOAD must be spillway or wrk, TOOL cachegrind or callgrind (got LOAD=$LOAD TOOL=$TOOL)" >&2; exit 2 ;;
esac
case "$CACHE_SIM:$TOOL" in
  0:* | 1:cachegrind) ;;
  *) echo "CACHE_SIM must be 0 or 1, and 1 only with TOOL=cachegrind (got CACHE_SIM=$CACHE_SIM TOOL=$TOOL)" >&2; exit 2 ;;
esac
if [ "$CACHE_SIM" = 1 ]; then SIM=yes; else SIM=no; fi
[ $# -ge 1 ] || { echo "usage: $0 LABEL=BIN [LABEL=BIN ...]" >&2; exit 2; }
first=${1#*=}
"$first" backend --listen "$BACKEND" --workers 2048 --service-time 1ms --dist constant --cpu sleep --duration 1800s >"$WORK/backend.log" 2>&1 &
PIDS+=($!)
wait_port "$BACKEND"
. "$(dirname "$0")/../lib/proxy.sh"
fixed_proxy_conf "$PROXY" "$BACKEND" >"$WORK/p.toml"
# ADMIN=1: the admin listener on (the metrics recorder installed, the dashboard sampling), as
# in proxy-overhead.sh and ab.sh, whose runs are the benchmark of record.
[ "${ADMIN:-0}" = 0 ] || sed -i 's/^enabled = false$/listen = "127.0.0.1:21393"/' "$WORK/p.toml"
. "$(dirname "$0")/../lib/nginx.sh"
# `nginx` (a bare word after the first build): nginx's proxy of bench/lib/nginx.sh in one
# process (no master, one worker), so that valgrind sees all its work.
nginx_conf "$WORK/nginx" "$PROXY" "$BACKEND"
sed -i 's/^worker_processes .*/worker_processes 1;\nmaster_process off;/' "$WORK/nginx/nginx.conf"
echo "uptime before: $(uptime)"
if [ "$LOAD" = wrk ]; then SIZES="$W1 $W2"; else SIZES="$N1 $N2"; fi
for ab in "$@"; do
  label=${ab%%=*} bin=${ab#*=}
  if [ "$ab" = nginx ]; then
    command -v nginx >/dev/null || { echo "nginx is not installed (apt-get install -y nginx)" >&2; exit 2; }
    front=(nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" -g "daemon off;")
  else
    front=("$bin" proxy --config "$WORK/p.toml")
  fi
  declare -A got=()
  for n in $SIZES; do
    if [ "$TOOL" = cachegrind ]; then
      valgrind --tool=cachegrind --cache-sim="$SIM" ${LL:+--LL=$LL} --cachegrind-out-file="$WORK/$label.$n.cg" "${front[@]}" >"$WORK/$label.$n.log" 2>&1 &
    else
      valgrind --tool=callgrind --callgrind-out-file="$WORK/$label.$n.cg" "${front[@]}" >"$WORK/$label.$n.log" 2>&1 &
    fi
    vp=$!
    wait_port "$PROXY"; sleep 1
    if [ "$LOAD" = wrk ]; then
      wrk -t1 -c"${WRK_CONNS:-8}" -d"${n}s" "http://$PROXY/" >"$WORK/$label.$n.wrk" 2>&1
      # Answered requests: wrk's total minus non-2xx/3xx and socket errors.
      ok=$(awk '/requests in/ {n = $1} /Non-2xx/ {b += $NF} /Socket errors/ {gsub(",", ""); b += $4 + $6 + $8 + $10} END {print n - b}' "$WORK/$label.$n.wrk")
    else
      secs=$(python3 -c "print(max(1, round($n / $RATE)))")
      "$first" load --target "$PROXY" --rate "$(python3 -c "print($n / $secs)")" --duration "${secs}s" --attempts 1 --timeout 5s --quiet --json "$WORK/$label.$n.json" >/dev/null
      ok=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[0]['summary']['goodput'])" "$WORK/$label.$n.json")
    fi
    kill -INT "$vp" 2>/dev/null || true; wait "$vp" 2>/dev/null || true
    ir=$(grep -E "I\s+refs:|Collected :" "$WORK/$label.$n.log" | tail -1 | awk '{gsub(",","",$NF); print $NF}')
    # With the cache simulation: "I1  misses:  N" and "D1  misses:  N  ( R rd + W wr)".
    i1m=$(awk '/I1 +misses:/ {gsub(",", ""); print $(NF)}' "$WORK/$label.$n.log" | tail -1)
    d1m=$(awk '/D1 +misses:/ {gsub(",", ""); for (i = 1; i <= NF; i++) if ($i == "misses:") print $(i + 1)}' "$WORK/$label.$n.log" | tail -1)
    llm=$(awk '/LL misses:/ {gsub(",", ""); for (i = 1; i <= NF; i++) if ($i == "misses:") print $(i + 1)}' "$WORK/$label.$n.log" | tail -1)
    got[$n]="$ir $ok ${i1m:-0} ${d1m:-0} ${llm:-0}"
  done
  read -r s1 s2 <<<"$SIZES"
  read -r i1 o1 c1 d1 l1 <<<"${got[$s1]}"; read -r i2 o2 c2 d2 l2 <<<"${got[$s2]}"
  python3 -c "print('$label: user-space instructions per forwarded request', round(($i2 - $i1) / max($o2 - $o1, 1)), '(requests $o1, $o2)')"
  if [ "$CACHE_SIM" = 1 ]; then
    python3 -c "print('$label: I1 misses per forwarded request', round(($c2 - $c1) / max($o2 - $o1, 1)), '· D1 misses', round(($d2 - $d1) / max($o2 - $o1, 1)), '· LL misses', round(($l2 - $l1) / max($o2 - $o1, 1)))"
  fi
  unset got
done
echo "uptime after: $(uptime)"
