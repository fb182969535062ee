#!/usr/bin/env bash
# Proxy CPU per forwarded request with a large body — an upload (POST) or a download (GET of a
# file) — for `spillway proxy` builds, in interleaved rounds.
#
# Why: the small GETs of ir.sh and ab.sh carry no body, and a body's path is its own (read in
# pieces, handed from one side to the other, written out), so a change to it is measured here,
# on bodies large enough that their bytes dominate. Each round starts every build afresh, warms
# it with 1 s of wrk, then counts `wrk -t1 -c8` for WRK_SECS seconds; CPU is utime + stime of
# the proxy from /proc/PID/stat; `failed` counts non-2xx answers and socket errors.
#
#   flock /work/measure.lock bench/overhead/bodies.sh upload|download LABEL=BIN [LABEL=BIN ...]
#
# upload: POSTs of BODY_BYTES to the first build's `spillway backend` (1 ms sleep; it reads the
# whole body). download: GETs of a BODY_BYTES file from nginx serving it as the upstream (needs
# nginx). Env: ROUNDS (3), WRK_SECS (4), BODY_BYTES (262144). The proxy's configuration is
# ab.sh's fixed mode with the admin off.
set -euo pipefail
ROUNDS=${ROUNDS:-3}; WRK_SECS=${WRK_SECS:-4}; BODY_BYTES=${BODY_BYTES:-262144}
UPSTREAM=127.0.0.1:21593; PROXY=127.0.0.1:21594
MODE=${1:-}; shift || true
case "$MODE" in upload | download) ;; *) echo "usage: $0 upload|download LABEL=BIN [LABEL=BIN ...] (got mode '$MODE')" >&2; exit 2 ;; esac
[ $# -ge 1 ] || { echo "usage: $0 $MODE LABEL=BIN [LABEL=BIN ...]" >&2; exit 2; }
command -v wrk >/dev/null || { echo "wrk is needed (apt-get install -y wrk)" >&2; exit 2; }
case "$BODY_BYTES" in ''|*[!0-9]*) echo "BODY_BYTES must be a number of bytes (got $BODY_BYTES)" >&2; exit 2 ;; esac
WORK=$(mktemp -d); PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
WRK_ARGS=()
if [ "$MODE" = upload ]; then
  first=${1#*=}
  "$first" backend --listen "$UPSTREAM" --workers 2048 --service-time 1ms --dist constant --cpu sleep \
    --duration 1800s >"$WORK/backend.log" 2>&1 &
  PIDS+=($!)
  printf 'wrk.method = "POST"\nwrk.body = string.rep("x", %d)\nwrk.headers["content-type"] = "application/octet-stream"\n' "$BODY_BYTES" >"$WORK/post.lua"
  WRK_ARGS=(-s "$WORK/post.lua"); URL_PATH=/
else
  command -v nginx >/dev/null || { echo "download needs nginx as the static upstream (apt-get install -y nginx)" >&2; exit 2; }
  mkdir -p "$WORK/www" "$WORK/logs"
  head -c "$BODY_BYTES" /dev/urandom >"$WORK/www/body"
  # nginx's worker runs as an unprivileged user: it must be able to read the file.
  chmod 755 "$WORK" "$WORK/www"; chmod 644 "$WORK/www/body"
  printf 'worker_processes 1;\ndaemon off;\nerror_log %s/logs/error.log;\npid %s/nginx.pid;\nevents { worker_connections 1024; }\nhttp { access_log off; keepalive_requests 1000000; server { listen %s; root %s/www; } }\n' \
    "$WORK" "$WORK" "$UPSTREAM" "$WORK" >"$WORK/nginx.conf"
  nginx -c "$WORK/nginx.conf" -p "$WORK" >"$WORK/nginx.log" 2>&1 &
  PIDS+=($!)
  URL_PATH=/body
fi
wait_port "$UPSTREAM"
. "$(dirname "$0")/../lib/proxy.sh"
fixed_proxy_conf "$PROXY" "$UPSTREAM" >"$WORK/p.toml"
HZ=$(getconf CLK_TCK)
echo "uptime before: $(uptime)"
echo "mode=$MODE body=$BODY_BYTES bytes, wrk -t1 -c8 ${WRK_SECS}s, rounds=$ROUNDS"
for r in $(seq 1 "$ROUNDS"); do
  for ab in "$@"; do
    label=${ab%%=*} bin=${ab#*=}
    "$bin" proxy --config "$WORK/p.toml" >"$WORK/$label.log" 2>&1 &
    pp=$!
    wait_port "$PROXY"
    wrk -t1 -c8 -d1s "${WRK_ARGS[@]}" "http://$PROXY$URL_PATH" >/dev/null
    c0=$(sed 's/^.*) //' "/proc/$pp/stat" | awk '{print $12 + $13}')
    out=$(wrk -t1 -c8 -d"${WRK_SECS}s" "${WRK_ARGS[@]}" "http://$PROXY$URL_PATH")
    c1=$(sed 's/^.*) //' "/proc/$pp/stat" | awk '{print $12 + $13}')
    n=$(awk '/requests in/ {print $1}' <<<"$out")
    read_total=$(awk '/requests in/ {print $5}' <<<"$out")
    bad=$(awk '/Non-2xx/ {b += $NF} /Socket errors/ {gsub(",", ""); b += $4 + $6 + $8 + $10} END {print b + 0}' <<<"$out")
    us=$(python3 -c "print(round(($c1 - $c0) / $HZ * 1e6 / max($n, 1), 1))")
    echo "round=$r build=$label requests=$n read=$read_total failed=$bad cpu_us_per_req=$us"
    kill -INT "$pp" 2>/dev/null || true; wait "$pp" 2>/dev/null || true
  done
done
echo "uptime after: $(uptime)"
