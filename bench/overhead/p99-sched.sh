#!/usr/bin/env bash
# Why the proxy's p99 grows at 25 % load (issue 4): the fronts of bench/proxy-overhead.sh at one
# rate, in interleaved rounds, with what each one waited for a CPU (run-queue wait from
# /proc/PID/task/*/schedstat: run ns, wait ns, timeslices) and, for the zero-config proxy, its
# adaptive limit sampled from /status every 100 ms. Each front starts fresh per round and gets the
# full benchmark's sequence before the measured phase (1 s at 1,000/s, 8 s at 3,000/s, SETTLE s at
# RATE), so its limit is in the state the full benchmark measures.
#
#   flock /work/measure.lock bench/overhead/p99-sched.sh
#   BIN (target/release/spillway)  RATE (7400)  ROUNDS (3)  SECS (6)  SETTLE (2)
#   KEYS ("direct fixed zeroconf nginx")  plus, for any key, KEY_slice: the same front with its
#   data-plane threads' EEVDF slice set to SLICE_US (100) from outside (bench/overhead/set-slice.py,
#   so any binary can be compared), e.g. KEYS="direct fixed fixed_slice nginx"; PROXY_ENV
#   ("VAR=value ...", given to every proxy). fixed_idle32, zeroconf_idle256, ...: the same front
#   with [upstream] max_idle_per_task 32 / 256; fixed_pool256, fixed_untrusted, zeroconf_pool1024:
#   one setting of the fixed and zero-config fronts swapped (below). SAMPLE (1): poll every
#   proxy front's /status every 100 ms during the measured phase (0: none — the poller is a
#   Python process and the admin API a third proxy thread, both on the same 2 cores; until the
#   fifth round only the zero-config fronts were polled, which biased the comparison). The "opens" column counts TCP connections opened
#   on the host during the measured phase (the client's and the front's upstream connections);
#   "upstream" = established connections to the backend before > after the measured phase (a
#   front's idle pool keeps what it opened, so the difference is the front's own opens).
#
# Everything on 127.0.0.1; every phase bounded; processes killed on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-target/release/spillway}
RATE=${RATE:-7400}
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-6}
SETTLE=${SETTLE:-2}
SLICE_US=${SLICE_US:-100}
read -r -a KEYS <<<"${KEYS:-direct fixed zeroconf nginx}"
P=${BASE_PORT:-21620}
BACKEND=127.0.0.1:$P FIXED=127.0.0.1:$((P + 1)) ZERO=127.0.0.1:$((P + 2)) NGINX=127.0.0.1:$((P + 3))
ADMIN=127.0.0.1:$((P + 4)) ZADMIN=127.0.0.1:$((P + 5))
W=$(mktemp -d /tmp/spillway-p99-sched.XXXXXX)
. bench/lib/procs.sh
. bench/lib/status.sh # sample_status
. bench/lib/host.sh    # host_busy, wait_quiet

"$BIN" backend --listen "$BACKEND" --workers 2048 --service-time 1ms --dist constant --cpu sleep \
  --duration 1200s >"$W/backend.log" 2>&1 &
BACKEND_PID=$!
PIDS+=("$BACKEND_PID")
printf '[listen]\naddress = "%s"\n[upstream]\naddresses = ["%s"]\nmax_requests_per_task = 1024\nmax_idle_per_task = 1024\n[admission.limit]\nalgorithm = "fixed"\nlimit = 10000\n[classify]\ntrusted = ["127.0.0.0/8"]\n[admin]\nlisten = "%s"\n' \
  "$FIXED" "$BACKEND" "$ADMIN" >"$W/fixed.toml"
printf '[listen]\naddress = "%s"\n[upstream]\naddresses = ["%s"]\n[admin]\nlisten = "%s"\n' \
  "$ZERO" "$BACKEND" "$ZADMIN" >"$W/zeroconf.toml"
# *_idle32 / *_idle256: the same front with [upstream] max_idle_per_task 32 (the proxy's
# default) / 256 (= the default max_requests_per_task).
for f in fixed zeroconf; do
  for n in 32 256; do
    sed "s/^\[upstream\]$/[upstream]\nmax_idle_per_task = $n/; /^max_idle_per_task = 1024$/d" "$W/$f.toml" >"$W/${f}_idle$n.toml"
  done
done
# The fixed-limit front differs from the zero-config one in three settings; each alone:
# fixed_pool256 = the zero-config pool (max_requests_per_task and max_idle_per_task 256),
# fixed_untrusted = no [classify] trusted, zeroconf_pool1024 = the fixed front's pool.
sed 's/^max_requests_per_task = 1024$/max_requests_per_task = 256/; s/^max_idle_per_task = 1024$/max_idle_per_task = 256/' \
  "$W/fixed.toml" >"$W/fixed_pool256.toml"
sed '/^\[classify\]$/d; /^trusted = /d' "$W/fixed.toml" >"$W/fixed_untrusted.toml"
sed 's/^\[upstream\]$/[upstream]\nmax_requests_per_task = 1024\nmax_idle_per_task = 1024/' "$W/zeroconf.toml" >"$W/zeroconf_pool1024.toml"
. bench/lib/nginx.sh
nginx_conf "$W/nginx" "$NGINX" "$BACKEND"
wait_port "$BACKEND"

# Sum of run ns, run-queue wait ns and timeslices over every thread of a process and its children.
sched() {
  local p t r=0 w=0 n=0 a b c
  for p in "$1" $(pgrep -P "$1" || true); do
    for t in /proc/"$p"/task/*/schedstat; do
      read -r a b c <"$t" 2>/dev/null || continue
      r=$((r + a)) w=$((w + b)) n=$((n + c))
    done
  done
  echo "$r $w $n"
}
# TCP connections opened on the host so far (/proc/net/snmp Tcp ActiveOpens): a phase's delta
# is the client's plus the front's new upstream connections.
# Established connections to the backend (a front's idle and busy upstream connections; none
# on the direct path once its client has exited), before and after the measured phase.
conns() { ss -Htn state established "( dport = :${1##*:} )" | wc -l; }
opens() { awk '/^Tcp:/ { if (seen) { print $c; exit } for (i = 1; i <= NF; i++) if ($i == "ActiveOpens") c = i; seen = 1 }' /proc/net/snmp; }
load() { # rate seconds [json]
  /usr/bin/time -f "%U %S" -o "$W/time" "$BIN" load --target "$TARGET" --rate "$1" --duration "${2}s" --attempts 1 --timeout 500ms \
    --quiet ${3:+--json "$3"} >/dev/null 2>&1 || true
}
start() { # key: sets TARGET FRONT (pid or empty)
  FRONT=
  case ${1%_slice} in
    direct) TARGET=$BACKEND; return ;;
    fixed*) TARGET=$FIXED; env ${PROXY_ENV:-} "$BIN" proxy --config "$W/${1%_slice}.toml" >"$W/$1.log" 2>&1 & ;;
    zeroconf*) TARGET=$ZERO; env ${PROXY_ENV:-} "$BIN" proxy --config "$W/${1%_slice}.toml" >"$W/$1.log" 2>&1 & ;;
    nginx) TARGET=$NGINX; nginx -p "$W/nginx" -c "$W/nginx/nginx.conf" -g "daemon off;" >"$W/$1.log" 2>&1 & ;;
  esac
  FRONT=$!
  PIDS+=("$FRONT")
  wait_port "$TARGET"
  sleep 0.2
  if [ "${1%_slice}" != "$1" ]; then
    if [ "${1%_slice}" = nginx ]; then
      for c in $(pgrep -P "$FRONT"); do python3 bench/overhead/set-slice.py "$c" "$SLICE_US" >/dev/null; done
    else
      python3 bench/overhead/set-slice.py "$FRONT" "$SLICE_US" spillway-data >/dev/null
    fi
  fi
}

echo "rate $RATE/s, $ROUNDS rounds, keys ${KEYS[*]}, slice ${SLICE_US} us; $(uptime)"
for round in $(seq "$ROUNDS"); do
  wait_quiet
  for i in "${!KEYS[@]}"; do
    key=${KEYS[$(((i + round - 1) % ${#KEYS[@]}))]}
    start "$key"
    load 1000 1
    load 3000 8
    load "$RATE" "$SETTLE"
    f0=$( [ -n "$FRONT" ] && sched "$FRONT" || echo "0 0 0")
    b0=$(sched "$BACKEND_PID")
    h0=$(host_busy)
    o0=$(opens)
    u0=$(conns "$BACKEND")
    t0=$(( $( [ -n "$FRONT" ] && tree_ticks "$FRONT" || echo 0) + $(cpu_ticks "$BACKEND_PID") ))
    SP=
    if [ "${SAMPLE:-1}" = 1 ]; then
      case $key in
        zeroconf*) sample_status "$ZADMIN" "$W/$key.$round.status" & SP=$! ;;
        fixed*) sample_status "$ADMIN" "$W/$key.$round.status" & SP=$! ;;
      esac
    fi
    load "$RATE" "$SECS" "$W/$key.$round.json"
    [ -n "$SP" ] && { kill "$SP" 2>/dev/null || true; wait "$SP" 2>/dev/null || true; }
    f1=$( [ -n "$FRONT" ] && sched "$FRONT" || echo "0 0 0")
    b1=$(sched "$BACKEND_PID")
    h1=$(host_busy)
    o1=$(opens)
    u1=$(conns "$BACKEND")
    t1=$(( $( [ -n "$FRONT" ] && tree_ticks "$FRONT" || echo 0) + $(cpu_ticks "$BACKEND_PID") ))
    echo "$round $key $f0 $f1 $b0 $b1 $h0 $h1 $(awk '{print $1 + $2}' "$W/time") $((o1 - o0)) $((t1 - t0)) $u0 $u1" >>"$W/sched"
    [ -n "$FRONT" ] && stop "$FRONT"
    sleep 1
  done
done
echo "after: $(uptime)"
python3 - "$W" <<'PY'
import json, os, statistics as st, sys
w = sys.argv[1]
rows = {}
print(f"{'key':<14}{'rnd':>4}{'sent':>7}{'refused':>8}{'p50':>7}{'p99':>7}{'p99.9':>8}{'lag99':>7}"
      f"{'front run':>10}{'front wait':>11}{'wait/slice':>11}{'backend wait':>13}{'others':>7}{'opens':>7}{'upstream':>10}  limit min-max, queued max")
for line in open(os.path.join(w, "sched")):
    f = line.split()
    rnd, key = f[0], f[1]
    fr0, fw0, fn0, fr1, fw1, fn1, br0, bw0, bn0, br1, bw1, bn1, hb0, ht0, hb1, ht1 = map(int, f[2:18])
    # others = the host's busy CPU less the front's, the backend's and the client's, in cores
    # (/proc/stat; /proc/PID/stat; getrusage). It reads up to ~0.5 core low, even negative: the
    # host's busy time is sampled at ticks, which miss many of the 20-60 us bursts these
    # processes run in, while the per-process times are scaled to the exact run time. Compare
    # it between rounds; a round near +1 had someone else's build on the host.
    cpus, tick = os.cpu_count(), 1 / os.sysconf("SC_CLK_TCK")
    elapsed = (ht1 - ht0) / cpus * tick
    ours = int(f[20]) * tick + float(f[18])
    others = ((hb1 - hb0) * tick - ours) / max(elapsed, 1e-9)
    d = json.load(open(os.path.join(w, f"{key}.{rnd}.json")))[0]
    s, l = d["summary"], d["latency"]["total"]
    n = max(s["sent"], 1)
    lag = d.get("meta", {}).get("send_lag", {}).get("p99_ms", float("nan"))
    lim = ""
    sp = os.path.join(w, f"{key}.{rnd}.status")
    if os.path.exists(sp):
        v = [list(map(int, x.split())) for x in open(sp) if len(x.split()) == 3]
        if v:
            lim = f"  {min(x[0] for x in v)}-{max(x[0] for x in v)}, {max(x[2] for x in v)} (in flight max {max(x[1] for x in v)})"
    slices = max(fn1 - fn0, 1)
    print(f"{key:<14}{rnd:>4}{s['sent']:>7}{s['rejected']:>8}{l['p50_ms']:>7.2f}{l['p99_ms']:>7.2f}{l['p999_ms']:>8.2f}{lag:>7.2f}"
          f"{(fr1-fr0)/n/1e3:>8.1f}us{(fw1-fw0)/n/1e3:>9.1f}us{(fw1-fw0)/slices/1e3:>9.1f}us{(bw1-bw0)/n/1e3:>11.1f}us{others:>7.2f}{int(f[19]):>7}{f[21] + '>' + f[22]:>10}{lim}")
    rows.setdefault(key, []).append((l["p99_ms"], rnd))
direct = {r: p for p, r in rows.get("direct", [])}
print("\nmedian p99 and p99 added (median of round-paired differences, spread):")
for key, v in rows.items():
    med = st.median(p for p, _ in v)
    diffs = sorted(p - direct[r] for p, r in v if r in direct)
    add = f"  added {st.median(diffs):+.2f} ms ({diffs[0]:+.2f}..{diffs[-1]:+.2f})" if diffs and key != "direct" else ""
    print(f"  {key:<14} p99 {med:.2f} ms{add}")
print(f"raw: {w}")
PY
