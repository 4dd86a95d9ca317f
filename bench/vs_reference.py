#!/usr/bin/env python3
"""Compares `mlakit bench --json` results with the FlashMLA reference CSV, the way the sm90 issue
scores them: per reference row, the time ratio reference / mlakit for the sm90 backend (its
faster tactic), for auto, and sm90 against sm80; the geometric mean over the rows present; the
rows below 0.97; and the grid cases where sm90 is slower than sm80.
Usage: vs_reference.py RESULTS.json [MORE.json ...] [--reference CSV]"""
import csv
import json
import math
import sys


def load_reference(path):
    rows = {}
    with open(path) as f:
        lines = [l for l in f if not l.startswith("#")]
    for r in csv.DictReader(lines):
        key = (int(r["h_q"]), int(r["s_q"]), int(r["batch"]), int(r["seq_len"]), int(r["var"]))
        rows[key] = float(r["time_us"])
    return rows


def load_results(paths):
    best = {}  # key -> {family: time}
    for path in paths:
        for r in json.load(open(path))["results"]:
            if r["time_us"] <= 0 or r.get("page_size", 64) != 64:
                continue
            key = (r["h_q"], r["s_q"], r["batch"], r["seq_len"], r["var"])
            family = "auto" if r["backend"].startswith("auto") else r["backend"]
            cur = best.setdefault(key, {})
            cur[family] = min(cur.get(family, math.inf), r["time_us"])
    return best


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main(argv):
    ref_path = "bench/reference/flashmla_h200.csv"
    paths = []
    i = 0
    while i < len(argv):
        if argv[i] == "--reference":
            ref_path = argv[i + 1]
            i += 2
        else:
            paths.append(argv[i])
            i += 1
    ref = load_reference(ref_path)
    res = load_results(paths)
    print(f"{'h_q':>4} {'s_q':>3} {'batch':>5} {'seq_len':>7} {'var':>3} {'flashmla':>9} "
          f"{'sm90':>8} {'ref/sm90':>8} {'auto':>8} {'ref/auto':>8} {'sm80':>8} {'sm80/sm90':>9}")
    ratios = {"sm90": [], "auto": []}
    below = {"sm90": 0, "auto": 0}
    slower_than_sm80 = []
    for key in sorted(ref):
        if key not in res:
            continue
        t = res[key]
        line = f"{key[0]:>4} {key[1]:>3} {key[2]:>5} {key[3]:>7} {key[4]:>3} {ref[key]:>9.1f}"
        for fam in ("sm90", "auto"):
            if fam in t:
                ratio = ref[key] / t[fam]
                ratios[fam].append(ratio)
                below[fam] += ratio < 0.97
                line += f" {t[fam]:>8.1f} {ratio:>8.2f}"
            else:
                line += f" {'-':>8} {'-':>8}"
        if "sm80" in t and "sm90" in t:
            line += f" {t['sm80']:>8.1f} {t['sm80'] / t['sm90']:>9.2f}"
        print(line)
    for key, t in sorted(res.items()):
        if "sm80" in t and "sm90" in t and t["sm90"] > t["sm80"]:
            slower_than_sm80.append((key, t["sm90"], t["sm80"]))
    for fam in ("sm90", "auto"):
        if ratios[fam]:
            print(f"{fam}: geomean FlashMLA/{fam} {geomean(ratios[fam]):.3f} over "
                  f"{len(ratios[fam])} rows (target >= 1.25); rows below 0.97: {below[fam]}, "
                  f"lowest {min(ratios[fam]):.2f}")
    print(f"cases where sm90 is slower than sm80: {len(slower_than_sm80)}"
          + "".join(f"\n  {k}: sm90 {a:.1f} us, sm80 {b:.1f} us" for k, a, b in slower_than_sm80))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
