#!/usr/bin/env python3
"""Turn the raw results of bench/overload.sh into one markdown report.

Why a separate file: the shell script only runs processes and records raw numbers (`spillway
load` JSON, /proc CPU counters); the arithmetic (µs per refusal derived at each overload level,
ratios to the whole cost of serving, goodput against the 1x level) is easier to read and check
here.

Per mode, with L1 the first (reference) level:
  forward   = (proxy CPU at L1 - refused at L1 x refusal-only CPU at L1's rate) / forwarded at L1
              (the correction is small: few requests are refused at 1x)
  serve     = forward + backend CPU at L1 / forwarded at L1   (the whole cost of serving one)
  refusal_L = (proxy CPU at L - forwarded at L x forward) / refused at L
  ratio_L   = refusal_L / serve
  refusal CPU / serving CPU at L = refused_L x refusal_L / (forwarded_L x serve)
The reference guide's reading: "If rejecting costs 10% of serving, a server facing 10 times its
capacity spends everything on rejections" — i.e. that last column near 1 at 10x.

Usage: overload.py WORK_DIR   (prints markdown on stdout)
"""
import json
import os
import statistics
import sys

WORK = sys.argv[1]
MODES = {
    "fixed": "`spillway proxy`, configured limit (fixed, 2 × workers, queue 8 × workers)",
    "zeroconf": "`spillway proxy`, zero-config (adaptive limit, no capacity figure)",
}


def meta():
    m = {}
    for line in open(os.path.join(WORK, "meta")):
        if "=" in line:
            k, v = line.rstrip("\n").split("=", 1)
            m[k] = v
    return m


M = meta()
HZ = float(M.get("clk_tck", 100))
LEVELS = [int(x) for x in M["levels"].split(",")]
CAP = int(M["capacity"])


def phases():
    out = {}
    p = os.path.join(WORK, "phases")
    if not os.path.exists(p):
        return out
    for line in open(p):
        f = line.split()
        if len(f) < 9:
            continue
        name, rate = f[0], int(f[1])
        front, backend, client = int(f[2]), int(f[3]), float(f[4])
        b0, t0, b1, t1 = (float(x) for x in f[5:9])
        js = os.path.join(WORK, name + ".json")
        if not os.path.exists(js):
            continue
        run = json.load(open(js))[0]
        s = run["summary"]
        out[name] = {
            "rate": rate,
            "secs": s["duration_s"],
            "sent": s["sent"],
            "goodput": s["goodput"],
            "rejected": s["rejected"],
            "timed_out": s["timed_out"],
            "errors": s["errors"],
            "front_us": front / HZ * 1e6,
            "backend_us": backend / HZ * 1e6,
            "client_us": client * 1e6,
            "host_busy": 100.0 * (b1 - b0) / max(1.0, t1 - t0),
            # Everyone else's CPU (cores): the host's busy time less the front's, backend's
            # and client's — other engineers' work on the shared machine.
            "others": max(0.0, (b1 - b0) / max(1.0, t1 - t0) * int(M["cpus"])
                          - (front / HZ + backend / HZ + client) / s["duration_s"]),
            "p99": ((run.get("latency") or {}).get("total") or {}).get("p99_ms"),
        }
    return out


P = phases()


def fmt(v, nd=1, unit=""):
    if v is None:
        return "—"
    return f"{v:,.{nd}f}{unit}"


def per(total, n):
    return total / n if n else None


print(
    f"Measured {M['date']} on {M['host']} ({M['cpus']} CPUs, shared with other engineers' work). "
    f"`{M['uptime_before'].strip()}` before; `{M.get('uptime_after', '?').strip()}` after."
)
print()
print(
    f"Backend: `spillway backend --cpu spin --service-time {M['burn_ms']}ms --workers {M['workers']} "
    f"--dist constant` (each request burns {M['burn_ms']} ms of its worker thread's CPU time). "
    f"Measured capacity, direct, closed loop (wrk, 4 connections, 5 s): **{CAP:,} req/s**"
    + (f", {float(M['capacity_backend_us']):,.0f} µs of backend CPU per request" if "capacity_backend_us" in M else "")
    + ". Offered load: `spillway load` (open loop, Poisson, one attempt, 1 s timeout) at "
    + ", ".join(f"{l}×" for l in LEVELS)
    + f" capacity; each level ran {M['settle_secs']} s unmeasured, then {M['secs']} s measured. "
    "CPU: utime + stime from `/proc/PID/stat` over the measured seconds. "
    + ("**Pinned** (`PIN=1`): the backend alone on CPU 1 (`taskset -c 1`), the proxy (or nginx) "
       "and the load generator on CPU 0, so the service keeps its core whatever refusals cost."
       if M.get("pin") == "1" else
       "Proxy, backend and client share the 2 cores (a sidecar's situation: the proxy's "
       "refusals take CPU the service could use; so does the load generator's, shown).")
    + " *Others* (in brackets after host busy) = the host's busy CPU less ours, in cores: other "
    "work on the shared machine."
)
print()

# --- refusal-only phases: Spillway's shed-below vs nginx `return 503;` -----------------------
refuse_only = {}
nginx_only = {}
rows = []
for level in LEVELS:
    r = P.get(f"refuse.{level}")
    n = P.get(f"nginx503.{level}")
    if r and r["rejected"]:
        refuse_only[level] = r["front_us"] / r["rejected"]
    if n and n["rejected"]:
        nginx_only[level] = n["front_us"] / n["rejected"]
    if r or n:
        rows.append((level, r, n))
if rows:
    print("### Refusals only: every request refused, at the overload levels' rates")
    print()
    print(
        "*Spillway*: the configured-limit proxy with `POST /controls/shed-below "
        "{\"criticality\": \"SHEDDABLE_PLUS\"}`, SHEDDABLE requests (503 + `Retry-After` + "
        "don't-retry, keep-alive kept). *nginx*: `location / { return 503; }`, 2 workers, "
        "access log off — the cheapest answer nginx gives, i.e. the floor of one keep-alive "
        "HTTP/1.1 exchange on this machine. Same client, same rates."
    )
    print()
    print("| rate | Spillway refusals | Spillway µs/refusal | nginx 503s | nginx µs/503 | Spillway / nginx | client µs/request (Spillway · nginx) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for level, r, n in rows:
        rate = (r or n)["rate"]
        ratio = (refuse_only[level] / nginx_only[level]) if level in refuse_only and level in nginx_only else None
        print(
            f"| {rate:,}/s ({level}×) | {fmt(r and r['rejected'], 0)} | {fmt(refuse_only.get(level))} | "
            f"{fmt(n and n['rejected'], 0)} | {fmt(nginx_only.get(level))} | "
            f"{fmt(ratio, 2, '×')} | {fmt(r and per(r['client_us'], r['sent']))} · {fmt(n and per(n['client_us'], n['sent']))} |"
        )
    for level, r, n in rows:
        for name, ph in (("Spillway", r), ("nginx", n)):
            if ph and ph["rejected"] != ph["sent"]:
                print(f"\nWARNING: {name} at {level}× refused {ph['rejected']} of {ph['sent']} (not all).")
    print()

# --- overload levels, per mode ---------------------------------------------------------------
summary = []
for mode, title in MODES.items():
    base = P.get(f"{mode}.{LEVELS[0]}")
    if not base:
        continue
    fwd_n = base["sent"] - base["rejected"]
    r1 = refuse_only.get(LEVELS[0], 0.0)
    forward = per(base["front_us"] - base["rejected"] * r1, fwd_n)
    backend = per(base["backend_us"], fwd_n)
    serve = forward + backend if forward is not None and backend is not None else None
    print(f"### {title}")
    print()
    print(
        f"Reference level {LEVELS[0]}×: forwarding costs the proxy **{fmt(forward)} µs** per request"
        + (f" (net of {base['rejected']:,} refusals at {r1:.1f} µs)" if base["rejected"] and r1 else "")
        + f", the backend **{fmt(backend)} µs**: serving one request costs **{fmt(serve)} µs** of CPU."
    )
    print()
    print(
        "| offered | served/s | refused/s | timed out | goodput vs "
        f"{LEVELS[0]}× | p99 (served) | proxy CPU | backend CPU | client CPU | host busy (others) | "
        "µs per refusal (derived) | refusal / serving | CPU on refusals / CPU serving |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for level in LEVELS:
        ph = P.get(f"{mode}.{level}")
        if not ph:
            continue
        secs = ph["secs"]
        fwd = ph["sent"] - ph["rejected"]
        ref = ph["rejected"]
        r_us = per(ph["front_us"] - fwd * forward, ref) if forward is not None and level != LEVELS[0] else None
        ratio = r_us / serve if r_us is not None and serve else None
        spend = (ref * r_us) / (fwd * serve) if r_us is not None and serve and fwd else None
        gp = ph["goodput"] / base["goodput"] if base["goodput"] else None
        print(
            f"| {ph['rate']:,}/s ({level}×) | {ph['goodput'] / secs:,.0f} | {ref / secs:,.0f} | "
            f"{ph['timed_out'] + ph['errors']:,} | {fmt(gp and 100 * gp, 0, ' %')} | {fmt(ph['p99'], 1, ' ms')} | "
            f"{ph['front_us'] / secs / 1e6:.2f} cores | {ph['backend_us'] / secs / 1e6:.2f} cores | "
            f"{ph['client_us'] / secs / 1e6:.2f} cores | {ph['host_busy']:.0f} % ({ph['others']:.2f}) | {fmt(r_us)} | "
            f"{fmt(ratio and 100 * ratio, 1, ' %')} | {fmt(spend, 2)} |"
        )
        if ratio is not None:
            summary.append((mode, level, r_us, ratio, spend, gp))
    print()

# --- targets ---------------------------------------------------------------------------------
print("### Target (issue 4): the CPU cost of a rejection ≤ 5 % of a served request")
print()
print(
    "A refusal's proxy CPU against the whole CPU of serving a request (proxy + a backend "
    f"burning {M['burn_ms']} ms), derived at each overload level:"
)
print()
for mode, level, r_us, ratio, spend, gp in summary:
    verdict = "met" if ratio <= 0.05 else "missed"
    print(
        f"- {mode} at {level}×: {r_us:.1f} µs per refusal = {100 * ratio:.1f} % of serving — {verdict}; "
        f"CPU on refusals = {spend:.2f} × CPU serving; goodput {100 * gp:.0f} % of {LEVELS[0]}×."
    )
if refuse_only:
    lv = max(refuse_only)
    line = f"- refusals only at {P[f'refuse.{lv}']['rate']:,}/s: Spillway {refuse_only[lv]:.1f} µs per refusal"
    if lv in nginx_only:
        line += f", nginx's `return 503` {nginx_only[lv]:.1f} µs ({refuse_only[lv] / nginx_only[lv]:.2f}×)"
    print(line + ".")
