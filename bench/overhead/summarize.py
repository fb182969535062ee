#!/usr/bin/env python3
"""Turn the raw results of bench/proxy-overhead.sh into one markdown report.

Why a separate file: the shell script only runs processes and records raw numbers (wrk text,
`spillway load` JSON, /proc CPU counters); the arithmetic (percentiles, µs per request, ratios,
targets met or missed) is easier to read and to check here.

Usage: summarize.py WORK_DIR   (prints markdown on stdout)
"""
import json
import os
import re
import statistics
import sys

WORK = sys.argv[1]
PATHS = [
    ("direct", "direct to `spillway backend`"),
    ("spillway", "`spillway proxy` (fixed limit)"),
    ("spillway_ws", "`spillway proxy` (fixed limit), work-stealing runtime (the layout before)"),
    ("zeroconf", "`spillway proxy` (zero-config)"),
    ("nginx", "nginx reverse proxy"),
]


def read(name):
    p = os.path.join(WORK, name)
    return open(p).read() if os.path.exists(p) else None


def wrk(name):
    """Parse `wrk --latency` output: requests/s, p50, p99 (ms), non-2xx count."""
    text = read(name)
    if text is None:
        return None
    rps = re.search(r"Requests/sec:\s+([\d.]+)", text)

    def pct(p):
        m = re.search(r"^\s+%s%%\s+([\d.]+)(us|ms|s)\s*$" % p, text, re.M)
        if not m:
            return None
        v = float(m.group(1))
        return {"us": v / 1000.0, "ms": v, "s": v * 1000.0}[m.group(2)]

    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    total = re.search(r"(\d+) requests in ([\d.]+)(ms|s)", text)
    errs = re.search(r"Socket errors:(.*)", text)
    goodput = None
    if rps and total:
        n = int(total.group(1))
        ok = n - (int(bad.group(1)) if bad else 0)
        goodput = float(rps.group(1)) * ok / max(1, n)
    return {
        "rps": goodput,
        "all_rps": float(rps.group(1)) if rps else None,
        "p50": pct(50),
        "p99": pct(99),
        "non2xx": int(bad.group(1)) if bad else 0,
        "socket_errors": errs.group(1).strip() if errs else "",
    }


def load(name):
    """Parse a `spillway load --json` report: goodput/s, success share, p50/p99 (ms)."""
    text = read(name)
    if text is None:
        return None
    run = json.loads(text)[0]
    s, lat = run["summary"], run["latency"]["total"]
    return {
        "offered": s["offered"] / s["duration_s"],
        "sent": s["sent"],
        "goodput": s["goodput"] / s["duration_s"],
        "ok": 100.0 * s["goodput"] / max(1, s["offered"]),
        "p50": lat.get("p50_ms"),
        "p99": lat.get("p99_ms"),
        "p999": lat.get("p999_ms"),
        "lag99": run["meta"]["send_lag"]["p99_ms"],
        "secs": s["duration_s"],
    }


def fmt(v, unit=""):
    return "—" if v is None else f"{v:,.1f}{unit}"


out = []
meta = dict(line.split("=", 1) for line in (read("meta") or "").splitlines() if "=" in line)
out.append(f"Measured {meta.get('date', '?')} on {meta.get('host', '?')} "
           f"({meta.get('cpus', '?')} CPUs, shared). Load average before: "
           f"{meta.get('load_before', '?')}; after: {meta.get('load_after', '?')} "
           f"(`{meta.get('uptime_before', '?').strip()}` → `{meta.get('uptime_after', '?').strip()}`). "
           f"Backend: `spillway backend --workers {meta.get('workers')} --service-time 1ms "
           f"--dist constant --cpu sleep`. nginx: {meta.get('nginx', '?')}. "
           f"Spillway data-plane threads: {meta.get('proxy_threads', '?')}.")
out.append("")

# --- 1. Max throughput (wrk, closed loop) ---
out.append(f"### Maximum throughput (wrk, closed loop: {meta.get('wrk', '?')})")
out.append("")
mcpu = {}
for line in (read("max.cpu") or "").splitlines():
    p = line.split()
    if len(p) == 8:  # key front backend client busy0 total0 busy1 total1
        busy = (float(p[6]) - float(p[4])) / max(1.0, float(p[7]) - float(p[5]))
        ours = (int(p[1]) + int(p[2])) / int(meta.get("clk_tck", "100")) + float(p[3])
        secs = float(re.sub(r"[^0-9.]", "", meta.get("wrk", "8 s").split(",")[-1]) or 8)
        mcpu[p[0]] = max(0.0, busy * int(meta.get("cpus", "2")) - ours / secs)
if mcpu:
    out.append("*Others* = the host's busy CPU during the run less the front's, the backend's and "
               "wrk's, in cores (other work on the shared machine; near 1 = contaminated).")
    out.append("")
out.append("| path | 2xx responses/s | vs direct | vs nginx | p50 | p99 | non-2xx | others |")
out.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
maxes = {k: wrk(f"{k}.max.wrk") for k, _ in PATHS}
direct_max = (maxes.get("direct") or {}).get("rps")
nginx_max = (maxes.get("nginx") or {}).get("rps")
for key, label in PATHS:
    r = maxes.get(key)
    if not r or r["rps"] is None:
        out.append(f"| {label} | skipped | | | | | | |")
        continue
    vd = f"{100 * r['rps'] / direct_max:.0f} %" if direct_max else "—"
    vn = f"{100 * r['rps'] / nginx_max:.0f} %" if nginx_max else "—"
    out.append(f"| {label} | {r['rps']:,.0f} | {vd} | {vn} | {fmt(r['p50'], ' ms')} | "
               f"{fmt(r['p99'], ' ms')} | {r['non2xx']} | "
               f"{'—' if key not in mcpu else f'{mcpu[key]:.2f}'} |")
out.append("")

# --- 2. Fixed rates (spillway load, open loop) ---
rates = [r for r in meta.get("rates", "").split(",") if r]
out.append("### Latency at fixed rates (`spillway load`, open loop, Poisson arrivals, HTTP/1.1 keep-alive)")
out.append("")
out.append("Latency is from each request's intended send time (no coordinated omission). "
           "*Added* = this path's percentile minus the direct path's at the same rate. "
           + (f"Each path first ran {meta['settle_secs']} s at the rate (not measured), so an "
              "adaptive limit is sized for it rather than for the previous rate."
              if meta.get("settle_secs", "0") != "0"
              else "Each rate follows the previous one with no settling (step response included)."))
out.append("")
hz = int(meta.get("clk_tck", "100"))
out.append("CPU per request, from utime + stime in `/proc/PID/stat` over the run: *front* = the "
           "proxy (nginx: master and workers), *backend* = `spillway backend`, *client* = "
           "`spillway load`. *Host busy* = the whole machine's busy share of its CPUs during the "
           "run (including anyone else's work).")
out.append("")
rounds = int(meta.get("rounds", "1"))
ncpus = int(meta.get("cpus", "2"))
rcpu = {}
for line in (read("rates.cpu") or "").splitlines():
    p = line.split()
    if len(p) in (9, 10):  # key rate front backend client busy0 total0 busy1 total1 [round]
        busy = (float(p[7]) - float(p[5])) / max(1.0, float(p[8]) - float(p[6]))
        rnd = int(p[9]) if len(p) == 10 else 1
        rcpu[(p[0], p[1], rnd)] = (int(p[2]) / hz, int(p[3]) / hz, float(p[4]), 100.0 * busy)


def rate_runs(key, rate):
    """Every round's `spillway load` result for this path and rate, with its CPU row; a run
    without rounds (older raw directories) is round 1."""
    runs = {}
    for rnd in range(1, rounds + 1):
        r = load(f"{key}.{rate}.r{rnd}.json")
        if r:
            runs[rnd] = r
    if not runs:
        r = load(f"{key}.{rate}.json")
        if r:
            runs[1] = r
    for rnd, r in runs.items():
        fr, be, cl, busy = rcpu.get((key, rate, rnd), (0, 0, 0, None))
        n = max(1, r["sent"])
        r["front_us"], r["backend_us"], r["client_us"] = fr * 1e6 / n, be * 1e6 / n, cl * 1e6 / n
        r["busy"] = busy
        # Everyone else's CPU during the phase (cores): the host's busy time less ours.
        r["others"] = None
        if busy is not None and r.get("secs"):
            r["others"] = max(0.0, busy / 100.0 * ncpus - (fr + be + cl) / r["secs"])
    return runs


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    return statistics.median(xs) if xs else None


def spread(xs, unit=" ms", nd=1):
    """`median (min–max)`; the median alone when there is one value."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return "—"
    m = statistics.median(xs)
    if len(xs) == 1 or min(xs) == max(xs):
        return f"{m:,.{nd}f}{unit}"
    return f"{m:,.{nd}f}{unit} ({min(xs):,.{nd}f}–{max(xs):,.{nd}f})"


if rounds > 1:
    out.append(f"**{rounds} interleaved rounds**: each round ran every path once (order rotated "
               "by one per round), so drift of the shared machine hits all paths alike. Each "
               "cell is the median over rounds with the spread (min–max) in brackets. *Added* "
               "p50/p99 = the path's median minus the direct path's median at the same rate; "
               "the bracket after *added p99* is the spread of the round-paired differences "
               "(path − direct in the same round). Goodput, success and CPU are medians over "
               f"rounds. Each measured phase: {meta.get('lat_secs', '?')} s.")
    out.append("")
out.append("*Others* = the host's busy CPU during the phase less the front's, the backend's and the "
           "client's (other engineers' builds and tests on the shared machine), in cores, median "
           "over rounds with the spread; a round with others near a full core is contaminated.")
out.append("")
out.append("| rate | path | goodput/s | success | p50 | p99 | p99.9 | added p50 | added p99 | CPU/request: front · backend · client | host busy | others |")
out.append("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
added99 = {}
spread99 = {}
for rate in rates:
    base = rate_runs("direct", rate)
    b50 = median(r["p50"] for r in base.values())
    b99 = median(r["p99"] for r in base.values())
    for key, label in PATHS:
        runs = rate_runs(key, rate)
        if not runs:
            out.append(f"| {rate}/s | {label} | skipped | | | | | | | | | |")
            continue
        rs = list(runs.values())
        m50 = median(r["p50"] for r in rs)
        m99 = median(r["p99"] for r in rs)
        a50 = a99 = None
        a99_txt = "—"
        if base and key != "direct" and b99 is not None:
            a50, a99 = m50 - b50, m99 - b99
            added99[(key, rate)] = a99
            paired = [runs[k]["p99"] - base[k]["p99"] for k in runs if k in base]
            spread99[(key, rate)] = paired
            a99_txt = f"{a99:+.2f} ms"
            if len(paired) > 1:
                a99_txt += f" ({min(paired):+.2f}…{max(paired):+.2f})"
        front = f"{median(r['front_us'] for r in rs):.0f}" if key != "direct" else "—"
        per = (f"{front} · {median(r['backend_us'] for r in rs):.0f} · "
               f"{median(r['client_us'] for r in rs):.0f} µs")
        out.append(f"| {rate}/s | {label} | {median(r['goodput'] for r in rs):,.0f} | "
                   f"{spread([r['ok'] for r in rs], ' %', 2)} | "
                   f"{spread([r['p50'] for r in rs])} | {spread([r['p99'] for r in rs])} | "
                   f"{spread([r['p999'] for r in rs])} | {fmt(a50, ' ms')} | {a99_txt} | {per} | "
                   f"{fmt(median(r['busy'] for r in rs), ' %')} | "
                   f"{spread([r['others'] for r in rs], '', 2)} |")
out.append("")

# --- 3. CPU per request: refused vs served ---
cpu = {}
for line in (read("cpu") or "").splitlines():
    parts = line.split()
    if len(parts) in (3, 4):  # phase proxy-ticks requests [backend-ticks]
        cpu[parts[0]] = (int(parts[1]), int(parts[2]), int(parts[3]) if len(parts) == 4 else 0)


def per_request(phase, idle_phase):
    """Proxy and backend µs per request in `phase`, net of `idle_phase` (same length)."""
    if phase not in cpu or not cpu[phase][1]:
        return None
    t, n, b = cpu[phase]
    it, _, ib = cpu.get(idle_phase, (0, 0, 0))
    return {"n": n, "proxy_ms": t * 1000 / hz, "raw": (t * 1e6 / hz) / n,
            "proxy": ((t - it) * 1e6 / hz) / n, "backend": ((b - ib) * 1e6 / hz) / n}


out.append(f"### (a) Proxy CPU per request: refused vs forwarded, at a low rate "
           f"({meta.get('cpu_rate', '?')} req/s for {meta.get('cpu_secs', '?')} s each)")
out.append("")
out.append("At these rates the proxy's threads are mostly idle, so each request pays a thread "
           "wake-up; the refusal's cost under real overload (1×–10× a CPU-bound backend's "
           "capacity) is measured by `bench/overload.sh` ([overload.md](overload.md)).")
out.append("")
out.append("CPU of the proxy process only (the backend's is not counted): utime + stime from "
           f"`/proc/PID/stat` (1/{hz} s ticks) across each phase. *Forwarded*: CRITICAL requests "
           "forwarded to the backend. *Refused (control)*: SHEDDABLE requests refused by the "
           "incident control `POST /controls/shed-below {\"criticality\": \"SHEDDABLE_PLUS\"}` "
           "(503 + `Retry-After` + don't-retry). *Refused (quota)*: SHEDDABLE requests refused "
           "by the admission controller, over a quota of 0 (429 + `Retry-After`, spillway-tower's "
           "`refusal_response`). Keep-alive is kept on every refusal. *Net* subtracts an idle "
           "phase of the same length (timers, utilisation refresh).")
out.append("")
out.append("| phase | requests | proxy CPU | µs/request | µs/request, net of idle | vs forwarded |")
out.append("| --- | ---: | ---: | ---: | ---: | ---: |")
rows = [("idle", "idle"), ("served", "forwarded"), ("refused", "refused (control, 503)"),
        ("refused_quota", "refused (quota, 429)")]
nginx_rows = [("nginx_served", "nginx: forwarded"), ("nginx_refused", "nginx: `return 503;`")]
per = {}
for phase, label in rows:
    if phase not in cpu:
        continue
    t, n, _ = cpu[phase]
    if not n:
        out.append(f"| {label} | 0 | {t * 1000 / hz:,.0f} ms | — | — | — |")
        continue
    r = per_request(phase, "idle")
    per[phase] = r["proxy"]
    vs = ""
    if phase != "served" and per.get("served"):
        vs = f"{100 * r['proxy'] / per['served']:.0f} %"
    out.append(f"| {label} | {n:,} | {r['proxy_ms']:,.0f} ms | {r['raw']:.1f} | "
               f"{r['proxy']:.1f} | {vs} |")
for phase, label in nginx_rows:
    if phase not in cpu or not cpu[phase][1]:
        continue
    t, n, _ = cpu[phase]
    r = per_request(phase, "idle")
    per[phase] = r["proxy"]
    vs = ""
    if phase == "nginx_refused" and per.get("nginx_served"):
        vs = f"{100 * r['proxy'] / per['nginx_served']:.0f} % (of nginx forwarding)"
    out.append(f"| {label} | {n:,} | {r['proxy_ms']:,.0f} ms | {r['raw']:.1f} | "
               f"{r['proxy']:.1f} | {vs} |")
ratio_a = None
if per.get("served") and per.get("refused") is not None:
    ratio_a = 100.0 * per["refused"] / per["served"]
    out.append("")
    q = ""
    if per.get("refused_quota") is not None:
        q = (f"; a controller refusal (quota, 429) {100 * per['refused_quota'] / per['served']:.0f} % "
             f"({per['refused_quota']:.1f} µs)")
    out.append(f"**(a) A refusal costs {ratio_a:.0f} % of the proxy's CPU for a forwarded request** "
               f"({per['refused']:.1f} µs vs {per['served']:.1f} µs, net of idle{q}); "
               f"target ≤ 5 %: {'met' if ratio_a <= 5 else 'missed'}.")
    if per.get("nginx_served") and per.get("nginx_refused") is not None:
        out.append("")
        out.append(f"For scale, nginx at the same rate: its cheapest refusal (`return 503;`) costs "
                   f"{per['nginx_refused']:.1f} µs, {100 * per['nginx_refused'] / per['nginx_served']:.0f} % "
                   f"of its {per['nginx_served']:.1f} µs for forwarding; Spillway's refusal is "
                   f"{per['refused'] / per['nginx_refused']:.2f}× nginx's. Refusing costs one "
                   "keep-alive exchange and forwarding two, so on the proxy's CPU alone the ratio "
                   "cannot approach 5 % for any proxy.")
out.append("")

burn = per_request("burn_served", "burn_idle")
burn_ref = per_request("burn_refused", "burn_idle")
ratio_b = breakeven = None
if burn and burn_ref:
    ms = meta.get("burn_ms", "?")
    out.append(f"### (b) The refusal against the whole cost of serving, at a low rate: a backend "
               f"burning {ms} ms of CPU per request ({meta.get('burn_rate', '?')} req/s for "
               f"{meta.get('burn_secs', '?')} s each)")
    out.append("")
    out.append(f"`spillway backend --cpu spin --service-time {ms}ms --workers 2` (busy-spins for "
               "the service time) behind the same proxy; *serving* = proxy CPU + backend CPU per "
               "served request, *refusing* = the proxy's CPU per request refused by shed-below "
               "(the backend does nothing). Both net of an idle phase of the same length.")
    out.append("")
    total = burn["proxy"] + burn["backend"]
    ratio_b = 100.0 * burn_ref["proxy"] / total
    # refusal <= 5 % of (proxy forwarding + backend): backend >= 20 x refusal - proxy forwarding
    breakeven = 20.0 * burn_ref["proxy"] - burn["proxy"]
    out.append("| phase | requests | proxy µs/request | backend µs/request | total µs/request |")
    out.append("| --- | ---: | ---: | ---: | ---: |")
    out.append(f"| served | {burn['n']:,} | {burn['proxy']:.1f} | {burn['backend']:.1f} | {total:.1f} |")
    out.append(f"| refused (control, 503) | {burn_ref['n']:,} | {burn_ref['proxy']:.1f} | "
               f"{burn_ref['backend']:.1f} | {burn_ref['proxy'] + burn_ref['backend']:.1f} |")
    out.append("")
    out.append(f"**(b) A refusal costs {ratio_b:.1f} % of serving a request** "
               f"({burn_ref['proxy']:.1f} µs vs {total:.1f} µs of proxy + backend CPU); target "
               f"≤ 5 %: {'met' if ratio_b <= 5 else 'missed'}. Break-even: a refusal stays "
               f"≤ 5 % of serving once the backend spends at least {max(0.0, breakeven):.0f} µs "
               f"of CPU per request (20 × {burn_ref['proxy']:.1f} µs − the proxy's "
               f"{burn['proxy']:.1f} µs of forwarding).")
    out.append("")

# --- Targets ---
out.append("### Targets (issue 4)")
out.append("")
sp = (maxes.get("spillway") or {}).get("rps")
if sp and nginx_max:
    ok = sp >= nginx_max
    out.append(f"- Throughput ≥ nginx's: spillway {sp:,.0f}/s vs nginx {nginx_max:,.0f}/s — "
               f"{'met' if ok else 'missed'} ({100 * sp / nginx_max:.0f} %).")
else:
    out.append("- Throughput ≥ nginx's: not measured (nginx skipped).")
ws = (maxes.get("spillway_ws") or {}).get("rps")
if sp and ws:
    out.append(f"- Thread-per-core vs the work-stealing runtime (same binary, same run): "
               f"{sp:,.0f}/s vs {ws:,.0f}/s ({100 * sp / ws:.0f} %).")
below_half = rates[:-1] if len(rates) > 1 else rates  # the last rate is half of direct's max
for key in ("spillway", "zeroconf"):
    vals = [(rate, added99[(key, rate)]) for rate in below_half if (key, rate) in added99]
    if vals:
        worst = max(v for _, v in vals)
        txt = ", ".join(
            f"{v:+.2f} ms at {rate}/s" + (f" (rounds {min(spread99[(key, rate)]):+.2f}…"
                                         f"{max(spread99[(key, rate)]):+.2f})"
                                         if len(spread99.get((key, rate), [])) > 1 else "")
            for rate, v in vals)
        out.append(f"- p99 added ≤ 1 ms below half load ({dict(PATHS)[key]}): {txt} — "
                   f"{'met' if worst <= 1.0 else 'missed'}.")
if ratio_a is not None:
    out.append(f"- Refusal ≤ 5 % of serving, (a) proxy CPU only, at {meta.get('cpu_rate', '?')}/s: {ratio_a:.0f} % — "
               f"{'met' if ratio_a <= 5 else 'missed'}.")
if ratio_b is not None:
    out.append(f"- Refusal ≤ 5 % of serving, (b) proxy + a {meta.get('burn_ms', '?')} ms CPU backend, at "
               f"{meta.get('burn_rate', '?')}/s (low rate; under overload see `bench/overload.sh`): "
               f"{ratio_b:.1f} % — {'met' if ratio_b <= 5 else 'missed'} (break-even backend CPU "
               f"{max(0.0, breakeven):.0f} µs/request).")
print("\n".join(out))
