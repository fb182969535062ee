#!/usr/bin/env python3
"""What a burst of concurrency leaves behind in the proxy's RSS (docs/soak.md).

Why: in the 10-minute soak, RSS steps up exactly where a stall of the busy host piles up
connections (fds 22 -> 700); this reproduces that on its own, in seconds, to tell memory held by
open connections from memory the allocator keeps after they close.

Starts `spillway backend` (4 workers x 1 ms) and `spillway proxy` (zero-config, as in
bench/soak.sh) on loopback, then, with the proxy's VmRSS after each step:
  - idle;
  - SEQ connections one after another, one `GET /` each;
  - ROUNDS x BURST connections opened at once, one `GET /` each: RSS once all are answered
    and again after SETTLE s with all still open (memory per idle keep-alive connection); then
    all closed, RSS 0.5 s and SETTLE s later;
  - SEQ more one after another, and the bursts again.
Everything on 127.0.0.1, bounded, every process stopped on exit.

  bench/soak-burst.py BIN [LABEL]       # env: SEQ (10000), BURST (600), ROUNDS (5), SETTLE (3)
Extra environment for the proxy only (e.g. LD_PRELOAD, GLIBC_TUNABLES, MIMALLOC_*) is taken
from PROXY_ENV="K=V K=V".
"""
import os
import socket
import subprocess
import sys
import tempfile
import time

BIN = sys.argv[1]
LABEL = sys.argv[2] if len(sys.argv) > 2 else os.path.basename(BIN)
SEQ = int(os.environ.get("SEQ", "10000"))
BURST = int(os.environ.get("BURST", "600"))
ROUNDS = int(os.environ.get("ROUNDS", "5"))
SETTLE = float(os.environ.get("SETTLE", "3"))
BASE = int(os.environ.get("BASE_PORT", "18660"))
BACKEND, PROXY, ADMIN = ("127.0.0.1", BASE), ("127.0.0.1", BASE + 1), ("127.0.0.1", BASE + 2)
REQ = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"


def wait_port(addr):
    for _ in range(200):
        try:
            socket.create_connection(addr, timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {addr}")


def read_response(s):
    """Reads one response (content-length framed, as the backend and the proxy's 503 are)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v.strip())
    while len(rest) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        rest += chunk
    return head


def one_each(n):
    for _ in range(n):
        s = socket.create_connection(PROXY, timeout=10)
        s.sendall(REQ)
        read_response(s)
        s.close()


def burst(n):
    """Opens n connections at once, one request each, and returns them still open."""
    socks = [socket.create_connection(PROXY, timeout=10) for _ in range(n)]
    for s in socks:
        s.sendall(REQ)
    codes = {}
    for s in socks:
        head = read_response(s)
        code = head[9:12].decode(errors="replace") or "cut"
        codes[code] = codes.get(code, 0) + 1
    return socks, codes


def main():
    work = tempfile.mkdtemp(prefix="spillway-burst.")
    procs = []
    try:
        procs.append(subprocess.Popen(
            [BIN, "backend", "--listen", "%s:%d" % BACKEND, "--workers", "4", "--service-time",
             "1ms", "--dist", "constant", "--cpu", "sleep", "--duration", "600s"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_port(BACKEND)
        conf = os.path.join(work, "proxy.toml")
        with open(conf, "w") as f:
            f.write('[listen]\naddress = "%s:%d"\n[upstream]\naddresses = ["%s:%d"]\n'
                    'idle_timeout_ms = 3000\n[admin]\nlisten = "%s:%d"\n'
                    % (PROXY + BACKEND + ADMIN))
        env = dict(os.environ)
        for kv in os.environ.get("PROXY_ENV", "").split():
            k, _, v = kv.partition("=")
            env[k] = v
        proxy = subprocess.Popen([BIN, "proxy", "--config", conf], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(proxy)
        wait_port(PROXY)
        wait_port(ADMIN)
        time.sleep(1)

        def rss():
            with open(f"/proc/{proxy.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])

        def fds():
            return len(os.listdir(f"/proc/{proxy.pid}/fd"))

        rows = [("idle", rss(), fds())]
        for rep in (1, 2):
            one_each(SEQ)
            time.sleep(0.5)
            rows.append((f"{SEQ} one after another ({rep})", rss(), fds()))
            held, later = [], []
            for r in range(ROUNDS):
                socks, codes = burst(BURST)
                held.append((rss(), fds(), codes))
                time.sleep(SETTLE)
                later.append((rss(), fds()))
                for s in socks:
                    s.close()
            top = max(held, key=lambda h: h[0])
            rows.append((f"{ROUNDS}x{BURST} at once, answered (max of rounds; {top[2]})",
                         top[0], top[1]))
            top = max(later, key=lambda h: h[0])
            rows.append((f"  held open {SETTLE:g} s more (max of rounds)", top[0], top[1]))
            time.sleep(0.5)
            rows.append(("  closed, 0.5 s later", rss(), fds()))
            time.sleep(max(SETTLE - 0.5, 0))
            rows.append((f"  closed, {SETTLE:g} s later", rss(), fds()))
        print(f"{LABEL}: proxy RSS kB / fds")
        for name, r, n in rows:
            print(f"  {name:<70} {r:>8} {n:>6}")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()


main()
