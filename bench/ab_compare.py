#!/usr/bin/env python3
"""Compares two sides of an A/B run of `mlakit bench --json` (two builds or two commits, timed in
the same session): per case the best (smallest) time of each side over its rounds, the ratio B / A
(> 1: B is slower), their geometric mean, and the median spread between A's rounds.
Usage: ab_compare.py A_ROUND1.json[,A_ROUND2.json...] B_ROUND1.json[,B_ROUND2.json...]"""
import json
import math
import sys


def load(paths):
    out = {}
    for path in paths.split(","):
        for r in json.load(open(path))["results"]:
            key = (r["backend"], r["tactic"], r["h_q"], r["s_q"], r["batch"], r["seq_len"], r["var"],
                   r.get("topk", 0), r.get("layout", ""), r.get("dtype", ""))
            out.setdefault(key, []).append(r["time_us"])
    return out


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    a, b = load(argv[1]), load(argv[2])
    rows = [(k, a[k], b[k], min(b[k]) / min(a[k])) for k in sorted(a) if k in b]
    if not rows:
        sys.exit("no case in both")
    print(f"| case | A (us) | B (us) | B / A |")
    print("|---|---|---|---|")
    for k, ra, rb, r in rows:
        name = f"{k[0]}:{k[1]} h{k[2]} s{k[3]} b{k[4]} L{k[5]}" + (" var" if k[6] else "")
        name += f" topk {k[7]}" if k[7] else ""
        print(f"| {name} | {', '.join(f'{x:.1f}' for x in ra)} | {', '.join(f'{x:.1f}' for x in rb)}"
              f" | {r:.3f} |")
    g = math.exp(sum(math.log(r) for *_, r in rows) / len(rows))
    spread = sorted(abs(x[0] - x[1]) / min(x) for _, x, _, _ in rows if len(x) > 1)
    line = (f"cases {len(rows)}, geomean B / A {g:.4f}, max {max(r for *_, r in rows):.3f}, "
            f"min {min(r for *_, r in rows):.3f}")
    if spread:
        line += f", median spread of A's rounds {100 * spread[len(spread) // 2]:.2f}%"
    print()
    print(line)


if __name__ == "__main__":
    main(sys.argv)
