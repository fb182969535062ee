#!/usr/bin/env bash
# User and system CPU per forwarded request at wrk's closed-loop maximum, `spillway proxy`
# builds against nginx, in interleaved rounds.
#
# Why split them: a proxy's CPU per request is half the kernel's (two sockets read and written
# per request) and half its own; when the two fronts make the same system calls, only the user
# half can differ, and this shows by how much (utime and stime from /proc/PID/stat, summed over
# nginx's master and workers). Each round starts every front afresh, warms it with 1 s of wrk,
# then counts `wrk -t1 -cWRK_CONNS` for WRK_SECS seconds.
#
#   flock /work/measure.lock bench/overhead/user-sys.sh BIN [BIN ...] [nginx]
#
# Env: ROUNDS (3), WRK_SECS (5), WRK_CONNS (64). The backend is the first build's `spillway backend` (1 ms
# sleep, 2048 workers); the proxy's configuration is ab.sh's fixed mode with the admin off.
set -euo pipefail
ROUNDS=${ROUNDS:-3}; WRK_SECS=${WRK_SECS:-5}; WRK_CONNS=${WRK_CONNS:-64}
BACKEND=127.0.0.1:21591; PROXY=127.0.0.1:21592
[ $# -ge 1 ] || { echo "usage: $0 BIN [BIN ...] [nginx]" >&2; exit 2; }
[ "$1" != nginx ] || { echo "the first front must be a spillway build (it runs the backend)" >&2; exit 2; }
command -v wrk >/dev/null || { echo "wrk is needed (apt-get install -y wrk)" >&2; exit 2; }
WORK=$(mktemp -d); PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
. "$(dirname "$0")/../lib/nginx.sh"
"$1" backend --listen "$BACKEND" --workers 2048 --service-time 1ms --dist constant --cpu sleep \
  --duration 1800s >"$WORK/backend.log" 2>&1 &
PIDS+=($!)
wait_port "$BACKEND"
. "$(dirname "$0")/../lib/proxy.sh"
fixed_proxy_conf "$PROXY" "$BACKEND" >"$WORK/p.toml"
ticks() { # utime and stime of a process and its children
  local u=0 s=0 p a b
  for p in "$1" $(pgrep -P "$1" || true); do
    read -r a b < <(sed 's/^.*) //' "/proc/$p/stat" | awk '{print $12, $13}')
    u=$((u + a)); s=$((s + b))
  done
  echo "$u $s"
}
HZ=$(getconf CLK_TCK)
echo "uptime before: $(uptime)"
for r in $(seq "$ROUNDS"); do
  for front in "$@"; do
    if [ "$front" = nginx ]; then
      command -v nginx >/dev/null || { echo "nginx is not installed (apt-get install -y nginx)" >&2; exit 2; }
      nginx_conf "$WORK/nginx" "$PROXY" "$BACKEND" reuseport
      nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" -g "daemon off;" >"$WORK/nginx.log" 2>&1 &
      label=nginx
    else
      "$front" proxy --config "$WORK/p.toml" >"$WORK/proxy.log" 2>&1 &
      label=$(basename "$front")
    fi
    fp=$!
    wait_port "$PROXY"
    wrk -t1 -c"$WRK_CONNS" -d1s "http://$PROXY/" >/dev/null
    read -r u0 s0 < <(ticks "$fp")
    n=$(wrk -t1 -c"$WRK_CONNS" -d"${WRK_SECS}s" "http://$PROXY/" | awk '/requests in/ {print $1}')
    read -r u1 s1 < <(ticks "$fp")
    kill "$fp"; wait "$fp" 2>/dev/null || true
    python3 -c "import sys; n, du, ds, hz = map(float, sys.argv[1:]); print(f'round=$r front=$label requests={int(n)} user_us_per_req={du * 1e6 / hz / n:.2f} sys_us_per_req={ds * 1e6 / hz / n:.2f}')" \
      "$n" "$((u1 - u0))" "$((s1 - s0))" "$HZ"
  done
done
echo "uptime after: $(uptime)"
