#!/usr/bin/env bash
# A quick check of a kernel change on the GPU machine: builds, runs the Sm90 GPU tests, and
# benches the sm90 issue's target cases (and two more) against the FlashMLA reference. Not a
# recorded run (that is bench/run-device.sh).
# Usage on the GPU machine (.deps carried): scripts/quick-bench.sh OUTDIR
# Environment: BK, the backends to bench (default sm90:0).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/quick-bench.sh OUTDIR}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
scripts/device-build.sh build-gpu 90a >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
build-gpu/tests/mlakit_gpu_tests --gtest_filter='Sm90*' >"$out/sm90tests.log" 2>&1
grep -E "PASSED|FAILED" "$out/sm90tests.log" | head -20
for c in "128 1 128 8192" "128 2 32 8192" "16 1 128 8192" "16 1 32 4096" "128 1 8 4096" \
  "128 1 1 4096" "128 1 64 4096" "64 1 64 8192"; do
  set -- $c
  build-gpu/mlakit bench --heads "$1" --s-q "$2" --batch "$3" --seq-len "$4" --pdl \
    --backend "${BK:-sm90:0}" --reference bench/reference/flashmla_h200.csv 2>&1 | grep -E "^(sm|auto)"
done
