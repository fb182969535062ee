#!/usr/bin/env bash
# The cost of a refusal where it matters: `spillway proxy` in front of a service that burns real
# CPU, offered 1x, 2x, 5x and 10x the service's measured capacity (issue 4, "the CPU cost of a
# rejection <= 5% of a served request").
#
# Why this run: the reference guide says "Make rejection cheap ... Load test far past the
# breaking point to measure it" and "If rejecting costs 10% of serving, a server facing 10 times
# its capacity spends everything on rejections" (the guide "Overload and load shedding", after
# the AWS Builders' Library and the SRE book: "Shedding at the server", "Rejections aren't
# free"). bench/proxy-overhead.sh measures a refusal at a low rate, where every request wakes an
# idle thread; this measures it where refusals are the bulk of the work.
#
# What runs (everything on 127.0.0.1, every phase bounded, every process killed on exit):
#   - `spillway backend --cpu spin --service-time BURN_MS --workers WORKERS`: each request burns
#     BURN_MS of the worker thread's CPU time; WORKERS (1) leaves the other core to the proxy
#     and the load generator, so the backend is the bottleneck. Its capacity C is measured
#     first, closed loop (wrk, 4 connections, direct).
#   - the proxy in front, per MODES: `fixed` (a configured limit of 2 x WORKERS and a queue of
#     8 x WORKERS: past both, a request is refused at once, 503) and `zeroconf` (only
#     listen/upstream/admin set: the adaptive defaults, which need no capacity figure);
#   - offered load from `spillway load` (open loop, Poisson, one attempt, 1 s timeout) at
#     LEVELS x C, each level settled for SETTLE_SECS (not measured) then measured for SECS;
#   - per level: served, refused, timed out; proxy, backend and client CPU (utime + stime from
#     /proc/PID/stat); the host's busy share;
#   - refusals only, at the same rates: the fixed proxy with the incident control shed-below
#     (every request refused, 503 + don't-retry), and nginx `return 503;` (2 workers, the
#     floor of one keep-alive HTTP/1.1 exchange on this machine).
#
#   cargo build --release
#   SKIP_BUILD=1 flock /work/measure.lock bench/overload.sh
#   LEVELS=1,10 SECS=5 MODES=fixed bench/overload.sh
#   PIN=1 OUT=bench/results/overload-pinned.md bench/overload.sh
#
# PIN=1 gives the backend CPU 1 to itself (`taskset -c 1`) and puts the proxy (or nginx) and
# the load generator on CPU 0: the service keeps its core whatever the refusals cost, so the
# run shows whether the proxy's data plane keeps the backend fed under overload without the
# load generator's own CPU (0.4 cores at 10x) taking from the backend. Unpinned (the default)
# is a sidecar sharing the host with its service, where every refusal's CPU is the service's.
#
# Env: BURN_MS (1), WORKERS (1), LEVELS (1,2,5,10; the first is the reference level), SECS (8),
# SETTLE_SECS (2), MODES ("fixed zeroconf"), REFUSE_ONLY (1; 0 skips the refusal-only phases),
# CAPACITY (req/s; skips the measurement), PIN (0), SKIP_BUILD, BIN (target/release/spillway;
# a copy keeps a rebuild in the shared tree out of the run), WAIT_QUIET (90 s), BASE_PORT (18460),
# OUT (bench/results/overload.md). Results: stdout and OUT; raw files in a /tmp directory.
set -euo pipefail
cd "$(dirname "$0")/.."

PORT=${BASE_PORT:-18460}
BACKEND=127.0.0.1:$PORT
PROXY=127.0.0.1:$((PORT + 1))
ADMIN=127.0.0.1:$((PORT + 2))
NGINX=127.0.0.1:$((PORT + 3))
BURN_MS=${BURN_MS:-1}
WORKERS=${WORKERS:-1}
LEVELS=${LEVELS:-1,2,5,10}
SECS=${SECS:-8}
SETTLE_SECS=${SETTLE_SECS:-2}
MODES=${MODES:-fixed zeroconf}
REFUSE_ONLY=${REFUSE_ONLY:-1}
OUT=${OUT:-bench/results/overload.md}
PIN=${PIN:-0}
SERVICE_CPU=()
FRONT_CPU=()
if [ "$PIN" = 1 ]; then
  SERVICE_CPU=(taskset -c 1)
  FRONT_CPU=(taskset -c 0)
fi

WORK=$(mktemp -d /tmp/spillway-overload.XXXXXX)
. bench/lib/procs.sh   # PIDS, cleanup on exit, have, wait_port, stop
. bench/lib/host.sh    # cpu_ticks, tree_ticks, host_busy, wait_quiet, admin_post

[ -n "${SKIP_BUILD:-}" ] || cargo build --release --quiet
BIN=${BIN:-target/release/spillway}

# Other engineers share the 2 cores: wait (bounded) for a quieter second, record the load either way.
wait_quiet

HZ=$(getconf CLK_TCK)
{
  echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "host=$(uname -srm)"
  echo "cpus=$(nproc)"
  echo "uptime_before=$(uptime)"
  echo "clk_tck=$HZ"
  echo "burn_ms=$BURN_MS"
  echo "workers=$WORKERS"
  echo "levels=$LEVELS"
  echo "secs=$SECS"
  echo "settle_secs=$SETTLE_SECS"
  echo "pin=$PIN"
  echo "nginx=$(if have nginx; then nginx -v 2>&1 | sed 's/.*: //'; else echo none; fi)"
} >"$WORK/meta"


"${SERVICE_CPU[@]}" "$BIN" backend --listen "$BACKEND" --workers "$WORKERS" --service-time "${BURN_MS}ms" \
  --dist constant --cpu spin --duration 1800s >"$WORK/backend.log" 2>&1 &
BACKEND_PID=$!
PIDS+=("$BACKEND_PID")
wait_port "$BACKEND" || { echo "backend did not start (see $WORK/backend.log)"; exit 1; }

# --- the backend's capacity, closed loop, direct -------------------------------------------
if [ -z "${CAPACITY:-}" ]; then
  if have wrk; then
    "${FRONT_CPU[@]}" wrk -t1 -c4 -d2s "http://$BACKEND/" >/dev/null 2>&1 || true
    b0=$(cpu_ticks "$BACKEND_PID")
    "${FRONT_CPU[@]}" wrk -t1 -c4 -d5s "http://$BACKEND/" >"$WORK/capacity.wrk" 2>&1 || true
    b1=$(cpu_ticks "$BACKEND_PID")
    CAPACITY=$(awk '/Requests\/sec:/ {print int($2)}' "$WORK/capacity.wrk")
    n=$(awk '/requests in/ {print $1}' "$WORK/capacity.wrk")
    echo "capacity_backend_us=$(python3 -c "print(round(($b1 - $b0) / $HZ * 1e6 / max(1, $n), 1))")" >>"$WORK/meta"
  else
    CAPACITY=$((1000 * WORKERS / BURN_MS * 9 / 10))
    echo "wrk is not installed: capacity taken as 90 % of WORKERS / BURN_MS = $CAPACITY/s"
  fi
fi
echo "capacity=$CAPACITY" >>"$WORK/meta"
echo "backend capacity: $CAPACITY req/s (${BURN_MS} ms CPU per request, $WORKERS worker(s))"

# --- the fronts ------------------------------------------------------------------------------
# `fixed`: a configured limit of 2 x WORKERS (one request running, one waiting in the
# backend's own queue, so it never idles between requests) and a proxy queue of 8 x WORKERS
# (CoDel, the core's default discipline): without a queue, Poisson arrivals at 1x refused half
# the requests (a trial run: 368 refused / 345 served per second at 711/s).
cat >"$WORK/fixed.toml" <<TOML
[listen]
address = "$PROXY"
[upstream]
addresses = ["$BACKEND"]
[admission.limit]
algorithm = "fixed"
limit = $((2 * WORKERS))
[admission.queue]
max_len = $((8 * WORKERS))
[classify]
trusted = ["127.0.0.0/8"]
[admin]
listen = "$ADMIN"
TOML
# `zeroconf`: what `spillway proxy --listen A --upstream B` runs, with the admin moved off the
# default 127.0.0.1:9901 (another engineer's run may hold it).
cat >"$WORK/zeroconf.toml" <<TOML
[listen]
address = "$PROXY"
[upstream]
addresses = ["$BACKEND"]
[admin]
listen = "$ADMIN"
TOML
. bench/lib/nginx.sh
nginx_conf "$WORK/nginx" "$NGINX" ""

start_front() { # $1 = fixed | zeroconf | nginx; sets FRONT_PID and TARGET
  case $1 in
    nginx) TARGET=$NGINX; "${FRONT_CPU[@]}" nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" -g "daemon off;" >"$WORK/$1.log" 2>&1 & ;;
    *) TARGET=$PROXY; "${FRONT_CPU[@]}" "$BIN" proxy --config "$WORK/$1.toml" >"$WORK/$1.log" 2>&1 & ;;
  esac
  FRONT_PID=$!
  PIDS+=("$FRONT_PID")
  wait_port "$TARGET" || { echo "$1 did not start (see $WORK/$1.log)"; stop "$FRONT_PID"; return 1; }
}

phase() { # $1 = name, $2 = rate, $3 = criticality: settle, then one measured open-loop run
  local name=$1 rate=$2 crit=$3 f0 f1 b0 b1 h0 h1
  if [ "$SETTLE_SECS" != 0 ]; then
    "${FRONT_CPU[@]}" "$BIN" load --target "$TARGET" --rate "$rate" --duration "${SETTLE_SECS}s" --attempts 1 \
      --timeout 1s --quiet --class "criticality=$crit" >/dev/null 2>&1 || true
  fi
  f0=$(tree_ticks "$FRONT_PID")
  b0=$(cpu_ticks "$BACKEND_PID")
  h0=$(host_busy)
  /usr/bin/time -f "%U %S" -o "$WORK/$name.time" \
    "${FRONT_CPU[@]}" "$BIN" load --target "$TARGET" --rate "$rate" --duration "${SECS}s" --attempts 1 \
    --timeout 1s --quiet --title "$name" --class "criticality=$crit" \
    --json "$WORK/$name.json" >"$WORK/$name.txt"
  h1=$(host_busy)
  b1=$(cpu_ticks "$BACKEND_PID")
  f1=$(tree_ticks "$FRONT_PID")
  # name rate front-ticks backend-ticks client-seconds busy0 total0 busy1 total1
  echo "$name $rate $((f1 - f0)) $((b1 - b0)) $(awk '{print $1 + $2}' "$WORK/$name.time") $h0 $h1" >>"$WORK/phases"
}

# --- 1. overload levels, per mode ------------------------------------------------------------
for mode in $MODES; do
  start_front "$mode" || continue
  "${FRONT_CPU[@]}" "$BIN" load --target "$TARGET" --rate "$((CAPACITY / 2))" --duration 2s --attempts 1 --quiet >/dev/null 2>&1 || true
  for level in ${LEVELS//,/ }; do
    rate=$((CAPACITY * level))
    echo "$mode at ${level}x ($rate/s) ..."
    phase "$mode.$level" "$rate" CRITICAL || echo "$mode at ${level}x: load failed"
  done
  stop "$FRONT_PID"
  sleep 1
done

# --- 2. refusals only, at the same rates -----------------------------------------------------
if [ "$REFUSE_ONLY" != 0 ]; then
  if start_front fixed; then
    admin_post "$ADMIN" /controls/shed-below '{"criticality": "SHEDDABLE_PLUS"}' >"$WORK/shed.txt"
    for level in ${LEVELS//,/ }; do
      rate=$((CAPACITY * level))
      echo "refusals only (shed-below) at $rate/s ..."
      phase "refuse.$level" "$rate" SHEDDABLE || true
    done
    stop "$FRONT_PID"
  fi
  if have nginx && start_front nginx; then
    for level in ${LEVELS//,/ }; do
      rate=$((CAPACITY * level))
      echo "nginx return 503 at $rate/s ..."
      phase "nginx503.$level" "$rate" SHEDDABLE || true
    done
    stop "$FRONT_PID"
  else
    echo "nginx is not installed: its return-503 floor is skipped (apt-get install nginx)"
  fi
fi

echo "uptime_after=$(uptime)" >>"$WORK/meta"
echo "uptime after: $(uptime)"
mkdir -p "$(dirname "$OUT")"
{
  echo "# Refusals under overload (bench/overload.sh)"
  echo
  python3 bench/overhead/overload.py "$WORK"
} >"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
cat "$OUT"
echo
echo "raw results in $WORK; report in $OUT"
