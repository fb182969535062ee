#!/usr/bin/env bash
# Retries against overload with a real gRPC client (issue 28, requirements 5 and 6): grpcio's
# own retryPolicy, not Spillway's client, in front of the zero-config `spillway proxy`.
#
# What runs (everything on 127.0.0.1, every phase bounded, every process killed on exit):
#   - a grpcio server (bench/grpc-retry.py server): WORKERS threads each sleeping SERVICE_MS per
#     call, a fixed capacity C = WORKERS / SERVICE_MS and a plain FIFO queue behind it;
#   - `spillway proxy` in front, zero-config (only listen, upstream and admin set, and
#     `[classify] trusted = ["127.0.0.0/8"]` so the callers' criticality counts), h2c to the
#     server (gRPC is HTTP/2 end to end);
#   - a grpcio client (bench/grpc-retry.py client) with gRPC's standard retryPolicy in its
#     service config (maxAttempts 3, initialBackoff 0.1s, maxBackoff 1s, backoffMultiplier 2,
#     retryableStatusCodes [UNAVAILABLE]), open loop (Poisson), CRITICAL_SHARE of its calls
#     CRITICAL and the rest SHEDDABLE.
#
# Cases, each with a fresh server and proxy:
#   sustained  3 x C for 15 s, 3 s deadlines: attempts per call reaching the proxy (its /status:
#              every attempt is admitted or refused there) must stay <= 1.2;
#   burst      0.5 x C for 3 s, 4 x C for 0.4 s, 0.5 x C for 3 s: a momentary overload, whose
#              refusals invite a retry (pushback >= 0), and the retries are served;
#   deadline   two slower tasks (SERVICE_MS x 2, nobody queues) and callers whose 20 ms
#              deadlines run out on every call: no task ejected, no failure counted, the
#              throttle untouched (requirement 6).
#
#   cargo build --release
#   SKIP_BUILD=1 flock /work/measure.lock bench/grpc-retry.sh
#   CASES=sustained bench/grpc-retry.sh
#
# Env: WORKERS (8), SERVICE_MS (50), CRITICAL_SHARE (0.2 of calls: 0.6 x C at 3 x), CASES
# ("sustained burst deadline"), SKIP_BUILD, BIN (target/release/spillway), VENV (a virtualenv
# with grpcio already in it; default: made under the run's temp dir with pip), BASE_PORT
# (18480; uses 5 ports). Results: a table on stdout; raw files in a /tmp directory (kept).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib/procs.sh
source bench/lib/procs.sh

PORT=${BASE_PORT:-18480}
PROXY=127.0.0.1:$PORT
ADMIN=127.0.0.1:$((PORT + 1))
TASK1=127.0.0.1:$((PORT + 2))
TASK2=127.0.0.1:$((PORT + 3))
WORKERS=${WORKERS:-8}
SERVICE_MS=${SERVICE_MS:-50}
CRITICAL_SHARE=${CRITICAL_SHARE:-0.2}
CASES=${CASES:-sustained burst deadline}
BIN=${BIN:-target/release/spillway}
WORK=$(mktemp -d /tmp/spillway-grpc-retry.XXXXXX)
PY=bench/grpc-retry.py
echo "raw files: $WORK"

[ -n "${SKIP_BUILD:-}" ] || cargo build --release --quiet
if [ -z "${VENV:-}" ]; then
  VENV=$WORK/venv
  python3 -m venv "$VENV"
  # Pinned: the retry behaviour measured is grpc-core's, and it is what a caller runs today.
  "$VENV/bin/pip" install --quiet --disable-pip-version-check 'grpcio==1.85.3' \
    > "$WORK/pip.log" 2>&1 || { echo "pip install grpcio failed (see $WORK/pip.log)"; exit 1; }
fi
PYTHON=$VENV/bin/python

# C, calls/s: WORKERS threads, SERVICE_MS each.
CAP=$(python3 -c "print($WORKERS * 1000 / $SERVICE_MS)")
rate() { python3 -c "print(round($1 * $CAP, 3))"; }

server() { # $1 = address, $2 = service ms, $3 = stats file
  "$PYTHON" $PY server --listen "$1" --workers "$WORKERS" --service-ms "$2" --stats "$3" \
    --max-seconds 100 > "$3.log" 2>&1 &
  PIDS+=($!)
  wait_port "$1" || { echo "server $1 did not start (see $3.log)"; exit 1; }
}

proxy() { # $1 = case name, $2.. = upstream addresses
  local name=$1 ups
  shift
  ups=$(printf '"%s", ' "$@")
  printf '[listen]\naddress = "%s"\n[upstream]\naddresses = [%s]\n[classify]\ntrusted = ["127.0.0.0/8"]\n[admin]\nlisten = "%s"\n' \
    "$PROXY" "${ups%, }" "$ADMIN" > "$WORK/$name.toml"
  "$BIN" proxy --config "$WORK/$name.toml" > "$WORK/$name.proxy.log" 2>&1 &
  PROXY_PID=$!
  PIDS+=($PROXY_PID)
  wait_port "$PROXY" || { echo "proxy did not start (see $WORK/$name.proxy.log)"; exit 1; }
  wait_port "$ADMIN"
}

client() { # $1 = case name, $2 = phases, $3 = deadline ms
  timeout 60 "$PYTHON" $PY client --target "$PROXY" --phases "$2" --deadline-ms "$3" \
    --critical "$CRITICAL_SHARE" --json "$WORK/$1.client.json"
}

finish() { # $1 = case name: the proxy's /status, then stop everything of this case
  curl -sf "http://$ADMIN/status" > "$WORK/$1.status.json"
  local p
  for p in "${PIDS[@]}"; do stop "$p"; done
}

for c in $CASES; do
  case $c in
    sustained)
      echo "sustained: 3 x $CAP calls/s for 15 s, 3 s deadlines ..."
      server "$TASK1" "$SERVICE_MS" "$WORK/$c.task1.json"
      proxy "$c" "$TASK1"
      client "$c" "$(rate 3):15" 3000
      ;;
    burst)
      echo "burst: 0.5 x $CAP calls/s, 4 x for 0.4 s, 0.5 x, 3 s deadlines ..."
      server "$TASK1" "$SERVICE_MS" "$WORK/$c.task1.json"
      proxy "$c" "$TASK1"
      client "$c" "$(rate 0.5):3,$(rate 4):0.4,$(rate 0.5):3" 3000
      ;;
    deadline)
      echo "deadline: 0.25 x $CAP calls/s for 8 s to two tasks of $((SERVICE_MS * 2)) ms, 20 ms deadlines ..."
      server "$TASK1" "$((SERVICE_MS * 2))" "$WORK/$c.task1.json"
      server "$TASK2" "$((SERVICE_MS * 2))" "$WORK/$c.task2.json"
      proxy "$c" "$TASK1" "$TASK2"
      client "$c" "$(rate 0.25):8" 20
      ;;
    *)
      echo "unknown case $c (expected sustained, burst, deadline)"
      exit 2
      ;;
  esac
  finish "$c"
done

echo
echo "capacity C = $WORKERS workers / $SERVICE_MS ms = $CAP calls/s; grpcio $("$PYTHON" -c 'import grpc; print(grpc.__version__)')"
"$PYTHON" $PY summary --dir "$WORK" --cases "$CASES"
