#!/usr/bin/env python3
"""Reads `mlakit bench --json` outputs (one or more files) that ran single backends and `auto` on the same cases and
prints, per case, auto's time against the best single backend (the autotuner's acceptance check:
auto within 5% of the best on every case). Exit code 1 when a case is over the limit. The tuner
chooses on a uniform and a ragged batch together (docs/autotuner.md), so uniform cases where a
tactic wins the uniform batch and loses the ragged one can be over the limit by design; the last
lines give the geometric mean of auto/best over uniform and variable-length cases apart."""
import math
import json
import sys


def main(paths: list, limit: float = 1.05) -> int:
    results = [r for path in paths for r in json.load(open(path))["results"]]
    cases: dict = {}
    for r in results:
        if r["time_us"] <= 0:
            continue
        key = (r["h_q"], r["s_q"], r["batch"], r["seq_len"], r["var"], r["page_size"])
        name = r["backend"] + ":" + str(r["tactic"])
        cases.setdefault(key, {})[name] = r["time_us"]
    print(f"{'h_q':>4} {'s_q':>4} {'batch':>5} {'seq_len':>7} {'var':>3}  "
          f"{'best single':<14} {'us':>8}  {'auto picked':<16} {'us':>8} {'auto/best':>9}")
    worst, over = 0.0, 0
    logs: dict = {0: [], 1: []}
    for key in sorted(cases):
        times = cases[key]
        auto = {k: v for k, v in times.items() if k.startswith("auto>")}
        single = {k: v for k, v in times.items() if not k.startswith("auto>")}
        if not auto or not single:
            continue
        (auto_name, auto_us), = auto.items()
        best_name = min(single, key=single.get)
        ratio = auto_us / single[best_name]
        worst = max(worst, ratio)
        over += ratio > limit
        logs[int(bool(key[4]))].append(math.log(ratio))
        h, s, b, l, v, _ = key
        print(f"{h:>4} {s:>4} {b:>5} {l:>7} {int(v):>3}  {best_name:<14} {single[best_name]:>8.1f}  "
              f"{auto_name[5:]:<16} {auto_us:>8.1f} {ratio:>9.3f}")
    for v, name in ((0, "uniform"), (1, "variable-length")):
        if logs[v]:
            print(f"{name}: geomean auto/best {math.exp(sum(logs[v]) / len(logs[v])):.3f} over "
                  f"{len(logs[v])} case(s), worst {math.exp(max(logs[v])):.3f}")
    print(f"worst auto/best {worst:.3f}; {over} case(s) over {limit:.2f}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
