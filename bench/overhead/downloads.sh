#!/usr/bin/env bash
# Proxy CPU per forwarded download (a 256 KiB response body by default) for `spillway proxy`
# builds, in interleaved rounds, from nginx serving a static file as the upstream.
#
# Why: `spillway backend` answers a few bytes; an answer's body has a path of its own (read
# from the upstream in pieces, written to the client), measured here on bodies large enough that
# their bytes dominate. Each round starts every build afresh, warms it with 1 s of wrk, then
# counts `wrk -t1 -c8` GETs for WRK_SECS seconds; CPU is utime + stime of the proxy from
# /proc/PID/stat. Needs nginx (`apt-get install -y nginx`).
#
#   flock /work/measure.lock bench/overhead/downloads.sh LABEL=BIN [LABEL=BIN ...]
#
# Env: ROUNDS (3), WRK_SECS (4), BODY_BYTES (262144).
set -euo pipefail
ROUNDS=${ROUNDS:-3}; WRK_SECS=${WRK_SECS:-4}; BODY_BYTES=${BODY_BYTES:-262144}
UPSTREAM=127.0.0.1:21597; PROXY=127.0.0.1:21598
[ $# -ge 1 ] || { echo "usage: $0 LABEL=BIN [LABEL=BIN ...]" >&2; exit 2; }
command -v wrk >/dev/null || { echo "wrk is needed (apt-get install -y wrk)" >&2; exit 2; }
command -v nginx >/dev/null || { echo "nginx is needed as the static upstream (apt-get install -y nginx)" >&2; exit 2; }
case "$BODY_BYTES" in ''|*[!0-9]*) echo "BODY_BYTES must be a number of bytes (got $BODY_BYTES)" >&2; exit 2 ;; esac
WORK=$(mktemp -d); PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
mkdir -p "$WORK/www" "$WORK/logs"
head -c "$BODY_BYTES" /dev/urandom >"$WORK/www/body"
# nginx's worker runs as an unprivileged user: it must be able to read the file.
chmod 755 "$WORK" "$WORK/www"; chmod 644 "$WORK/www/body"
cat >"$WORK/nginx.conf" <<NGINX
worker_processes 1;
daemon off;
error_log $WORK/logs/error.log;
pid $WORK/nginx.pid;
events { worker_connections 1024; }
http {
  access_log off;
  keepalive_requests 1000000;
  server { listen $UPSTREAM; root $WORK/www; }
}
NGINX
nginx -c "$WORK/nginx.conf" -p "$WORK" >"$WORK/nginx.log" 2>&1 &
PIDS+=($!)
wait_port "$UPSTREAM"
printf '[listen]\naddress = "%s"\n[upstream]\naddresses = ["%s"]\nmax_requests_per_task = 1024\nmax_idle_per_task = 1024\n[admission.limit]\nalgorithm = "fixed"\nlimit = 10000\n[classify]\ntrusted = ["127.0.0.0/8"]\n[admin]\nenabled = false\n' "$PROXY" "$UPSTREAM" >"$WORK/p.toml"
HZ=$(getconf CLK_TCK)
echo "uptime before: $(uptime)"
echo "body=$BODY_BYTES bytes, wrk -t1 -c8 ${WRK_SECS}s, rounds=$ROUNDS"
for r in $(seq 1 "$ROUNDS"); do
  for ab in "$@"; do
    label=${ab%%=*} bin=${ab#*=}
    "$bin" proxy --config "$WORK/p.toml" >"$WORK/$label.log" 2>&1 &
    pp=$!
    wait_port "$PROXY"
    wrk -t1 -c8 -d1s "http://$PROXY/body" >/dev/null
    c0=$(sed 's/^.*) //' "/proc/$pp/stat" | awk '{print $12 + $13}')
    out=$(wrk -t1 -c8 -d"${WRK_SECS}s" "http://$PROXY/body")
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
