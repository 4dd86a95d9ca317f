#!/usr/bin/env bash
# The recorded GPU run: build, GPU tests, sanitizer, read bandwidth, autotuning of the standard
# grid for h_q 128, 64 and 16 x s_q 1, 2 (PDL on), and the whole reference grid (h_q 128, 64, 16 x
# s_q 1, 2) and its rows of variable lengths on each single backend and tactic and on auto.
# Usage on the GPU machine (no network; .deps carried): bench/run-device.sh OUTDIR
# Environment: HEADS, the h_q of the grid to tune and run (default "128 64 16"); CHECKS=0 skips
# the tests, sanitizers and bandwidth measurement (a second call on the same machine).
# Everything lands in OUTDIR/run/, packed at the end into OUTDIR/run.tgz (the device tool brings
# back only a few files per call).
set -uo pipefail
cd "$(dirname "$0")/.."
top=${1:?usage: bench/run-device.sh OUTDIR}
out=$top/run
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
scripts/device-build.sh build-gpu 90a >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
B=build-gpu/mlakit
ref=bench/reference/flashmla_h200.csv
heads=${HEADS:-128 64 16}
if [[ ${CHECKS:-1} != 0 ]]; then
  {
    echo "# $(date -u +%F) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
    ctest --test-dir build-gpu -L gpu 2>&1 | grep -E "tests passed|tests failed"
    scripts/sanitize.sh 2>&1 | grep -E "ERROR SUMMARY|RACECHECK SUMMARY"
    $B info --measure | tail -1
  } | tee "$out/summary.txt"
fi
for h in $heads; do
  for s in 1 2; do
    $B tune --heads "$h" --s-q "$s" --pdl --cache "$out/tune.json" >"$out/tune-h$h-s$s.txt" 2>&1
    tail -1 "$out/tune-h$h-s$s.txt"
  done
done
# Every tactic of both backends (sm90's narrow tile, tactics 3-5, up to 32 query rows: h_q 16).
backends_for() {
  local b=sm90:0,sm90:1,sm90:2
  [[ $1 -le 16 ]] && b=$b,sm90:3,sm90:4,sm90:5
  echo "$b,sm80:0,sm80:1,auto"
}
for h in $heads; do
  $B bench --grid standard --heads "$h" --s-q 1,2 --pdl --backend "$(backends_for "$h")" \
    --tune-cache "$out/tune.json" --reference "$ref" --json "$out/grid-h$h.json" >"$out/grid-h$h.txt" 2>&1
done
# The reference's rows of variable lengths (lengths in [L/8, 2L)), with their own bucket (max
# length 2L) tuned first.
for c in "128 1 64 4096" "16 1 128 8192" "128 2 32 8192"; do
  set -- $c
  [[ " $heads " == *" $1 "* ]] || continue
  $B tune --heads "$1" --s-q "$2" --batch "$3" --seq-len $(($4 * 2)) --pdl --cache "$out/tune.json" \
    >"$out/tune-var-$1-$2-$3-$4.txt" 2>&1
  $B bench --heads "$1" --s-q "$2" --batch "$3" --seq-len "$4" --var 1 --pdl \
    --backend "$(backends_for "$1")" --tune-cache "$out/tune.json" --reference "$ref" \
    --json "$out/var-$1-$2-$3-$4.json" 2>&1 | tail -5
done >>"$out/grid-var.txt"
python3 bench/vs_reference.py "$out"/grid-h*.json "$out"/var-*.json | tee "$out/vs-flashmla.txt" | tail -6
python3 bench/auto_vs_best.py "$out"/grid-h*.json "$out"/var-*.json | tee "$out/auto-vs-best.txt" | tail -1
tar czf "$top/run.tgz" -C "$top" run && rm -rf "$out"
