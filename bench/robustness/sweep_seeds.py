#!/usr/bin/env python3
"""Before/after of a policy change over several seeds of the same sweep.

Why: one seed's verdicts are not a measurement of a policy. A cell's run is a trajectory, and
a change that moves the first second (a cold start, one window's cut) sends it down another
path; cells near a threshold then flip either way. A variant that changed nothing after a
cold start's first cut flipped 21-33 R3 verdicts per seed while the mean R3 figure moved by
0.0007 (`bench/results/seeds-issue28.md`). So a change is judged on pairs of reports, before
and after at the same seed (`spillway sim --sweep FILE --seed N --json F`), by what holds
across seeds:

- per requirement and seed, failing cells before -> after;
- per requirement, the mean change of the cell figure over every cell and seed, with its
  standard error (a change smaller than two standard errors is not shown to be one);
- the cells whose verdict changed the same way in at least `--min` seeds (default 2): those
  are what the change did, the rest is the trajectory's noise.

    python3 bench/robustness/sweep_seeds.py BEFORE_1 AFTER_1 [BEFORE_2 AFTER_2 ...] [--min N]
"""
import statistics
import sys
from collections import Counter

from sweep_diff import load, verdict

CHECKS = ["R1", "R2", "R3", "R4a", "R4b"]
# Each requirement's figure in its own unit. R1's is percentage points for open-loop cells and
# percent of the limit-off goodput for closed loops, where a collapse without the limit reads
# as thousands of percent: its changes are summed apart, and the median says more than the mean.
UNITS = ["pp", "fraction", "fraction", "ms", "late exits"]


def describe(deltas):
    """Mean change with its standard error."""
    if not deltas:
        return "-"
    mean = statistics.mean(deltas)
    se = statistics.stdev(deltas) / len(deltas) ** 0.5 if len(deltas) > 1 else 0.0
    return f"{mean:+.5f} ({se:.5f})"


def main(argv):
    min_seeds = 2
    if "--min" in argv:
        i = argv.index("--min")
        min_seeds = int(argv[i + 1])
        argv = argv[:i] + argv[i + 2 :]
    if len(argv) < 2 or len(argv) % 2:
        sys.exit(__doc__)
    pairs = [(load(argv[i]), load(argv[i + 1])) for i in range(0, len(argv), 2)]

    print("| req | failing before -> after, per pair | mean change of the figure (s.e.) | median |")
    print("|---|---|---:|---:|")
    moved = {}
    for k, req in enumerate(CHECKS):
        per_seed, deltas, closed = [], [], []
        for before, after in pairs:
            common = before.keys() & after.keys()
            fb = fa = 0
            for label in common:
                vb, va = verdict(before[label], k), verdict(after[label], k)
                if vb is None or va is None:
                    continue
                fb += not vb[0]
                fa += not va[0]
                if vb[1] is not None and va[1] is not None:
                    into = closed if k == 0 and "closed:" in label else deltas
                    into.append(va[1] - vb[1])
                if vb[0] != va[0]:
                    way = "fixed" if va[0] else "newly failing"
                    moved.setdefault((req, way), Counter())[label] += 1
            per_seed.append(f"{fb} -> {fa}")
        figures = [(deltas, UNITS[k])] + ([(closed, "% closed loops")] if closed else [])
        summary = "; ".join(f"{describe(d)} {unit}" for d, unit in figures)
        medians = "; ".join(f"{statistics.median(d):+.5f}" if d else "-" for d, _ in figures)
        print(f"| {req} | {', '.join(per_seed)} | {summary} | {medians} |")

    print(f"\n### Verdicts that changed the same way in at least {min_seeds} of {len(pairs)} pairs\n")
    any_shown = False
    for (req, way), labels in sorted(moved.items()):
        for label, n in labels.most_common():
            if n >= min_seeds:
                print(f"- {req} {way} in {n}: `{label}`")
                any_shown = True
    if not any_shown:
        print("(none)")


if __name__ == "__main__":
    main(sys.argv[1:])
