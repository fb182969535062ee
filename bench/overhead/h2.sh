#!/usr/bin/env bash
# HTTP/2 clients through the fronts, side by side in interleaved rounds: a direct connection,
# `spillway proxy` and nginx, for two workloads —
#
#   h2-h1  h2load's GETs over h2c to an HTTP/1.1 upstream (`spillway backend`, 1 ms sleep):
#          spillway with `upstream.protocol = "http1"`, nginx `listen … http2` + `proxy_pass`
#          (HTTP/1.1, upstream keepalive); direct = h2load to the backend's own h2c;
#   grpc   unary gRPC calls (`spillway.example.Work/Do`, a 9-byte framed request, the reply's
#          `grpc-status` in trailers) to a tonic service (examples/grpc_work_server.rs, 1 ms
#          sleep): spillway with the default `protocol = "auto"` (gRPC always goes over
#          HTTP/2), nginx `grpc_pass` (upstream keepalive); direct = h2load to the service.
#
# Per front and round: the front's CPU per request (utime + stime from /proc, nginx's master
# and workers) and h2load's mean request time at a fixed RATE (h2load -c 8 -m 8 --rps RATE/8),
# then the closed-loop maximum (h2load -c CONNS -m STREAMS for MAX_SECS). With 256 streams in
# flight and a 1 ms upstream the latency ceiling (~128,000/s) is far above what 2 cores
# carry, so the maximum is bound by CPU — unlike wrk's 64 connections in bench/overhead/ab.sh,
# which meet the 1 ms upstream's latency ceiling (the direct path's ~35,000/s). h2load reports no percentiles, so the
# tail of HTTP/1.1 requests stays bench/proxy-overhead.sh's.
#
#   flock /work/measure.lock bench/overhead/h2.sh [BIN]      # BIN: target/release/spillway
#
# Env: ROUNDS (3), RATE (5000), SECS (6), MAX_SECS (5), CONNS (16), STREAMS (16), WORKLOADS
# ("h2-h1 grpc"), OUT (a file for the raw rows), GRPC_BIN (built with `cargo build --release -p
# spillway-proxy --example grpc_work_server` when missing). Needs h2load (Debian's
# nghttp2-client, installed when missing and root) and nginx (its rows skipped, saying so,
# when missing). Everything listens on 127.0.0.1; every phase is bounded; every process
# started here is killed on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-3}
RATE=${RATE:-5000}
SECS=${SECS:-6}
MAX_SECS=${MAX_SECS:-5}
CONNS=${CONNS:-16}
STREAMS=${STREAMS:-16}
WORKLOADS=${WORKLOADS:-h2-h1 grpc}
BIN=${1:-target/release/spillway}
GRPC_BIN=${GRPC_BIN:-target/release/examples/grpc_work_server}
BACKEND=127.0.0.1:21581
GRPC=127.0.0.1:21582
FRONT=127.0.0.1:21583
WORK=$(mktemp -d /tmp/spillway-h2.XXXXXX)
OUT=${OUT:-$WORK/rows}
. bench/lib/procs.sh
. bench/lib/host.sh
. bench/lib/nginx.sh
. bench/lib/proxy.sh

[ -x "$BIN" ] || { echo "no spillway binary at $BIN (cargo build --release)" >&2; exit 2; }
[ -x "$GRPC_BIN" ] || cargo build --release --quiet -p spillway-proxy --example grpc_work_server
if ! have h2load && [ "$(id -u)" = 0 ] && have apt-get; then
  apt-get install -y --no-install-recommends nghttp2-client >"$WORK/apt.log" 2>&1 || true
fi
have h2load || { echo "h2load (Debian's nghttp2-client) is not installed and could not be: nothing to measure" >&2; exit 1; }
have curl || { echo "curl is needed to check each front's gRPC answer" >&2; exit 1; }
FRONTS="direct spillway nginx"
have nginx || { FRONTS="direct spillway"; echo "nginx is not installed: its rows are skipped"; }
for w in $WORKLOADS; do
  case $w in h2-h1 | grpc) ;; *) echo "unknown workload '$w': expected h2-h1 or grpc" >&2; exit 2 ;; esac
done

"$BIN" backend --listen "$BACKEND" --workers 4096 --service-time 1ms --dist constant --cpu sleep \
  --duration 1800s >"$WORK/backend.log" 2>&1 &
PIDS+=($!)
"$GRPC_BIN" "$GRPC" 1800 >"$WORK/grpc.log" 2>&1 &
PIDS+=($!)
wait_port "$BACKEND" && wait_port "$GRPC" || { echo "the upstreams did not start (see $WORK)" >&2; exit 1; }

fixed_proxy_conf "$FRONT" "$BACKEND" 'protocol = "http1"' >"$WORK/h2-h1.toml"
fixed_proxy_conf "$FRONT" "$GRPC" >"$WORK/grpc.toml" # protocol auto: gRPC always over HTTP/2
nginx_conf "$WORK/nginx-h2-h1" "$FRONT" "$BACKEND" "http2 reuseport"
nginx_grpc_conf "$WORK/nginx-grpc" "$FRONT" "$GRPC"
printf '\x00\x00\x00\x00\x04\x0a\x02hi' >"$WORK/call.bin" # WorkRequest { payload: "hi" }, framed

# h2load's arguments for a workload against an address.
load_args() { # $1 = workload, $2 = address
  if [ "$1" = grpc ]; then
    echo "-d $WORK/call.bin -H content-type:application/grpc -H te:trailers http://$2/spillway.example.Work/Do"
  else
    echo "http://$2/"
  fi
}
# Fails unless one call through $2 is answered as the workload expects (gRPC: status 0).
check_answer() { # $1 = workload, $2 = address
  if [ "$1" = grpc ]; then
    curl -s --http2-prior-knowledge -H 'content-type: application/grpc' -H 'te: trailers' \
      --data-binary @"$WORK/call.bin" -D "$WORK/check.head" -o /dev/null \
      "http://$2/spillway.example.Work/Do" && grep -qi '^grpc-status: 0' "$WORK/check.head"
  else
    [ "$(curl -s --http2-prior-knowledge -o /dev/null -w '%{http_code}' "http://$2/")" = 200 ]
  fi
}
# "N_SUCCEEDED N_BAD MEAN_MS RPS" from h2load's report: BAD counts failed, errored and timed-out
# requests and answers other than 2xx.
parse_h2load() {
  awk '
    /^finished in/ { rps = $4 }
    /^requests:/ { ok = $8; bad += $10 + $12 + $14 }
    /^status codes:/ { bad += $5 + $7 + $9 }
    /^time for request:/ {
      v = $6; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v)
      mean = (u == "us") ? v / 1000 : (u == "s") ? v * 1000 : v
    }
    END { printf "%d %d %.3f %.0f\n", ok, bad, mean, rps }' "$1"
}

HZ=$(getconf CLK_TCK)
wait_quiet
echo "h2: rounds=$ROUNDS rate=$RATE/s for ${SECS}s, max ${MAX_SECS}s x $CONNS connections x $STREAMS streams; $(nginx -v 2>&1 || true)"
: >"$OUT"
fronts=($FRONTS)
for r in $(seq "$ROUNDS"); do
  for w in $WORKLOADS; do
    for i in "${!fronts[@]}"; do
      f=${fronts[$(((i + r - 1) % ${#fronts[@]}))]} # the order rotated by one a round
      pid= addr=$FRONT
      case $f in
        direct) if [ "$w" = grpc ]; then addr=$GRPC; else addr=$BACKEND; fi ;;
        spillway) "$BIN" proxy --config "$WORK/$w.toml" >"$WORK/proxy.log" 2>&1 & pid=$! ;;
        nginx) nginx -p "$WORK/nginx-$w" -c "$WORK/nginx-$w/nginx.conf" -g "daemon off;" >"$WORK/nginx.log" 2>&1 & pid=$! ;;
      esac
      [ -z "$pid" ] || { PIDS+=("$pid"); wait_port "$FRONT" || { echo "$f did not start" >&2; exit 1; }; }
      check_answer "$w" "$addr" || { echo "$f ($w): a call was not answered as expected (see $WORK)" >&2; exit 1; }
      # shellcheck disable=SC2046
      h2load -c "$CONNS" -m "$STREAMS" -D 2 $(load_args "$w" "$addr") >/dev/null 2>&1 # warm-up
      t0=0; [ -z "$pid" ] || t0=$(tree_ticks "$pid")
      # shellcheck disable=SC2046
      h2load -c 8 -m 8 --rps $((RATE / 8)) -D "$SECS" $(load_args "$w" "$addr") >"$WORK/rate" 2>&1
      t1=0; [ -z "$pid" ] || t1=$(tree_ticks "$pid")
      # shellcheck disable=SC2046
      h2load -c "$CONNS" -m "$STREAMS" -D "$MAX_SECS" $(load_args "$w" "$addr") >"$WORK/max" 2>&1
      read -r ok bad mean _ < <(parse_h2load "$WORK/rate")
      read -r _ mbad _ rps < <(parse_h2load "$WORK/max")
      cpu=-
      [ -z "$pid" ] || cpu=$(awk -v d=$((t1 - t0)) -v hz="$HZ" -v n="$ok" 'BEGIN {printf "%.1f", d * 1e6 / hz / n}')
      row="round=$r workload=$w front=$f cpu_us_per_req=$cpu mean_ms=$mean max_rps=$rps bad=$((bad + mbad))"
      echo "$row" | tee -a "$OUT"
      [ -z "$pid" ] || stop "$pid"
    done
  done
done
echo "uptime after: $(uptime)"
python3 - "$OUT" <<'PY'
import statistics as st, sys
rows = [dict(kv.split("=", 1) for kv in line.split()) for line in open(sys.argv[1]) if line.strip()]
for w in dict.fromkeys(r["workload"] for r in rows):
    by = {}
    for r in rows:
        if r["workload"] == w:
            by.setdefault(r["front"], {})[r["round"]] = r
    print(f"{w}:")
    for f, rs in by.items():
        cpu = [float(r["cpu_us_per_req"]) for r in rs.values() if r["cpu_us_per_req"] != "-"]
        mx = [float(r["max_rps"]) for r in rs.values()]
        mean = [float(r["mean_ms"]) for r in rs.values()]
        print(f"  {f}: max median {st.median(mx):.0f}/s (runs {[int(x) for x in mx]}); mean at the rate "
              f"{st.median(mean):.3f} ms" + (f"; cpu/req median {st.median(cpu):.1f} us (runs {cpu})" if cpu else ""))
    if "spillway" in by and "nginx" in by:
        rounds = sorted(set(by["spillway"]) & set(by["nginx"]))
        mx = [float(by["spillway"][k]["max_rps"]) / float(by["nginx"][k]["max_rps"]) for k in rounds]
        cpu = [float(by["spillway"][k]["cpu_us_per_req"]) / float(by["nginx"][k]["cpu_us_per_req"]) for k in rounds]
        print(f"  spillway/nginx per round: max {st.median(mx):.3f} (range {min(mx):.3f}-{max(mx):.3f}, above in "
              f"{sum(x > 1 for x in mx)} of {len(mx)}); cpu/req {st.median(cpu):.3f} (range {min(cpu):.3f}-{max(cpu):.3f})")
PY
