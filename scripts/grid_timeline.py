"""Summarizes the grid timeline of an MLAKIT_SM90_TRACE build (lines "G cta sm t0 .. t10" printed
by mlakit at exit for the last decode launch; %globaltimer in ns, common to all SMs).

Events per CTA: 0 entry, 1 past the PDL wait and the setup barrier, 2 the first block's first
column chunk seen by consumer warpgroup 0, 3 warpgroup 0's last block done, 6 both consumer
warpgroups at the epilogue barrier, 7 the rows' LSE and scale worked out, 4 the epilogue's stores
issued, 5 exit. The narrow tile also stamps 8 (its first row pass written by warpgroup 0), 9
(added by warpgroup 1) and 10 (that pass's stores issued). With several chunks per CTA, 2 is
the first chunk's, and 3, 6, 7 and 4 are the last one's. Prints, in us from the first CTA's
entry, the spread of each event over the CTAs, and the spread of each step's duration.

Reading it: with PDL, a CTA of the next launch that finds a free SM enters early and waits, so
the earliest entry can sit a whole kernel before the rest (the cluster tactic leaves 4 SMs
free). CTAs that got no work stamp their epilogue at setup time. Rows of CTAs beyond the last
launch's grid are stale, from an earlier, larger launch of the same process. CTA 0 also runs
the per-block trace (trace_sm90.py), which slows it by up to ~15%: it is left out of the spreads.
The last line gives the main loop's median by SM id mod 8. That tests whether SM placement
explains a spread; in record 2026-11-24-h200-epilogue/smrate/ it did not, and the requests
did.
Usage: python3 scripts/grid_timeline.py LOG
"""
import statistics
import sys

EVENTS = [(0, "entry"), (1, "setup done"), (2, "first data"), (3, "last block done"),
          (6, "epilogue barrier"), (7, "row factors done"), (8, "pass wg0 written"),
          (9, "pass wg1 added"), (10, "pass stored"), (4, "epilogue done"), (5, "exit")]
STEPS = [(0, 1, "entry -> setup done (PDL wait, plan)"),
         (1, 2, "setup -> first data (Q + first KV block)"),
         (2, 3, "first data -> last block done (main loop)"),
         (3, 6, "last block -> barrier (other warpgroup)"),
         (6, 4, "barrier -> stores issued"),
         (6, 7, "  barrier -> row factors (LSE, scale)"),
         (7, 8, "  factors -> wg0 rows written (narrow)"),
         (8, 9, "  wg0 written -> wg1 added (narrow)"),
         (9, 10, "  wg1 added -> rows stored (narrow)"),
         (10, 4, "  rows stored -> epilogue done (narrow)"),
         (3, 4, "last block -> epilogue done"),
         (4, 5, "epilogue -> exit (cluster merge)")]


def spread(values):
    v = sorted(values)
    q = lambda f: v[min(len(v) - 1, int(f * len(v)))]
    return f"min {v[0]:7.2f}  p10 {q(0.1):7.2f}  median {statistics.median(v):7.2f}  p90 {q(0.9):7.2f}  max {v[-1]:7.2f}"


def main(path):
    ctas = []
    for line in open(path):
        if line.startswith("G "):
            f = line.split()
            ctas.append((int(f[1]), int(f[2]), [int(x) for x in f[3:]] + [0] * 16))
    ctas = [c for c in ctas if c[0] != 0]  # CTA 0 carries the per-block trace
    if not ctas:
        print("no grid stamps")
        return
    t0 = min(c[2][0] for c in ctas)
    ticks = sorted({(t - t0) % 1000 for c in ctas for t in c[2] if t})
    print(f"CTAs stamped: {len(ctas)}; SMs: {len({c[1] for c in ctas})}; "
          f"span (first entry to last exit) {(max(c[2][5] for c in ctas) - t0) / 1e3:.2f} us; "
          f"distinct ns-within-us values {len(ticks)} (timer granularity check)")
    for e, name in EVENTS:
        vals = [(c[2][e] - t0) / 1e3 for c in ctas if c[2][e]]
        if vals:
            print(f"  at {name:16s} {spread(vals)}")
    for a, b, name in STEPS:
        vals = [(c[2][b] - c[2][a]) / 1e3 for c in ctas if c[2][a] and c[2][b]]
        if vals:
            print(f"  {name:44s} {spread(vals)}")
    by_position = {}
    for c in ctas:
        if c[2][2] and c[2][3]:
            by_position.setdefault(c[1] % 8, []).append((c[2][3] - c[2][2]) / 1e3)
    if by_position:
        print("  main loop median by SM id mod 8: " + "  ".join(
            f"{k}: {statistics.median(v):.1f}" for k, v in sorted(by_position.items())))


if __name__ == "__main__":
    main(sys.argv[1])
