#!/usr/bin/env bash
# What TLS costs the proxy per request, against the same build in plaintext, in interleaved
# rounds (plain, tls-in, tls-out, plain, ...) so that a busy moment of the shared machine hits
# every front alike. Three fronts, one build (needs `--features tls`):
#
#   plain    client --http--> proxy --http--> relay --http--> backend
#   tls-in   client --https-> proxy [listen.tls] --http--> relay --http--> backend
#   tls-out  client --http--> proxy [upstream.tls] --https-> tls relay --http--> backend
#
# The relays are two more `spillway proxy` processes (one plain, one with [listen.tls]) so
# that every front forwards to a proxy, not to the backend directly; only the front's CPU is
# counted: utime + stime from /proc/PID/stat over an open-loop run at RATE (`spillway load`,
# over HTTPS for tls-in, trusting the test CA with --ca-file) and over a wrk run (wrk speaks
# TLS without checking the certificate). Connections are kept alive, so this is the per-request
# cost of encryption with handshakes amortised, which is what a sidecar or gateway sees.
#
#   flock /work/measure.lock bench/overhead/tls.sh BIN
#
# Env: RATE (3000), SECS (8), WRK_SECS (4, 0 = skip), WRK_CONNS (64), ROUNDS (4).
set -euo pipefail
BIN=${1:?usage: tls.sh BIN (a build with --features tls)}
RATE=${RATE:-3000}
SECS=${SECS:-8}
WRK_SECS=${WRK_SECS:-4}
WRK_CONNS=${WRK_CONNS:-64}
ROUNDS=${ROUNDS:-4}
BACKEND=127.0.0.1:21191
RELAY=127.0.0.1:21192
RELAY_TLS=127.0.0.1:21193
PROXY=127.0.0.1:21194
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
cpu_ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
HZ=$(getconf CLK_TCK)

# A CA and a certificate for localhost / 127.0.0.1 that it signed (P-256).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=bench-ca \
  -keyout "$WORK/ca.key" -out "$WORK/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
  -keyout "$WORK/leaf.key" -out "$WORK/leaf.csr" 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' >"$WORK/ext"
openssl x509 -req -in "$WORK/leaf.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" -CAcreateserial \
  -days 2 -extfile "$WORK/ext" -out "$WORK/leaf.pem" 2>/dev/null

# conf FILE LISTEN UPSTREAM [listen-tls] [upstream-tls]: the admin listens on LISTEN's port + 10.
conf() {
  printf '[listen]\naddress = "%s"\n' "$2" >"$1"
  [ "${4:-}" != listen-tls ] || printf '[listen.tls]\ncert = "%s"\nkey = "%s"\n' "$WORK/leaf.pem" "$WORK/leaf.key" >>"$1"
  printf '[upstream]\naddresses = ["%s"]\nmax_requests_per_task = 1024\nmax_idle_per_task = 1024\n' "$3" >>"$1"
  [ "${5:-}" != upstream-tls ] || printf '[upstream.tls]\nserver_name = "localhost"\nca_file = "%s"\n' "$WORK/ca.pem" >>"$1"
  printf '[admission.limit]\nalgorithm = "fixed"\nlimit = 10000\n[classify]\ntrusted = ["127.0.0.0/8"]\n' >>"$1"
  printf '[admin]\nlisten = "127.0.0.1:%s"\n' $((${2#*:} + 10)) >>"$1"
}
conf "$WORK/relay.toml" "$RELAY" "$BACKEND"
conf "$WORK/relay-tls.toml" "$RELAY_TLS" "$BACKEND" listen-tls
conf "$WORK/plain.toml" "$PROXY" "$RELAY"
conf "$WORK/tls-in.toml" "$PROXY" "$RELAY" listen-tls
conf "$WORK/tls-out.toml" "$PROXY" "$RELAY_TLS" "" upstream-tls

"$BIN" backend --listen "$BACKEND" --workers 2048 --service-time 1ms --dist constant \
  --cpu sleep --duration 1800s >"$WORK/backend.log" 2>&1 &
PIDS+=($!)
for r in relay relay-tls; do
  "$BIN" proxy --config "$WORK/$r.toml" >"$WORK/$r.log" 2>&1 &
  PIDS+=($!)
done
wait_port "$BACKEND" && wait_port "$RELAY" && wait_port "$RELAY_TLS"

echo "uptime before: $(uptime)"
echo "rate=$RATE/s secs=$SECS wrk=${WRK_SECS}s x $WRK_CONNS conns rounds=$ROUNDS"
OUT=$WORK/rows
for r in $(seq "$ROUNDS"); do
  for front in plain tls-in tls-out; do
    "$BIN" proxy --config "$WORK/$front.toml" >"$WORK/$front.log" 2>&1 &
    pid=$!
    PIDS+=($pid)
    wait_port "$PROXY"
    sleep 0.2
    kill -0 "$pid" 2>/dev/null || { echo "$front did not start: $(cat "$WORK/$front.log")"; exit 1; }
    if [ "$front" = tls-in ]; then
      target=(--target "https://localhost:${PROXY#*:}" --ca-file "$WORK/ca.pem") url=https://127.0.0.1:${PROXY#*:}/
    else
      target=(--target "$PROXY") url=http://$PROXY/
    fi
    "$BIN" load "${target[@]}" --rate 1000 --duration 2s --attempts 1 --quiet >/dev/null 2>&1 || true
    t0=$(cpu_ticks "$pid")
    "$BIN" load "${target[@]}" --rate "$RATE" --duration "${SECS}s" --attempts 1 \
      --timeout 500ms --quiet --json "$WORK/$front.$r.json" >"$WORK/$front.$r.txt"
    t1=$(cpu_ticks "$pid")
    read -r sent good p50 p99 < <(python3 - "$WORK/$front.$r.json" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))[0]
lat = (run.get("latency") or {}).get("total") or {}
print(run["summary"]["sent"], run["summary"]["goodput"], lat.get("p50_ms", "?"), lat.get("p99_ms", "?"))
PY
)
    rps=- wrk_us=-
    if [ "$WRK_SECS" != 0 ]; then
      w0=$(cpu_ticks "$pid")
      wrk -t1 -c"$WRK_CONNS" -d"${WRK_SECS}s" "$url" >"$WORK/$front.$r.wrk" 2>/dev/null || true
      w1=$(cpu_ticks "$pid")
      rps=$(awk '/Requests\/sec:/ {print int($2)}' "$WORK/$front.$r.wrk")
      n=$(awk '/requests in/ {print $1}' "$WORK/$front.$r.wrk")
      wrk_us=$(awk -v t=$((w1 - w0)) -v hz="$HZ" -v n="${n:-0}" 'BEGIN {print n ? sprintf("%.1f", t / hz * 1e6 / n) : "-"}')
    fi
    us=$(python3 -c "print(round(($t1 - $t0) / $HZ * 1e6 / max($sent, 1), 1))")
    echo "round=$r front=$front cpu_us_per_req=$us sent=$sent goodput=$good p50_ms=$p50 p99_ms=$p99 wrk_rps=$rps wrk_cpu_us=$wrk_us" | tee -a "$OUT"
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    sleep 1
  done
done
echo "uptime after: $(uptime)"
python3 - "$OUT" <<'PY'
import sys, collections, statistics
rows = [dict(kv.split("=", 1) for kv in l.split()) for l in open(sys.argv[1]) if l.strip()]
by = collections.defaultdict(dict)
for r in rows:
    by[r["front"]][r["round"]] = r
def col(front, key):
    return {k: float(v[key]) for k, v in by[front].items() if v.get(key, "-") not in ("-", "")}
for key in ("cpu_us_per_req", "wrk_cpu_us", "wrk_rps"):
    base = col("plain", key)
    print(f"{key}: plain median {statistics.median(base.values()):.1f} (runs {sorted(base.values())})")
    for front in ("tls-in", "tls-out"):
        c = col(front, key)
        # Each round's ratio against the plain front of the same round, then their spread.
        ratios = sorted(c[k] / base[k] for k in c if k in base and base[k] > 0)
        if ratios:
            print(f"  {front}: median {statistics.median(c.values()):.1f}; ratio to plain per round "
                  f"median {statistics.median(ratios):.3f}, min {ratios[0]:.3f}, max {ratios[-1]:.3f} "
                  f"({', '.join(f'{x:.3f}' for x in ratios)})")
PY
