#!/usr/bin/env python3
"""Failing cells of a `spillway sim --sweep ... --json FILE` report, by class, as Markdown.

Why: the sweep's text summary names one worst cell per requirement; the policy work needs the
list of cells where the tuned HAProxy baseline does better than Spillway (`behind_tuned`), with
the figures of both and of the oracle, and how the infeasible cells split by cause.

    python3 bench/robustness/sweep_classes.py full.json [TOP]   # TOP per requirement, default 10
    python3 bench/robustness/sweep_classes.py full.json 10 --r3-real
        # R3: only cells whose tuned goodput is at most 100 % of min(offered, capacity) — above
        # it, the run's window is shorter than the client timeout and the backlog served after
        # the window counts (see bench/results/baseline-sweep.md)
"""
import json
import sys

ORDER = ["infeasible", "behind_tuned", "fails_like_tuned"]


def critical(f):
    return f["critical_ok"] / f["critical_offered"] if f and f["critical_offered"] else None


def goodput(f):
    return f["goodput_rps"] / f["reference_rps"] if f and f["reference_rps"] else None


def fig(req, f, spec, base=None):
    """A run's figure for requirement `req`, as the sweep judges it (R1 against `base`)."""
    if f is None:
        return "-"
    if req == "R1":
        if spec["arrivals"] in ("poisson", "on_off"):
            return f"{(f['ok'] / f['offered'] - base['ok'] / base['offered']) * 100:+.2f} pp"
        return f"{(f['goodput_rps'] / base['goodput_rps'] - 1) * 100:+.2f} %"
    if req == "R2":
        c = critical(f)
        return "-" if c is None else f"{c * 100:.2f}% ({f['critical_ok']}/{f['critical_offered']})"
    if req == "R3":
        return f"{goodput(f) * 100:.1f}%"
    if req == "R4a":
        m = f["refusal_median_ms"]
        return "none refused" if m is None else f"{m:.1f} ms"
    return f"{f['late_queue_exits']} late"


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    r3_real = "--r3-real" in sys.argv
    report = json.load(open(args[0]))
    top = int(args[1]) if len(args) > 1 else 10
    cells = report["cells"]
    print("| requirement | failing / applicable | infeasible | behind_tuned | fails_like_tuned |")
    print("|---|---|---|---|---|")
    for c in report["checks"]:
        print(f"| {c['id']} | {c['failing']} / {c['applicable']} | {c['infeasible']} | "
              f"{c['behind_tuned']} | {c['fails_like_tuned']} |")
    for k, c in enumerate(report["checks"]):
        req = c["id"]
        # The sweep's own order: furthest behind the reference first (at most 20 listed).
        behind = [cells[i] for i, _, _ in c["behind_tuned_worst"]]
        if req == "R3" and r3_real:
            behind = [x for x in behind if goodput(x["tuned"]) <= 1.0]
        if not behind:
            continue
        note = " (tuned at most 100 %)" if req == "R3" and r3_real else ""
        print(f"\n### {req}: the {min(top, len(behind))} furthest behind of {c['behind_tuned']} "
              f"behind_tuned cells{note}\n")
        oracle = {"R2": "oracle_critical", "R3": "oracle_goodput"}.get(req)
        head = "| cell | spillway | " + ("unprotected | tuned" if req == "R1" else "tuned") + \
               (" | oracle" if oracle else "") + " |"
        print(head)
        print("|" + "---|" * (head.count("|") - 1))
        for x in behind[:top]:
            s, u = x["spec"], x["unprotected"]
            row = [f"`{x['label']}`", fig(req, x["protected"], s, u)]
            if req == "R1":
                row += [fig(req, u, s, u), fig(req, x["tuned"], s, u)]
            else:
                row.append(fig(req, x["tuned"], s, u))
            if oracle:
                row.append(fig(req, x.get(oracle), s, u))
            print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
