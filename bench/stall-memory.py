#!/usr/bin/env python3
"""What requests held in a stall cost the proxy's RSS, and what happens past its budget.

Why: a 10-minute soak once grew RSS +14.7 % because the busy host stalled with requests in
flight (bench/results/soak-memory.md); the proxy must bound what requests it holds cost and
refuse, cheaply, past `listen.max_requests_in_progress` (issue 29).

Starts `spillway proxy` in front of an upstream that accepts connections and never answers
(this script's own thread), with a fixed admission limit far above the load so that every
request goes upstream and waits there. Then, with the proxy's VmRSS after each step (each
measured SETTLE s after the last request reached the upstream, so per-connection buffers that
sit idle while a request waits have been let go of):
  - idle;
  - WARM requests, each on its own connection, held (the allocator warmed up);
  - HELD more, held: RSS growth per held request;
  - if BUDGET is set (the proxy's `listen.max_requests_in_progress`; the first two steps must
    fit in it), OVER more: each must be answered 503 at once; their RSS growth, and after they
    are closed.
With H2=1 the held requests are HTTP/2 streams (h2c, prior knowledge), STREAMS per
connection (default 100; 1 compares a connection each with HTTP/1.1): what an h2 stream held
in a stall costs (issue 29: the buffers of a request that waits). The refusals past the budget
stay HTTP/1.1.
Everything on 127.0.0.1, bounded, the proxy stopped on exit.

  bench/stall-memory.py BIN [LABEL]    # env: WARM (200), HELD (800), OVER (1000), BUDGET
                                       # (unset: the key is not written), SETTLE (2),
                                       # H2 (unset: HTTP/1.1), STREAMS (100)
"""
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

BIN = sys.argv[1]
LABEL = sys.argv[2] if len(sys.argv) > 2 else os.path.basename(BIN)
WARM = int(os.environ.get("WARM", "200"))
HELD = int(os.environ.get("HELD", "800"))
OVER = int(os.environ.get("OVER", "1000"))
BUDGET = os.environ.get("BUDGET")
SETTLE = float(os.environ.get("SETTLE", "2"))
REQ = b"GET /x HTTP/1.1\r\nHost: stall\r\n\r\n"
H2 = bool(os.environ.get("H2"))
STREAMS = int(os.environ.get("STREAMS", "100"))


def h2_frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


# GET http://stall/x: :method GET and :scheme http from the static table, :path and
# :authority as literals without indexing (their names indexed), no Huffman coding.
H2_HEADERS = b"\x82\x86\x04\x02/x\x01\x05stall"


def h2_open(port, streams):
    """A prior-knowledge h2c connection with `streams` GETs sent and left waiting; the
    server's SETTINGS acknowledged (so the connection is a healthy one)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(4, 0, 0)
    for i in range(streams):
        # END_STREAM | END_HEADERS
        out += h2_frame(1, 0x5, 2 * i + 1, H2_HEADERS)
    s.sendall(out)
    buf = b""
    while True:
        while len(buf) < 9:
            chunk = s.recv(65536)
            if not chunk:
                raise SystemExit("the proxy closed an h2 connection")
            buf += chunk
        n = int.from_bytes(buf[:3], "big")
        while len(buf) < 9 + n:
            buf += s.recv(65536)
        kind, flags = buf[3], buf[4]
        buf = buf[9 + n:]
        if kind == 4 and not flags & 1:
            s.sendall(h2_frame(4, 1, 0))
            return s
        if kind in (1, 3, 7):  # an answer, RST_STREAM or GOAWAY: not a stall
            raise SystemExit(f"the proxy answered an h2 stream (frame type {kind})")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def stalled_upstream():
    """Accepts and never answers; returns (port, accepted connections)."""
    lst = socket.socket()
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind(("127.0.0.1", 0))
    lst.listen(4096)
    held = []

    def run():
        while True:
            c, _ = lst.accept()
            held.append(c)

    threading.Thread(target=run, daemon=True).start()
    return lst.getsockname()[1], held


def wait_port(port):
    for _ in range(400):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def main():
    up, held_up = stalled_upstream()
    data, admin = free_port(), free_port()
    work = tempfile.mkdtemp(prefix="spillway-stall.")
    conf = os.path.join(work, "proxy.toml")
    budget = f"max_requests_in_progress = {BUDGET}\n" if BUDGET else ""
    with open(conf, "w") as f:
        f.write(
            f'[listen]\naddress = "127.0.0.1:{data}"\n{budget}'
            f'[admin]\nlisten = "127.0.0.1:{admin}"\n'
            f'[upstream]\naddresses = ["127.0.0.1:{up}"]\nrequest_timeout_ms = 300000\n'
            "max_requests_per_task = 100000\n"
            '[upstream.throttle]\nmin_requests_per_sec = 1000000.0\n'
            '[admission.limit]\nalgorithm = "fixed"\nlimit = 100000\n'
        )
    proxy = subprocess.Popen([BIN, "proxy", "--config", conf],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    socks = []
    try:
        wait_port(data)
        time.sleep(1)
        # The readiness probe's connection has come and gone.

        def rss():
            with open(f"/proc/{proxy.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])

        def send(n, h2=H2):
            if h2:
                out = []
                while n > 0:
                    out.append(h2_open(data, min(n, STREAMS)))
                    n -= STREAMS
                return out
            out = []
            for _ in range(n):
                s = socket.create_connection(("127.0.0.1", data), timeout=10)
                s.sendall(REQ)
                out.append(s)
            return out

        def reach(total):
            deadline = time.time() + 60
            while len(held_up) < total and time.time() < deadline:
                time.sleep(0.05)
            if len(held_up) < total:
                raise SystemExit(f"only {len(held_up)} of {total} requests reached the upstream")
            # Over HTTP/2 the first requests also open h2c probes (the proxy asks the upstream
            # for h2c and falls back to HTTP/1.1 after 1 s of silence): wait until no more come.
            seen = -1
            while seen != len(held_up) and time.time() < deadline:
                seen = len(held_up)
                time.sleep(1.2 if H2 else 0)
            time.sleep(SETTLE)

        rows = [("idle", rss(), 0)]
        socks += send(WARM)
        reach(WARM)
        rows.append((f"{WARM} held (warm-up)", rss(), len(held_up)))
        base = len(held_up)
        socks += send(HELD)
        reach(base + HELD)
        rows.append((f"{HELD} more held", rss(), len(held_up)))
        per_held = (rows[-1][1] - rows[-2][1]) / HELD
        per_over = None
        if BUDGET:
            started = time.time()
            over = send(OVER, h2=False)
            codes = {}
            for s in over:
                head = b""
                try:
                    while b"\r\n\r\n" not in head:
                        chunk = s.recv(4096)
                        if not chunk:
                            break
                        head += chunk
                except OSError:
                    pass
                code = head[9:12].decode(errors="replace") or "none"
                codes[code] = codes.get(code, 0) + 1
            took = time.time() - started
            time.sleep(SETTLE)
            rows.append((f"{OVER} past the budget, answered {codes} in {took:.2f} s, still open",
                         rss(), len(held_up)))
            per_over = (rows[-1][1] - rows[-2][1]) / OVER
            for s in over:
                s.close()
            time.sleep(SETTLE)
            rows.append(("  those closed", rss(), len(held_up)))
        kind = f"h2, {STREAMS} streams a connection" if H2 else "HTTP/1.1"
        print(f"{LABEL} ({kind}): proxy VmRSS kB / requests at the upstream")
        for name, r, n in rows:
            print(f"  {name:<78} {r:>8} {n:>6}")
        print(f"  per held request: {per_held:.2f} kB")
        if per_over is not None:
            print(f"  per request past the budget (connection open): {per_over:.2f} kB")
    finally:
        for s in socks:
            s.close()
        proxy.terminate()
        proxy.wait()


main()
