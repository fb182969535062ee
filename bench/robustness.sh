#!/usr/bin/env bash
# Issue 28, requirement 9: the robustness matrix for real. Each cell — backend workers × mean
# service × distribution × client timeout × offered load × CRITICAL share × arrivals × backend
# shape, chosen to cover the extremes of `spillway sim --sweep examples/sim/robustness.toml` —
# runs on loopback three ways, with the same seeded load:
#
#   unprotected   spillway load -> spillway backend
#   spillway      spillway load -> spillway proxy (zero-config: no capacity given; [classify]
#                 trusted = loopback, so the load's criticality headers count) -> backend
#   haproxy       spillway load -> HAProxy (priority classes from the criticality header,
#                 `maxconn` = the backend's workers, `timeout queue` = the client timeout,
#                 `option abortonclose`) -> backend
#
# then simulates the same cells (`spillway sim --sweep` on a file listing just them) and reports
# per requirement 1–4 the figures of each run and the simulation's distance from the real runs,
# in percentage points. Last, issue 28 requirement 1's fast-upstream check: `wrk -c 256` (or
# `spillway load --connections 256`) through the zero-config proxy and through the same proxy with
# a fixed limit of 1000, in front of nginx answering a static 200, a few times each.
#
#   bench/robustness.sh                    # every cell (prints the expected time first)
#   bench/robustness.sh w1-1ms-exp-t5-2x-c0.6 fast-upstream   # only these (names below)
#   bench/robustness.sh --list             # the cells and their parameters
#   WORK=/tmp/rc bench/robustness.sh CELL1 CELL2   # runs kept in WORK (default: a new temp dir)
#   WORK=/tmp/rc bench/robustness.sh --report      # no runs: simulate (with $BIN) and report every cell
#                                          # whose runs are in WORK (groups run one by one, e.g.
#                                          # each under `flock /work/measure.lock`, one report)
#   SKIP_BUILD=1 SKIP_INSTALL=1 bench/robustness.sh
#   DURATION=12 REPEATS=3 OUT=bench/results bench/robustness.sh
#   SIM_SEEDS="29 30" SIM_TICK_MS=1 SIM_OVERHEAD_MS=0.9 SIM_WAKE_MS=0 bench/robustness.sh --report
#                                          # the simulation's other seeds (each cell's spread)
#                                          # and its model of this backend and host (below)
#   SPILLWAY_EXTRA=$'max_requests_per_task = 4096\n[upstream.throttle]\nk = 1000.0' \
#     bench/robustness.sh CELL             # TOML added to the cells' proxy config after
#                                          # [upstream]'s addresses (an experiment, not the default)
#
# Writes $OUT/robustness-<stamp>.{md,json} (OUT defaults to bench/results). Everything listens on
# 127.0.0.1 only, every process started here is stopped on exit, every run stops by itself.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib/procs.sh
. bench/lib/host.sh
. bench/lib/status.sh

DURATION=${DURATION:-12}   # s of offered load per run
REPEATS=${REPEATS:-3}      # fast-upstream repeats (each: zero-config then fixed limit)
OUT=${OUT:-bench/results}
SEED=${SEED:-28}
FRONT=127.0.0.1:28900
BACKEND=127.0.0.1:28901
ADMIN=127.0.0.1:28902
STATIC=127.0.0.1:28903

# name workers mean_ms dist timeout_x offered crit_share arrivals backend
# (offered is ignored by closed:N arrivals; crit_share is then the share of clients)
CELLS="
w1-1ms-exp-t5-0.5x-c0              1   1   exp       5  0.5 0   poisson    plain
w1-1ms-exp-t5-2x-c0.6              1   1   exp       5  2   0.6 poisson    plain
w1-50ms-const-t5-10x-c0            1   50  const     5  10  0   poisson    plain
w4-10ms-const-t20-0.9x-c0.6        4   10  const     20 0.9 0.6 poisson    plain
w4-10ms-bimodal-t5-0.9x-c0.6       4   10  bimodal   5  0.9 0.6 poisson    plain
w4-50ms-lognormal-t5-10x-c0.6      4   50  lognormal 5  10  0.6 poisson    plain
w4-10ms-exp-t20-2x-c0.6-onoff      4   10  exp       20 2   0.6 on_off     plain
w4-10ms-lognormal-t20-closed64     4   10  lognormal 20 0   0.6 closed:64  plain
w4-10ms-exp-t5-closed256           4   10  exp       5  0   0.6 closed:256 plain
w4-10ms-exp-t5-2x-c0.6-slowdown    4   10  exp       5  2   0.6 poisson    slowdown
w4-10ms-bimodal-t20-2x-c0.3-drop   4   10  bimodal   20 2   0.3 poisson    capacity_drop
w20-50ms-bimodal-t20-closed64-drop 20  50  bimodal   20 0   0.3 closed:64  capacity_drop
w20-50ms-exp-t20-0.9x-c0.8         20  50  exp       20 0.9 0.8 poisson    plain
w20-50ms-lognormal-t20-2x-c0.6     20  50  lognormal 20 2   0.6 poisson    plain
w20-500ms-exp-t5-10x-c0.8          20  500 exp       5  10  0.8 poisson    plain
w100-50ms-exp-t5-0.5x-c0           100 50  exp       5  0.5 0   poisson    plain
w100-500ms-exp-t5-0.9x-c0.6        100 500 exp       5  0.9 0.6 poisson    plain
w100-500ms-lognormal-t5-2x-c0.6    100 500 lognormal 5  2   0.6 poisson    plain
w128-500ms-bimodal-t5-10x-c0.6     128 500 bimodal   5  10  0.6 poisson    plain
w1000-500ms-exp-t5-0.9x-c0.6       1000 500 exp      5  0.9 0.6 poisson    plain
"

if [ "${1:-}" = --list ]; then
  echo "name workers mean_ms dist timeout_x offered crit_share arrivals backend"
  echo "$CELLS" | sed '/^$/d'
  echo "fast-upstream  (wrk -c 256 via the zero-config proxy vs a fixed limit of 1000; nginx static 200)"
  exit 0
fi

# Which cells: the names given, or all of them (and the fast-upstream check); with --report,
# those already run in WORK, none run again.
SELECTED=()
FAST=
REPORT_ONLY=
if [ "${1:-}" = --report ]; then
  [ -n "${WORK:-}" ] && [ -d "$WORK" ] || { echo "--report needs WORK=<dir of earlier runs>" >&2; exit 2; }
  REPORT_ONLY=1
  while read -r n _; do
    [ -n "$n" ] && [ -e "$WORK/$n.unprotected.json" ] && SELECTED+=("$n")
  done <<<"$CELLS"
  [ ${#SELECTED[@]} -gt 0 ] || [ -s "$WORK/fast.txt" ] || { echo "no runs in $WORK" >&2; exit 2; }
elif [ $# -eq 0 ]; then
  while read -r n _; do [ -n "$n" ] && SELECTED+=("$n"); done <<<"$CELLS"
  FAST=1
else
  for a in "$@"; do
    if [ "$a" = fast-upstream ]; then FAST=1; continue; fi
    grep -q "^$a " <<<"$CELLS" || { echo "unknown cell $a (bench/robustness.sh --list)" >&2; exit 2; }
    SELECTED+=("$a")
  done
fi

[ -n "${SKIP_BUILD:-}${REPORT_ONLY}" ] || cargo build --release --quiet
BIN=${BIN:-target/release/spillway}   # e.g. a copy, so a rebuild mid-run changes nothing
if [ -n "${WORK:-}" ]; then mkdir -p "$WORK"; else WORK=$(mktemp -d /tmp/spillway-robustness.XXXXXX); fi
mkdir -p "$OUT"

if [ -z "${SKIP_INSTALL:-}${REPORT_ONLY}" ] && { ! have haproxy || ! have nginx || ! have wrk; }; then
  if [ "$(id -u)" = 0 ] && have apt-get; then
    { apt-get install -y --no-install-recommends haproxy nginx-light wrk \
      || { apt-get update && apt-get install -y --no-install-recommends haproxy nginx-light wrk; } \
      || apt-get install -y --no-install-recommends haproxy nginx wrk; } >"$WORK/apt.log" 2>&1 \
      || echo "install failed (see $WORK/apt.log): runs needing haproxy/nginx/wrk are skipped"
  else
    echo "not root or no apt-get: runs needing haproxy/nginx/wrk are skipped if they are missing"
  fi
fi

cell_field() { grep "^$1 " <<<"$CELLS" | awk -v f="$2" '{print $f}'; }
timeout_s() { awk -v m="$2" -v x="$1" 'BEGIN {printf "%.4f", m * x / 1000}'; }

# Expected time: per cell three runs of DURATION + timeout + ~2 s of start and drain.
est=0
for n in "${SELECTED[@]}"; do
  t=$(timeout_s "$(cell_field "$n" 5)" "$(cell_field "$n" 3)")
  est=$(awk -v e="$est" -v d="$DURATION" -v t="$t" 'BEGIN {print e + 3 * (d + t + 2.5)}')
done
[ -n "$FAST" ] && est=$(awk -v e="$est" -v r="$REPEATS" 'BEGIN {print e + r * 2 * 11}')
[ -z "$REPORT_ONLY" ] || est=0
echo "robustness: ${#SELECTED[@]} cells${FAST:+ + fast-upstream}${REPORT_ONLY:+ already run}, ${DURATION} s each run; expected ~$(awk -v e="$est" 'BEGIN {printf "%.0f", e / 60 + 0.5}') min (+ the simulation)"
echo "work files in $WORK"
echo "host: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), busy now $(busy_1s) %"

start_backend() { # $1 = cell name; the drop, if any, is timed from the backend's start
  local n=$1 w m d b args=()
  w=$(cell_field "$n" 2); m=$(cell_field "$n" 3); d=$(cell_field "$n" 4); b=$(cell_field "$n" 9)
  case $d in
    const) args+=(--dist constant) ;;
    exp) args+=(--dist exponential) ;;
    lognormal) args+=(--dist lognormal --sigma 1) ;;
    bimodal) args+=(--dist bimodal --slow-share 0.05 --slow-factor 20) ;;
  esac
  # The sweep's model (crates/spillway-sim/src/sweep/config.rs ModelConfig defaults):
  # slowdown ×(1 + 1 · max(0, held/workers − 1)); drop to half speed over 40–70 % of the run.
  case $b in
    slowdown) args+=(--slowdown-alpha "$(awk -v w="$w" 'BEGIN {print 1 / w}')" --slowdown-threshold "$w") ;;
    capacity_drop) args+=(--drop-at "$(awk -v d="$DURATION" 'BEGIN {print 0.5 + 0.4 * d}')s"
      --drop-for "$(awk -v d="$DURATION" 'BEGIN {print 0.3 * d}')s" --drop-workers "$w" --drop-slowdown 2) ;;
  esac
  "$BIN" backend --listen "$BACKEND" --workers "$w" --service-time "${m}ms" "${args[@]}" \
    --seed "$SEED" --duration "$((DURATION + 40))s" >"$WORK/$n.backend.log" 2>&1 &
  BACKEND_PID=$!
  BACKEND_T0=$(date +%s.%N)
  PIDS+=("$BACKEND_PID")
  wait_port "$BACKEND"
}

load_args() { # $1 = cell name, $2 = target: the load's flags, one per line
  local n=$1 w m tx off crit arr cap rate c s
  w=$(cell_field "$n" 2); m=$(cell_field "$n" 3); tx=$(cell_field "$n" 5)
  off=$(cell_field "$n" 6); crit=$(cell_field "$n" 7); arr=$(cell_field "$n" 8)
  cap=$(awk -v w="$w" -v m="$m" 'BEGIN {print w * 1000 / m}')
  printf '%s\n' --target "$2" --duration "${DURATION}s" --timeout "$(timeout_s "$tx" "$m")s" \
    --attempts 1 --seed "$SEED" --quiet
  if [[ $arr == closed:* ]]; then
    printf '%s\n' --connections "${arr#closed:}"
    c=$crit; s=$(awk -v c="$crit" 'BEGIN {print 1 - c}')
  else
    rate=$(awk -v o="$off" -v c="$cap" 'BEGIN {printf "%.3f", o * c}')
    # CRITICAL is crit_share × capacity (at most all of the offered load), the rest SHEDDABLE.
    c=$(awk -v o="$off" -v c="$crit" 'BEGIN {print (c < o ? c : o)}')
    s=$(awk -v o="$off" -v c="$c" 'BEGIN {print o - c}')
    if [ "$arr" = on_off ]; then
      # The sweep's bursts: 4 cycles per run, on half of each at twice the mean rate.
      local half stages="" i
      half=$(awk -v d="$DURATION" 'BEGIN {print d / 8}')
      for i in 1 2 3 4; do
        stages+="$(awk -v r="$rate" 'BEGIN {printf "%.3f", 2 * r}')/${half}s,0/${half}s,"
      done
      printf '%s\n' --rate "stages:${stages%,}"
    else
      printf '%s\n' --rate "$rate" --arrivals poisson
    fi
  fi
  awk -v c="$c" 'BEGIN {exit !(c > 0)}' && printf '%s\n' --class "criticality=CRITICAL,weight=$c"
  awk -v s="$s" 'BEGIN {exit !(s > 1e-9)}' && printf '%s\n' --class "criticality=SHEDDABLE,weight=$s"
  return 0
}

write_haproxy() { # $1 = cell name
  local n=$1 w tq
  w=$(cell_field "$n" 2)
  tq=$(awk -v t="$(timeout_s "$(cell_field "$n" 5)" "$(cell_field "$n" 3)")" 'BEGIN {printf "%d", t * 1000}')
  cat >"$WORK/haproxy.cfg" <<HAP
global
  maxconn 9000
defaults
  mode http
  option abortonclose
  timeout connect 1s
  timeout client 60s
  timeout server 60s
  timeout queue ${tq}ms
frontend fe
  bind $FRONT
  http-request set-priority-class int(-10) if { req.hdr(x-spillway-criticality) -m str CRITICAL_PLUS }
  http-request set-priority-class int(0) if { req.hdr(x-spillway-criticality) -m str CRITICAL }
  http-request set-priority-class int(10) if { req.hdr(x-spillway-criticality) -m str SHEDDABLE_PLUS }
  http-request set-priority-class int(20) if { req.hdr(x-spillway-criticality) -m str SHEDDABLE }
  default_backend be
backend be
  server s1 $BACKEND maxconn $w
HAP
}

write_spillway() { # $1 = file, $2 = upstream, $3 = extra TOML (e.g. a fixed limit)
  # The extra goes right after [upstream]'s addresses: bare keys there are [upstream]'s, and a
  # table header there opens its own table.
  printf '[listen]\naddress = "%s"\n[upstream]\naddresses = ["%s"]\n%s\n[classify]\ntrusted = ["127.0.0.0/8"]\n[admin]\nlisten = "%s"\n' \
    "$FRONT" "$2" "${3:-}" "$ADMIN" >"$1"
}

http_get() { # $1 = host:port, $2 = path: the body
  exec 3<>"/dev/tcp/${1%:*}/${1#*:}"
  printf 'GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' "$2" "$1" >&3
  sed '1,/^\r$/d' <&3
  exec 3<&-
}

run_cell() { # $1 = cell name, $2 = way (unprotected | spillway | haproxy)
  local n=$1 way=$2 target=$BACKEND front=
  if [ "$way" = haproxy ] && ! have haproxy; then echo "  $way: skipped (haproxy missing)"; return; fi
  start_backend "$n"
  case $way in
    spillway)
      write_spillway "$WORK/spillway.toml" "$BACKEND" "${SPILLWAY_EXTRA:-}"
      "$BIN" proxy --config "$WORK/spillway.toml" >"$WORK/$n.$way.front.log" 2>&1 &
      front=$! ;;
    haproxy)
      write_haproxy "$n"
      haproxy -db -f "$WORK/haproxy.cfg" >"$WORK/$n.$way.front.log" 2>&1 &
      front=$! ;;
  esac
  if [ -n "$front" ]; then
    PIDS+=("$front")
    wait_port "$FRONT" || { echo "  $way: front did not start (see $WORK/$n.$way.front.log)"; stop "$front"; stop "$BACKEND_PID"; return; }
    target=$FRONT
  fi
  # The load starts 0.5 s after the backend, so a capacity drop lands 40–70 % into the run.
  sleep "$(awk -v t0="$BACKEND_T0" -v now="$(date +%s.%N)" 'BEGIN {d = t0 + 0.5 - now; print (d > 0 ? d : 0)}')"
  local args sampler=
  mapfile -t args < <(load_args "$n" "$target")
  if [ "$way" = spillway ]; then
    # The proxy's limit, in flight and queued every 100 ms (what the report's limit spread reads).
    : >"$WORK/$n.$way.limit.txt"
    (sample_status "$ADMIN" "$WORK/$n.$way.limit.txt") &
    sampler=$!
    PIDS+=("$sampler")
  fi
  "$BIN" load "${args[@]}" --title "$way" --json "$WORK/$n.$way.json" >"$WORK/$n.$way.txt" 2>&1 \
    || echo "  $way: load failed (see $WORK/$n.$way.txt)"
  [ -n "$sampler" ] && stop "$sampler"
  # What the backend served in all (with the run's length: its real capacity, when overloaded).
  http_get "$BACKEND" /stats >"$WORK/$n.$way.backend.json" 2>/dev/null || true
  if [ "$way" = spillway ]; then http_get "$ADMIN" /status >"$WORK/$n.$way.status.json" 2>/dev/null || true; fi
  [ -n "$front" ] && stop "$front"
  stop "$BACKEND_PID"
  printf '  %-11s %s\n' "$way" "$(sed -n 2p "$WORK/$n.$way.txt" | sed 's/^ *//')"
}

for n in "${SELECTED[@]}"; do
  [ -z "$REPORT_ONLY" ] || break
  echo "cell $n (load average $(cut -d' ' -f1 /proc/loadavg))"
  # The host's state when the cell ran (a report over groups run at different times says it).
  echo "$(date -u +%H:%M:%S) load average $(cut -d' ' -f1-3 /proc/loadavg), busy $(busy_1s) %" >"$WORK/$n.host.txt"
  for way in unprotected spillway haproxy; do run_cell "$n" "$way"; done
done

# The same cells in simulation: one [[matrix]] per cell, each simulated for DURATION s.
if [ ${#SELECTED[@]} -gt 0 ]; then
  # Computed apart, so that a failure stops the script rather than leaving the model's value
  # empty (which the simulation then refuses to parse, for every seed).
  overhead_ms=${SIM_OVERHEAD_MS:-$(python3 bench/robustness/overhead.py "$WORK" "${SELECTED[@]}")}
  {
    echo "name = \"robustness-real\""
    echo "description = \"the cells of bench/robustness.sh\""
    echo "seed = $SEED"
    echo "min_duration_s = $DURATION"
    echo "max_duration_s = $DURATION"
    # The real backend and host, as the simulation's model sees them: `spillway backend`'s
    # workers sleep on tokio's 1 ms timer, and each request spends time outside the backend
    # (loopback hops, the generator's send lag, three processes sharing the cores) — the mean
    # over this run's unprotected successes of latency − backend queue − service (the median
    # over cells with at least 50 of them), unless SIM_OVERHEAD_MS says.
    echo "[model]"
    echo "backend_timer_tick_ms = ${SIM_TICK_MS:-1}"
    echo "overhead_ms = $overhead_ms"
    echo "backend_wake_ms = ${SIM_WAKE_MS:-0}"
    for n in "${SELECTED[@]}"; do
      read -r _ w m d tx off crit arr b <<<"$(grep "^$n " <<<"$CELLS")"
      printf '[[matrix]]\nname = "%s"\nworkers = [%s]\nmean_ms = [%s]\ndistribution = ["%s"]\ntimeout_x = [%s]\noffered = [%s]\ncritical_share = [%s]\narrivals = ["%s"]\nbackend = ["%s"]\n' \
        "$n" "$w" "$m" "$d" "$tx" "$(awk -v o="$off" 'BEGIN {print (o > 0 ? o : 1)}')" "$crit" "$arr" "$b"
    done
  } >"$WORK/sim.toml"
  echo "simulating the same cells ($WORK/sim.toml) ..."
  "$BIN" sim --sweep "$WORK/sim.toml" --json "$WORK/sim.json" >"$WORK/sim.txt" 2>&1 \
    || echo "simulation failed (see $WORK/sim.txt)"
  # Other seeds of the same cells: how far one 12 s run of a cell strays by chance (the
  # controller's trajectory, heavy-tailed service samples), which a single real run does too.
  rm -f "$WORK"/sim.seed*.json
  for s in ${SIM_SEEDS-29 30 31 32}; do
    sed "s/^seed = .*/seed = $s/" "$WORK/sim.toml" >"$WORK/sim.seed$s.toml"
    "$BIN" sim --sweep "$WORK/sim.seed$s.toml" --json "$WORK/sim.seed$s.json" >/dev/null 2>&1 \
      || echo "simulation with seed $s failed"
  done
fi

# Requirement 1's fast upstream: closed-loop clients through the zero-config proxy vs the same
# proxy with the limit off (a fixed 1000), in front of nginx answering a static 200.
if [ -n "$FAST" ] && [ -z "$REPORT_ONLY" ]; then
  if have nginx; then
    mkdir -p "$WORK/nginx/logs"
    cat >"$WORK/nginx/nginx.conf" <<NGINX
worker_processes 1;
error_log $WORK/nginx/logs/error.log warn;
pid $WORK/nginx/nginx.pid;
events { worker_connections 8192; }
http {
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path $WORK/nginx/body;
  server { listen $STATIC; location / { return 200 "ok\n"; } }
}
NGINX
    nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" -g "daemon off;" >"$WORK/nginx.log" 2>&1 &
    NGINX_PID=$!
    PIDS+=("$NGINX_PID")
    wait_port "$STATIC"
    write_spillway "$WORK/zero.toml" "$STATIC"
    write_spillway "$WORK/fixed.toml" "$STATIC" $'[admission.limit]\nalgorithm = "fixed"\nlimit = 1000\n'
    : >"$WORK/fast.txt"
    for r in $(seq "$REPEATS"); do
      for conf in zero fixed; do
        "$BIN" proxy --config "$WORK/$conf.toml" >"$WORK/fast.$conf.$r.log" 2>&1 &
        front=$!
        PIDS+=("$front")
        wait_port "$FRONT"
        if have wrk; then
          wrk -t 2 -c 256 -d 8s "http://$FRONT/" >"$WORK/fast.$conf.$r.out" 2>&1 || true
          # goodput/s = (requests − non-2xx − socket errors) / duration
          awk -v conf="$conf" -v r="$r" '
            /requests in/ {n = $1; d = $4; sub(/s,?$/, "", d)}
            /Non-2xx/ {bad += $NF}
            /Socket errors/ {for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+,?$/) {v = $i; sub(/,/, "", v); bad += v}}
            END {printf "%s %s %.0f %d %d wrk\n", conf, r, (n - bad) / d, n, bad}' \
            "$WORK/fast.$conf.$r.out" >>"$WORK/fast.txt"
        else
          "$BIN" load --target "$FRONT" --connections 256 --duration 8s --timeout 1s --attempts 1 \
            --quiet --json "$WORK/fast.$conf.$r.json" >"$WORK/fast.$conf.$r.out" 2>&1 || true
          python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))[0]["summary"]; print(sys.argv[2], sys.argv[3], round(s["goodput_rps"]), s["offered"], s["offered"]-s["goodput"], "spillway-load")' \
            "$WORK/fast.$conf.$r.json" "$conf" "$r" >>"$WORK/fast.txt" || true
        fi
        http_get "$ADMIN" /status >"$WORK/fast.$conf.$r.status.json" 2>/dev/null || true
        stop "$front"
        echo "  fast-upstream $(tail -1 "$WORK/fast.txt")"
      done
    done
    stop "$NGINX_PID"
  else
    echo "fast-upstream: skipped (nginx missing)"
  fi
fi

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
python3 bench/robustness/report.py "$WORK" "$OUT/robustness-$STAMP" "$DURATION" \
  "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end" \
  "${SELECTED[@]}" <<<"$CELLS"
echo "wrote $OUT/robustness-$STAMP.md and .json (runs in $WORK)"
