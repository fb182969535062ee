#!/usr/bin/env bash
# Peers: the `spillway demo` scenario with nginx (limit_conn + limit_req) and HAProxy (maxconn +
# queue + priority classes) in front of the same backend, in the same run as Spillway and the
# unprotected baseline. Everything listens on loopback only and every step stops by itself.
#
#   bench/peers.sh            # installs nginx and haproxy from Debian's packages if missing
#   SKIP_INSTALL=1 bench/peers.sh
#   cargo build --release && SKIP_BUILD=1 flock /work/measure.lock bench/peers.sh
#                             # build first, so no compile runs inside the measurement lock
#
# Fairness note: nginx and HAProxy need capacity figures (8 connections, 100 requests/s — the
# backend's 4 workers × 40 ms); Spillway is given none (zero-config adaptive limit).
set -euo pipefail
cd "$(dirname "$0")/.."

BACKEND=127.0.0.1:18301
FRONT=127.0.0.1:18300
WORK=$(mktemp -d /tmp/spillway-peers.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT

[ -n "${SKIP_BUILD:-}" ] || cargo build --release --quiet
BIN=target/release/spillway

have() { command -v "$1" >/dev/null 2>&1; }
if [ -z "${SKIP_INSTALL:-}" ] && { ! have nginx || ! have haproxy; }; then
  if [ "$(id -u)" = 0 ] && have apt-get; then
    apt-get install -y --no-install-recommends nginx-light haproxy >"$WORK/apt.log" 2>&1 \
      || apt-get install -y --no-install-recommends nginx haproxy >>"$WORK/apt.log" 2>&1 \
      || echo "skipping install: apt-get failed (see $WORK/apt.log)"
  else
    echo "skipping install: needs root and apt-get (Debian/Ubuntu)"
  fi
fi

wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null && return 0; sleep 0.05; done; return 1; }

# The full demo's scenario (DemoConfig::full in crates/spillway-load/src/demo): capacity 100/s,
# two streams offered at once — customer `good` steady, customer `noisy` ramping and jumping —
# exactly as `spillway demo --print-streams` lists them; `demo --from-json` merges the two
# reports of each run (same title).
mapfile -t STREAMS < <("$BIN" demo --print-streams)
load() { # $1 = title, $2 = target
  local i=0 pids=()
  for s in "${STREAMS[@]}"; do
    # shellcheck disable=SC2086 # each line is a list of flags
    "$BIN" load --target "$2" --title "$1" --quiet --timeout 1s --attempts 3 \
      $s --json "$WORK/$1.$i.json" > "$WORK/$1.$i.txt" &
    pids+=($!)
    RUNS+=("$WORK/$1.$i.json")
    i=$((i + 1))
  done
  wait "${pids[@]}"
}

backend() {
  "$BIN" backend --listen "$BACKEND" --workers 4 --service-time 40ms --dist uniform --spread 0.5 \
    --duration 60s > "$WORK/backend.log" 2>&1 &
  BACKEND_PID=$!
  wait_port "$BACKEND"
}

run() { # $1 = title, $2.. = front command (empty = direct)
  local title=$1; shift
  backend
  local target=$BACKEND front_pid=
  if [ $# -gt 0 ]; then
    "$@" > "$WORK/$title.front.log" 2>&1 &
    front_pid=$!
    wait_port "$FRONT" || { echo "$title: front did not start (see $WORK/$title.front.log)"; kill $BACKEND_PID; return 1; }
    target=$FRONT
  fi
  echo "running $title ..."
  load "$title" "$target"
  [ -n "$front_pid" ] && kill "$front_pid" 2>/dev/null && wait "$front_pid" 2>/dev/null || true
  kill $BACKEND_PID 2>/dev/null; wait $BACKEND_PID 2>/dev/null || true
  sleep 0.5
}

RUNS=()
run unprotected

cat > "$WORK/spillway.toml" <<TOML
[listen]
address = "$FRONT"
[upstream]
addresses = ["$BACKEND"]
[classify]
trusted = ["127.0.0.0/8", "::1/128"]
TOML
run spillway "$BIN" proxy --config "$WORK/spillway.toml"

if have nginx; then
  mkdir -p "$WORK/nginx/logs"
  cat > "$WORK/nginx/nginx.conf" <<NGINX
worker_processes 1;
error_log $WORK/nginx/logs/error.log warn;
pid $WORK/nginx/nginx.pid;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path $WORK/nginx/body;
  proxy_temp_path $WORK/nginx/proxy;
  limit_conn_zone \$server_name zone=conn:1m;
  limit_req_zone \$server_name zone=rate:1m rate=100r/s;
  upstream backend { server $BACKEND; keepalive 64; }
  server {
    listen $FRONT;
    server_name spillway-peers;
    location / {
      limit_conn conn 8;
      limit_req zone=rate burst=20 nodelay;
      limit_conn_status 503;
      limit_req_status 503;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_pass http://backend;
    }
  }
}
NGINX
  run nginx nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" -g "daemon off;" || true
else
  echo "nginx: skipped (not installed)"
fi

if have haproxy; then
  cat > "$WORK/haproxy.cfg" <<HAP
global
  maxconn 9000
defaults
  mode http
  timeout connect 1s
  timeout client 10s
  timeout server 10s
  timeout queue 100ms
frontend fe
  bind $FRONT
  http-request set-priority-class int(-10) if { req.hdr(x-spillway-criticality) -m str CRITICAL_PLUS }
  http-request set-priority-class int(0) if { req.hdr(x-spillway-criticality) -m str CRITICAL }
  http-request set-priority-class int(10) if { req.hdr(x-spillway-criticality) -m str SHEDDABLE_PLUS }
  http-request set-priority-class int(20) if { req.hdr(x-spillway-criticality) -m str SHEDDABLE }
  default_backend be
backend be
  server s1 $BACKEND maxconn 8
HAP
  run haproxy haproxy -db -f "$WORK/haproxy.cfg" || true
else
  echo "haproxy: skipped (not installed)"
fi

for t in "$WORK"/*.txt; do cat "$t"; echo; done
"$BIN" demo --from-json "${RUNS[@]}"
echo "reports in $WORK"
