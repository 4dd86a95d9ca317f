#!/usr/bin/env bash
# Times two mlakit binaries side by side on the same machine: each bench argument set runs with
# binary A, then B, for ROUNDS rounds (interleaved, so that drift of the power state hits both),
# and the table of A / B per row (median over the rounds, tactic, check) is printed and written
# to OUTDIR/summary.txt, each run's JSON to OUTDIR/raw/. The way the twenty-sixth session compared a
# change against main (bench/results/2026-11-29-h200-sparse-producer-copies): carry both
# binaries (stripped, xz-compressed: about 8.5 MB each), unpack them on the GPU machine, run this.
# Usage: scripts/ab-bench.sh A B OUTDIR [ROUNDS] -- BENCH-ARGS [-- BENCH-ARGS ...]
# Example: scripts/ab-bench.sh /tmp/b/old /tmp/b/new $OUT/ab 2 -- --dtype fp8-blockwise \
#   --q-dtype bf16 --topk 2048 --heads 16 --batch 1,128 --seq-len 8192 --pdl --settle-ms 200
set -uo pipefail
if [[ $# -lt 5 ]]; then
  sed -n '2,11p' "$0" >&2
  exit 2
fi
a=$1 b=$2 out=$3
shift 3
rounds=1
if [[ $1 != -- ]]; then
  rounds=$1
  shift
fi
[[ $1 == -- ]] || { echo "expected -- before the bench arguments" >&2; exit 2; }
shift
sets=()
current=()
for arg in "$@"; do
  if [[ $arg == -- ]]; then
    sets+=("${current[*]}")
    current=()
  else
    current+=("$arg")
  fi
done
sets+=("${current[*]}")
mkdir -p "$out/raw"
for ((r = 1; r <= rounds; ++r)); do
  for ((s = 0; s < ${#sets[@]}; ++s)); do
    for side in A B; do
      bin=$a
      [[ $side == B ]] && bin=$b
      # shellcheck disable=SC2086  # each set is a list of words
      "$bin" bench ${sets[s]} --json "$out/raw/r${r}_s${s}_${side}.json" >"$out/raw/r${r}_s${s}_${side}.txt" 2>&1 ||
        echo "round $r set $s side $side: exit $? (see $out/raw/r${r}_s${s}_${side}.txt)" >&2
    done
  done
done
python3 - "$out" <<'PY' | tee "$out/summary.txt"
import glob, json, math, os, statistics, sys
out = sys.argv[1]
rows = {}
for f in sorted(glob.glob(os.path.join(out, "raw", "r*_s*_*.json"))):
    side = f.rsplit("_", 1)[1][0]
    for r in json.load(open(f))["results"]:
        key = (r["backend"], r["h_q"], r["s_q"], r["batch"], r["seq_len"], r.get("topk", 0),
               r.get("dtype", ""))
        rows.setdefault(key, {}).setdefault(side, []).append(r)
print("backend h_q s_q batch seq_len topk dtype | A us (tactic) | B us (tactic) | A / B | B check")
ratios = []
for key, d in sorted(rows.items()):
    if "A" not in d or "B" not in d:
        continue
    ta = statistics.median(r["time_us"] for r in d["A"])
    tb = statistics.median(r["time_us"] for r in d["B"])
    ratios.append(ta / tb)
    print(" ".join(str(k) for k in key),
          f"| {ta:.1f} ({d['A'][0]['tactic']}) | {tb:.1f} ({d['B'][0]['tactic']})",
          f"| {ta / tb:.3f} | {d['B'][-1]['check']}")
if ratios:
    g = math.exp(sum(map(math.log, ratios)) / len(ratios))
    print(f"geomean A / B {g:.4f} over {len(ratios)} rows (min {min(ratios):.3f}, max {max(ratios):.3f})")
PY
