#!/usr/bin/env python3
"""Compares sparse `mlakit bench --json` results with FlashMLA's sparse reference CSV
(../shared/reference/flashmla_sparse_h200.csv: h_q, s_q, batch, topk, flashmla_us): per reference
row present in the results, the time ratio FlashMLA / mlakit (ratio > 1: mlakit faster), and
their geometric mean.
Usage: vs_sparse_reference.py RESULTS.json [MORE.json ...] --reference CSV"""
import csv
import json
import math
import sys


def main(argv):
    if "--reference" not in argv:
        sys.exit(__doc__)
    i = argv.index("--reference")
    ref_path, paths = argv[i + 1], argv[1:i] + argv[i + 2:]
    with open(ref_path) as f:
        ref = {(int(r["h_q"]), int(r["s_q"]), int(r["batch"]), int(r["topk"])): float(r["flashmla_us"])
               for r in csv.DictReader(l for l in f if not l.startswith("#"))}
    ours = {}
    for path in paths:
        for r in json.load(open(path))["results"]:
            if r.get("topk", 0) <= 0 or r["time_us"] <= 0:
                continue
            key = (r["h_q"], r["s_q"], r["batch"], r["topk"])
            ours[key] = min(ours.get(key, math.inf), r["time_us"])
    print("| h_q | s_q | batch | topk | FlashMLA (us) | mlakit (us) | FlashMLA / mlakit |")
    print("|---|---|---|---|---|---|---|")
    logs = []
    for key in sorted(ref):
        if key not in ours:
            continue
        ratio = ref[key] / ours[key]
        logs.append(math.log(ratio))
        print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {ref[key]:.1f} | {ours[key]:.1f} | "
              f"{ratio:.2f} |")
    if logs:
        print(f"\ngeomean FlashMLA / mlakit over {len(logs)} rows: {math.exp(sum(logs) / len(logs)):.2f}")


if __name__ == "__main__":
    main(sys.argv)
