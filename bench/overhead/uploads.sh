#!/usr/bin/env bash
# Proxy CPU per forwarded upload (a 256 KiB POST body by default) for `spillway proxy` builds,
# in interleaved rounds.
#
# Why: the small GETs of ir.sh and ab.sh never carry a body, and a body's path is its own — read
# from the client in pieces, handed to the upstream request, written upstream — so a change to
# it is measured here, on bodies large enough that their bytes dominate. Each round starts every
# build afresh, warms it with 1 s of wrk, then counts `wrk -t1 -c8` with a POST script for
# WRK_SECS seconds; CPU is utime + stime of the proxy from /proc/PID/stat.
#
#   flock /work/measure.lock bench/overhead/uploads.sh LABEL=BIN [LABEL=BIN ...]
#
# Env: ROUNDS (3), WRK_SECS (4), BODY_BYTES (262144). The backend is the first build's
# `spillway backend` (1 ms sleep; it reads the whole body); the proxy's configuration is ab.sh's
# fixed mode with the admin off.
set -euo pipefail
ROUNDS=${ROUNDS:-3}; WRK_SECS=${WRK_SECS:-4}; BODY_BYTES=${BODY_BYTES:-262144}
BACKEND=127.0.0.1:21593; PROXY=127.0.0.1:21594
[ $# -ge 1 ] || { echo "usage: $0 LABEL=BIN [LABEL=BIN ...]" >&2; exit 2; }
command -v wrk >/dev/null || { echo "wrk is needed (apt-get install -y wrk)" >&2; exit 2; }
case "$BODY_BYTES" in ''|*[!0-9]*) echo "BODY_BYTES must be a number of bytes (got $BODY_BYTES)" >&2; exit 2 ;; esac
WORK=$(mktemp -d); PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
first=${1#*=}
"$first" backend --listen "$BACKEND" --workers 2048 --service-time 1ms --dist constant --cpu sleep \
  --duration 1800s >"$WORK/backend.log" 2>&1 &
PIDS+=($!)
wait_port "$BACKEND"
printf '[listen]\naddress = "%s"\n[upstream]\naddresses = ["%s"]\nmax_requests_per_task = 1024\nmax_idle_per_task = 1024\n[admission.limit]\nalgorithm = "fixed"\nlimit = 10000\n[classify]\ntrusted = ["127.0.0.0/8"]\n[admin]\nenabled = false\n' "$PROXY" "$BACKEND" >"$WORK/p.toml"
printf 'wrk.method = "POST"\nwrk.body = string.rep("x", %d)\nwrk.headers["content-type"] = "application/octet-stream"\n' "$BODY_BYTES" >"$WORK/post.lua"
HZ=$(getconf CLK_TCK)
echo "uptime before: $(uptime)"
echo "body=$BODY_BYTES bytes, wrk -t1 -c8 ${WRK_SECS}s, rounds=$ROUNDS"
for r in $(seq 1 "$ROUNDS"); do
  for ab in "$@"; do
    label=${ab%%=*} bin=${ab#*=}
    "$bin" proxy --config "$WORK/p.toml" >"$WORK/$label.log" 2>&1 &
    pp=$!
    wait_port "$PROXY"
    wrk -t1 -c8 -d1s -s "$WORK/post.lua" "http://$PROXY/" >/dev/null
    c0=$(sed 's/^.*) //' "/proc/$pp/stat" | awk '{print $12 + $13}')
    out=$(wrk -t1 -c8 -d"${WRK_SECS}s" -s "$WORK/post.lua" "http://$PROXY/")
    c1=$(sed 's/^.*) //' "/proc/$pp/stat" | awk '{print $12 + $13}')
    n=$(awk '/requests in/ {print $1}' <<<"$out")
    bad=$(awk '/Non-2xx/ {b += $NF} /Socket errors/ {gsub(",", ""); b += $4 + $6 + $8 + $10} END {print b + 0}' <<<"$out")
    us=$(python3 -c "print(round(($c1 - $c0) / $HZ * 1e6 / max($n, 1), 1))")
    echo "round=$r build=$label requests=$n failed=$bad cpu_us_per_req=$us"
    kill -INT "$pp" 2>/dev/null || true; wait "$pp" 2>/dev/null || true
  done
done
echo "uptime after: $(uptime)"
