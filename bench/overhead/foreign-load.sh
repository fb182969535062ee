#!/usr/bin/env bash
# The zero-config proxy's limit when foreign work shares the host (issue 4): a latency gradient
# reads a host busy with someone else's work as an overloaded upstream, cuts the limit, and the
# queue refuses requests the upstream has capacity for (fourth round: limit 129 -> 9-19 with a
# core of other engineers' builds, thousands refused in 6 s). This script makes the foreign
# work on purpose — BURNERS busy-loop processes (nice 0, like those builds), bounded by
# `timeout` — and measures, in interleaved rounds, the zero-config proxy with and without
# spillway-core's `rebaseline_on_futile_cut` (same binary; the "without" front writes the
# zero-config limit table out with that one parameter false), and the direct path beside them.
#
#   flock /work/measure.lock bench/overhead/foreign-load.sh
#   BIN (target/release/spillway)  RATE (7400)  ROUNDS (3)  SECS (8)  BURNERS (1)
#   KEYS ("direct norule rule"; also "fixed": bench/proxy-overhead.sh's fixed-limit proxy,
#   limit 10000, which never refuses — what the requests get when nobody sheds)   BEFORE_BIN: a binary for the "before" key (e.g. one built
#   before the rule existed), run with the plain zero-config file.
#
# Per round and key: a fresh front, the full benchmark's warm-up (1 s at 1,000/s, 8 s at
# 3,000/s, 2 s at RATE), then the burners start, 1 s later SECS s are measured at RATE, then
# the burners stop. The zero-config fronts' limit / in flight / queued are sampled from /status
# every 100 ms during the measured phase. Reported per round: refused, p50/p99 (from intended
# send time), late (timed out at 500 ms), goodput (answered 2xx in time, share of sent), the
# limit's range, the host's busy share.
#
# Everything on 127.0.0.1; every phase and burner bounded; processes killed on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-target/release/spillway}
RATE=${RATE:-7400}
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-8}
BURNERS=${BURNERS:-1}
read -r -a KEYS <<<"${KEYS:-direct norule rule}"
P=${BASE_PORT:-21720}
BACKEND=127.0.0.1:$P FRONT_ADDR=127.0.0.1:$((P + 1)) ADMIN=127.0.0.1:$((P + 2))
W=$(mktemp -d /tmp/spillway-foreign.XXXXXX)
. bench/lib/procs.sh
. bench/lib/status.sh # sample_status
. bench/lib/host.sh

"$BIN" backend --listen "$BACKEND" --workers 2048 --service-time 1ms --dist constant --cpu sleep \
  --duration 1200s >"$W/backend.log" 2>&1 &
PIDS+=($!)
printf '[listen]\naddress = "%s"\n[upstream]\naddresses = ["%s"]\n[admin]\nlisten = "%s"\n' \
  "$FRONT_ADDR" "$BACKEND" "$ADMIN" >"$W/rule.toml"
# The zero-config limit written out (as `spillway proxy --check` prints it) with the rule off.
"$BIN" proxy --config "$W/rule.toml" --check | python3 -c '
import json, sys
c = json.load(sys.stdin)
lim = c["admission"]["limit"]
assert lim["algorithm"] == "envoy_gradient", lim
lim["rebaseline_on_futile_cut"] = False
def val(v):
    return "true" if v is True else "false" if v is False else json.dumps(v)
print("[admission.limit]")
for k, v in lim.items():
    if v is not None:
        print(f"{k} = {val(v)}")' >"$W/limit.toml"
cat "$W/rule.toml" "$W/limit.toml" >"$W/norule.toml"
printf '[listen]\naddress = "%s"\n[upstream]\naddresses = ["%s"]\nmax_requests_per_task = 1024\nmax_idle_per_task = 1024\n[admission.limit]\nalgorithm = "fixed"\nlimit = 10000\n[classify]\ntrusted = ["127.0.0.0/8"]\n[admin]\nlisten = "%s"\n' \
  "$FRONT_ADDR" "$BACKEND" "$ADMIN" >"$W/fixed.toml"
# The two fronts must differ in the rule only (setting [admission.limit] alone would bring the
# core's defaults for the rest of [admission]; the limit table above is the whole of it).
"$BIN" proxy --config "$W/rule.toml" --check >"$W/rule.check"
"$BIN" proxy --config "$W/norule.toml" --check | python3 -c '
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(sys.stdin)
a["admission"]["limit"]["rebaseline_on_futile_cut"] = False
sys.exit(0 if a == b else "the norule front differs from the zero-config one in more than the rule")' "$W/rule.check"
wait_port "$BACKEND"

load() { # rate seconds [json]
  "$BIN" load --target "$TARGET" --rate "$1" --duration "${2}s" --attempts 1 --timeout 500ms \
    --quiet ${3:+--json "$3"} >/dev/null 2>&1 || true
}
start() { # key: sets TARGET, FRONT
  FRONT=
  case $1 in
    direct) TARGET=$BACKEND; return ;;
    rule) "$BIN" proxy --config "$W/rule.toml" >"$W/$1.log" 2>&1 & ;;
    norule) "$BIN" proxy --config "$W/norule.toml" >"$W/$1.log" 2>&1 & ;;
    fixed) "$BIN" proxy --config "$W/fixed.toml" >"$W/$1.log" 2>&1 & ;;
    before) "${BEFORE_BIN:?BEFORE_BIN names the before binary}" proxy --config "$W/rule.toml" >"$W/$1.log" 2>&1 & ;;
    *) echo "unknown key $1"; exit 2 ;;
  esac
  FRONT=$!
  PIDS+=("$FRONT")
  TARGET=$FRONT_ADDR
  wait_port "$TARGET"
}
burn() { # starts BURNERS busy loops for $1 seconds; sets BURN_PIDS
  BURN_PIDS=()
  local i
  for i in $(seq "$BURNERS"); do
    timeout "$1" sh -c 'while :; do :; done' &
    BURN_PIDS+=($!)
    PIDS+=($!)
  done
}

echo "rate $RATE/s, $ROUNDS rounds, $BURNERS burner(s), keys ${KEYS[*]}; before: $(uptime)"
for round in $(seq "$ROUNDS"); do
  wait_quiet
  for i in "${!KEYS[@]}"; do
    key=${KEYS[$(((i + round - 1) % ${#KEYS[@]}))]}
    start "$key"
    load 1000 1
    load 3000 8
    load "$RATE" 2
    burn $((SECS + 2))
    sleep 1
    SP=
    [ -n "$FRONT" ] && { sample_status "$ADMIN" "$W/$key.$round.status" & SP=$!; }
    h0=$(host_busy)
    load "$RATE" "$SECS" "$W/$key.$round.json"
    h1=$(host_busy)
    [ -n "$SP" ] && { kill "$SP" 2>/dev/null || true; wait "$SP" 2>/dev/null || true; }
    for b in "${BURN_PIDS[@]}"; do kill "$b" 2>/dev/null || true; wait "$b" 2>/dev/null || true; done
    echo "$round $key $h0 $h1" >>"$W/rounds"
    [ -n "$FRONT" ] && stop "$FRONT"
    sleep 1
  done
done
echo "after: $(uptime)"
python3 - "$W" <<'PY'
import json, os, statistics as st, sys
w = sys.argv[1]
rows = {}
print(f"{'key':<8}{'rnd':>4}{'sent':>8}{'refused':>9}{'late':>7}{'goodput':>9}{'p50 ms':>8}{'p99 ms':>9}{'host busy':>10}  limit min-max (in flight max, queued max)")
for line in open(os.path.join(w, "rounds")):
    rnd, key, b0, t0, b1, t1 = line.split()
    busy = (int(b1) - int(b0)) / max(int(t1) - int(t0), 1)
    d = json.load(open(os.path.join(w, f"{key}.{rnd}.json")))[0]
    s, l = d["summary"], d["latency"]["total"]
    lim = ""
    sp = os.path.join(w, f"{key}.{rnd}.status")
    if os.path.exists(sp):
        v = [list(map(int, x.split())) for x in open(sp) if len(x.split()) == 3]
        if v:
            lim = f"  {min(x[0] for x in v)}-{max(x[0] for x in v)} ({max(x[1] for x in v)}, {max(x[2] for x in v)})"
    print(f"{key:<8}{rnd:>4}{s['sent']:>8}{s['rejected']:>9}{s['timed_out']:>7}{s['goodput'] / max(s['sent'], 1):>9.1%}{l['p50_ms']:>8.2f}{l['p99_ms']:>9.2f}{busy:>9.0%}{lim}")
    rows.setdefault(key, []).append((s["rejected"], l["p99_ms"], s["goodput"] / max(s["sent"], 1)))
print("\nmedian over rounds:")
for key, v in rows.items():
    print(f"  {key:<8} refused {st.median(r for r, _, _ in v):>8.0f}   p99 {st.median(p for _, p, _ in v):.2f} ms"
          f"   goodput {st.median(g for _, _, g in v):.1%} of sent (within the 500 ms timeout)")
print(f"raw: {w}")
PY
