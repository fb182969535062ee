#!/usr/bin/env python3
"""Before/after of two `spillway sim --sweep ... --json FILE` reports of the same matrix.

Why: a policy change is good when the failing cells go down across R1-R4 without new failures
elsewhere; the sweep's own summary gives one worst cell per requirement, not what moved. This
prints, per requirement, failing / applicable and the classes (infeasible / behind_tuned /
fails_like_tuned) before and after, the cells fixed and newly failing, the worst failing cell
of each class after, and the cells that moved most (both ways). With `--flips`, every cell
whose verdict changed, and the mean figure of R2 and R3 before and after (a change can move
many cells a little without flipping one).

    python3 bench/robustness/sweep_diff.py before.json after.json [TOP] [--flips]
"""
import json
import sys

CHECKS = ["R1", "R2", "R3", "R4a", "R4b"]
CLASSES = ["infeasible", "behind_tuned", "fails_like_tuned"]


def load(path):
    r = json.load(open(path))
    return {c["label"]: c for c in r["cells"]}


def verdict(cell, k):
    v = cell["verdicts"][k]
    return None if v is None else (v["pass"], v["figure"])


def counts(cells, k):
    failing = applicable = 0
    by_class = dict.fromkeys(CLASSES, 0)
    for c in cells.values():
        v = verdict(c, k)
        if v is None:
            continue
        applicable += 1
        if not v[0]:
            failing += 1
            cls = c["classes"][k]
            if cls in by_class:
                by_class[cls] += 1
    return failing, applicable, by_class


def fmt(cnt):
    f, a, b = cnt
    return f"{f}/{a} ({'/'.join(str(b[x]) for x in CLASSES)})"


def mean_figure(cells, k):
    figs = [v[1] for v in (verdict(c, k) for c in cells.values()) if v and v[1] is not None]
    return sum(figs) / len(figs) if figs else None


def flips(before, after, common):
    print("\n### Verdicts that changed\n")
    for k, req in enumerate(CHECKS):
        for label in common:
            b, a = verdict(before[label], k), verdict(after[label], k)
            if b is None or a is None or b[0] == a[0]:
                continue
            what = "fixed" if a[0] else "newly failing"
            print(f"- {req} {what}: `{label}` {b[1]:.4f} → {a[1]:.4f}")
    for k in (CHECKS.index("R2"), CHECKS.index("R3")):
        mb, ma = mean_figure(before, k), mean_figure(after, k)
        if mb is not None and ma is not None:
            print(f"\nmean {CHECKS[k]} figure: {mb:.4f} → {ma:.4f}")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    before, after = load(args[0]), load(args[1])
    top = int(args[2]) if len(args) > 2 else 8
    common = sorted(set(before) & set(after))
    print("| req | before | after | fixed | newly failing |")
    print("|---|---|---|---:|---:|")
    moved = {}
    for k, req in enumerate(CHECKS):
        fixed = new = 0
        moves = []
        for label in common:
            b, a = verdict(before[label], k), verdict(after[label], k)
            if b is None or a is None:
                continue
            if not b[0] and a[0]:
                fixed += 1
            if b[0] and not a[0]:
                new += 1
            if b[1] is not None and a[1] is not None and b[1] != a[1]:
                moves.append((a[1] - b[1], label, b, a))
        moved[req] = moves
        print(f"| {req} | {fmt(counts(before, k))} | {fmt(counts(after, k))} | {fixed} | {new} |")
    print("\nClasses are infeasible / behind_tuned / fails_like_tuned.")
    # Lower is better for R4 (ms, late exits); higher for R1-R3.
    better_high = {"R1": True, "R2": True, "R3": True, "R4a": False, "R4b": False}
    for k, req in enumerate(CHECKS):
        print(f"\n### {req}: worst failing cell per class, after\n")
        for cls in CLASSES:
            worst = None
            for label, c in after.items():
                v = verdict(c, k)
                if v is None or v[0] or c["classes"][k] != cls or v[1] is None:
                    continue
                key = v[1] if better_high[req] else -v[1]
                if worst is None or key < worst[0]:
                    worst = (key, label, v[1])
            if worst:
                print(f"- {cls}: `{worst[1]}` {worst[2]:.4f}")
        moves = moved[req]
        if not moves:
            continue
        sign = 1 if better_high[req] else -1
        moves.sort(key=lambda m: sign * m[0])
        print(f"\n{req}, most worse (before → after, pass?):")
        for d, label, b, a in moves[:top]:
            if sign * d >= 0:
                break
            print(f"- `{label}` {b[1]:.4f} ({b[0]}) → {a[1]:.4f} ({a[0]})")
        print(f"\n{req}, most better:")
        for d, label, b, a in reversed(moves[-top:]):
            if sign * d <= 0:
                break
            print(f"- `{label}` {b[1]:.4f} ({b[0]}) → {a[1]:.4f} ({a[0]})")
    if "--flips" in sys.argv:
        flips(before, after, common)


if __name__ == "__main__":
    main()
