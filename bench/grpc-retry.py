#!/usr/bin/env python3
"""A real gRPC server and client for bench/grpc-retry.sh (grpcio, no generated code).

  server --listen ADDR --workers N --service-ms S --stats FILE
      A unary method /bench.Bench/Work on a grpcio server with N worker threads, each call
      sleeping S ms: a fixed capacity of N / S calls per ms, and a plain FIFO backend (calls
      beyond N wait in the executor's queue, served even after their caller gave up). On
      SIGTERM it writes to FILE how many calls it received, by the `grpc-previous-rpc-attempts`
      value it saw (absent = first attempt), and exits.

  client --target ADDR --phases R:SECS[,R:SECS...] --deadline-ms D --json FILE [--critical F]
      gRPC's standard retryPolicy in the channel's service config (maxAttempts 3, initialBackoff
      0.1s, maxBackoff 1s, backoffMultiplier 2, retryableStatusCodes [UNAVAILABLE]; grpc-core
      honours `grpc-retry-pushback-ms`), open loop: calls start at Poisson arrivals of rate R/s
      for SECS seconds per phase, whatever the answers. Each call's outcome goes to FILE: phase,
      criticality, status, latency, and the `x-spillway-reason` / `grpc-retry-pushback-ms` of
      the answer the caller finally got. A fraction F of calls is CRITICAL, the rest SHEDDABLE
      (`x-spillway-criticality`, honoured from loopback when the proxy trusts it).

The attempt count is not visible to a grpcio caller (retries happen below the API), so the
shell script reads it from the proxy's /status: every attempt reaching the proxy is admitted or
refused there.
"""
import argparse
import asyncio
import collections
import json
import random
import signal
import sys
import threading
import time
from concurrent import futures

import grpc
import grpc.aio

METHOD = "/bench.Bench/Work"
SERVICE_CONFIG = {
    "methodConfig": [
        {
            "name": [{"service": "bench.Bench"}],
            "retryPolicy": {
                "maxAttempts": 3,
                "initialBackoff": "0.1s",
                "maxBackoff": "1s",
                "backoffMultiplier": 2,
                "retryableStatusCodes": ["UNAVAILABLE"],
            },
        }
    ]
}


def serve(args):
    seen = collections.Counter()
    lock = threading.Lock()
    delay = args.service_ms / 1000.0

    def work(request, context):
        prev = "0"
        for k, v in context.invocation_metadata():
            if k == "grpc-previous-rpc-attempts":
                prev = v
        with lock:
            seen[prev] += 1
        time.sleep(delay)
        return b"ok"

    handler = grpc.method_handlers_generic_handler(
        "bench.Bench", {"Work": grpc.unary_unary_rpc_method_handler(work)}
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=args.workers))
    server.add_generic_rpc_handlers((handler,))
    if server.add_insecure_port(args.listen) == 0:
        sys.exit(f"server: cannot listen on {args.listen}")
    server.start()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    # Bounded even if nobody stops it.
    done.wait(args.max_seconds)
    with lock:
        stats = {"received": sum(seen.values()), "by_previous_attempts": dict(seen)}
    with open(args.stats, "w") as f:
        json.dump(stats, f)
    server.stop(0)


async def run_client(args):
    phases = []
    for p in args.phases.split(","):
        rate, secs = p.split(":")
        phases.append((float(rate), float(secs)))
    config = json.loads(json.dumps(SERVICE_CONFIG))
    config["methodConfig"][0]["retryPolicy"]["maxAttempts"] = args.max_attempts
    options = [
        ("grpc.enable_retries", 1),
        ("grpc.service_config", json.dumps(config)),
    ]
    rng = random.Random(args.seed)
    results = []
    deadline = args.deadline_ms / 1000.0
    async with grpc.aio.insecure_channel(args.target, options=options) as channel:
        await asyncio.wait_for(channel.channel_ready(), 5)
        call = channel.unary_unary(METHOD)

        async def one(phase, crit):
            t0 = time.monotonic()
            at = t0 - start
            reason = pushback = None
            try:
                await call(
                    b"x",
                    timeout=deadline,
                    metadata=(("x-spillway-criticality", crit),),
                )
                code = "OK"
            except grpc.aio.AioRpcError as e:
                code = e.code().name
                for k, v in tuple(e.trailing_metadata() or ()) + tuple(
                    e.initial_metadata() or ()
                ):
                    if k == "x-spillway-reason":
                        reason = v
                    elif k == "grpc-retry-pushback-ms":
                        pushback = v
            results.append(
                {
                    "phase": phase,
                    "at": round(at, 4),
                    "crit": crit,
                    "code": code,
                    "ms": round((time.monotonic() - t0) * 1000, 2),
                    "reason": reason,
                    "pushback": pushback,
                }
            )

        tasks = []
        start = t = time.monotonic()
        lag = 0.0
        for i, (rate, secs) in enumerate(phases):
            end = t + secs
            while True:
                t += rng.expovariate(rate)
                if t >= end:
                    t = end
                    break
                wait = t - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                lag = max(lag, time.monotonic() - t)
                crit = "CRITICAL" if rng.random() < args.critical else "SHEDDABLE"
                tasks.append(asyncio.ensure_future(one(i, crit)))
        await asyncio.gather(*tasks)
    out = {
        "phases": [{"rate": r, "seconds": s} for r, s in phases],
        "deadline_ms": args.deadline_ms,
        # The most a call started after its arrival time (the client keeping up).
        "issue_lag_ms": round(lag * 1000, 1),
        "calls": results,
    }
    with open(args.json, "w") as f:
        json.dump(out, f)


# /status lists refusals per reason in the order of spillway_core's `RefusalReason::ALL`.
REASONS = [
    "over_quota",
    "shed",
    "concurrency_limit",
    "queue_full",
    "queue_timeout",
    "deadline_exceeded",
    "too_many_attempts",
]


def pct(a, b):
    return f"{100.0 * a / b:.1f}%" if b else "-"


def summarize(args):
    """One table per case from the client's calls, the servers' counts and the proxy's /status."""
    import os

    for case in args.cases.split():
        d = os.path.join(args.dir, case)
        calls = json.load(open(d + ".client.json"))
        status = json.load(open(d + ".status.json"))
        tasks = []
        for i in (1, 2):
            try:
                tasks.append(json.load(open(f"{d}.task{i}.json")))
            except FileNotFoundError:
                pass
        cs = calls["calls"]
        adm = status["admission"]
        admitted = sum(adm["admitted"])
        refused = {r: sum(row) for r, row in zip(REASONS, adm["refused"])}
        attempts = admitted + sum(refused.values())
        ok = sum(c["code"] == "OK" for c in cs)
        print(f"\n### {case}: {len(cs)} calls, phases "
              + ", ".join(f"{p['rate']:g}/s for {p['seconds']:g} s" for p in calls["phases"])
              + f", deadline {calls['deadline_ms']:g} ms (client issue lag <= {calls['issue_lag_ms']} ms)")
        print("| figure | value |\n| --- | --- |")
        print(f"| attempts reaching the proxy (admitted + refused) | {attempts} ({admitted} + {sum(refused.values())}) |")
        print(f"| **attempts per call** | **{attempts / max(1, len(cs)):.3f}** |")
        failed = sum(c["code"] != "OK" for c in cs)
        if failed:
            # Retries of calls that then succeeded count here too: an upper bound (and no call
            # makes more than maxAttempts).
            bound = min(3.0, 1 + max(0, attempts - len(cs)) / failed)
            print(f"| attempts per call that failed, at most (1 + extra attempts / failed calls) | "
                  f"{bound:.3f} |")
        if len(calls["phases"]) == 3:
            # The burst: extra attempts are charged to its calls (the 0.5x phases around it
            # are under capacity; their refusals, if any, show in the client's outcomes).
            burst = [c for c in cs if c["phase"] == 1]
            extra = attempts - len(cs)
            print(f"| attempts per call of the burst phase (all extra attempts charged to it) | "
                  f"{(len(burst) + extra) / max(1, len(burst)):.3f} ({len(burst)} calls) |")
            for i, _ in enumerate(calls["phases"]):
                ph = [c for c in cs if c["phase"] == i]
                print(f"| phase {i + 1} success | {pct(sum(c['code'] == 'OK' for c in ph), len(ph))} of {len(ph)} |")
        print(f"| success (OK) | {pct(ok, len(cs))} ({ok}) |")
        for crit in ("CRITICAL", "SHEDDABLE"):
            cc = [c for c in cs if c["crit"] == crit]
            print(f"| {crit} success | {pct(sum(c['code'] == 'OK' for c in cc), len(cc))} of {len(cc)} |")
        codes = collections.Counter(c["code"] for c in cs)
        print("| callers' outcomes | " + ", ".join(f"{k} {v}" for k, v in codes.most_common()) + " |")
        final = collections.Counter(
            (c["reason"] or "-", "don't retry" if c["pushback"] and c["pushback"].startswith("-")
             else f"pushback {c['pushback']} ms" if c["pushback"] else "no pushback")
            for c in cs if c["code"] != "OK")
        if final:
            print("| refusals the callers finally got | " + ", ".join(
                f"{r} ({p}) {n}" for (r, p), n in final.most_common()) + " |")
        print("| proxy refusals by reason (attempts) | " + (", ".join(
            f"{r} {n}" for r, n in refused.items() if n) or "none") + " |")
        for i, t in enumerate(tasks):
            by = ", ".join(f"{int(k) + 1}: {v}" for k, v in sorted(t["by_previous_attempts"].items()))
            print(f"| task {i + 1} received (by attempt number, from grpc-previous-rpc-attempts) | {t['received']} ({by}) |")
        print(f"| proxy limit at the end | {adm['limit']} |")
        faults = {k: v for k, v in status["faults"].items() if v}
        print(f"| proxy faults | {faults or 'none'} |")
        for u in status["upstreams"]:
            print(f"| upstream {u['address']} | ejected {u['ejected']}, times ejected {u['times_ejected']}, "
                  f"failures {u['failures_total']} (consecutive {u['consecutive_failures']}), "
                  f"throttle P {u['throttle_probability']:.3f} "
                  f"({u['throttle_requests']} requests, {u['throttle_accepts']} accepts), "
                  f"requests {u['requests_total']} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("server")
    s.add_argument("--listen", required=True)
    s.add_argument("--workers", type=int, required=True)
    s.add_argument("--service-ms", type=float, required=True)
    s.add_argument("--stats", required=True)
    s.add_argument("--max-seconds", type=float, default=120)
    c = sub.add_parser("client")
    c.add_argument("--target", required=True)
    c.add_argument("--phases", required=True, help="RATE:SECONDS[,RATE:SECONDS...]")
    c.add_argument("--deadline-ms", type=float, default=3000)
    c.add_argument("--critical", type=float, default=0.2)
    c.add_argument("--seed", type=int, default=1)
    c.add_argument(
        "--max-attempts",
        type=int,
        default=3,
        help="retryPolicy.maxAttempts (gRPC's standard 3; grpc-core caps it at 5)",
    )
    c.add_argument("--json", required=True)
    m = sub.add_parser("summary")
    m.add_argument("--dir", required=True)
    m.add_argument("--cases", required=True)
    args = ap.parse_args()
    if args.cmd == "server":
        serve(args)
    elif args.cmd == "summary":
        summarize(args)
    else:
        asyncio.run(run_client(args))


if __name__ == "__main__":
    main()
