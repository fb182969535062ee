#!/usr/bin/env python3
"""Prints the time a request spends outside the backend in bench/robustness.sh's real runs, ms:
per cell, the mean over the unprotected run's successes of latency (from the intended send
time) − the backend's queue time − its service time; then the median over the cells with at
least 50 successes (0 if none). The simulation's `[model] overhead_ms` (robustness.sh).

    overhead.py WORK CELL...
"""
import json
import os
import statistics
import sys


def cell_overhead(path):
    try:
        with open(path) as f:
            # null when the run had no successes (an unprotected cell past its capacity).
            lat = json.load(f)[0]["latency"] or {}
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None
    t, q, p = lat.get("total", {}), lat.get("queue", {}), lat.get("processing", {})
    if min(t.get("count", 0), q.get("count", 0), p.get("count", 0)) < 50:
        return None
    return max(0.0, t["mean_ms"] - q["mean_ms"] - p["mean_ms"])


def main():
    work, cells = sys.argv[1], sys.argv[2:]
    xs = [x for x in (cell_overhead(os.path.join(work, f"{n}.unprotected.json")) for n in cells)
          if x is not None]
    print(f"{statistics.median(xs):.3f}" if xs else "0")


if __name__ == "__main__":
    main()
