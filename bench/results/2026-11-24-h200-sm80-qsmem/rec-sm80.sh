#!/bin/bash
# Recorded run of the sm80 backend at the commit: GPU tests, compute-sanitizer (memcheck,
# racecheck) on the sm80 sanitize sweep, read stream, and the sm80 cases of issue 3 (verified,
# settled 300 ms, PDL) with the standard grid at h_q 128 against the reference CSV.
OUT=${OUT:-/tmp/out}; R=$OUT/run; mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH
T=.bin/mlakit_gpu_tests
{
  echo "# $(date -u +%F) $(nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader)"
  timeout 240 $T --gtest_brief=1 > $R/gpu-tests.txt 2>&1; echo "gpu tests rc $?"
  grep -E "PASSED|FAILED|SKIPPED" $R/gpu-tests.txt | head
  for tool in memcheck racecheck; do
    timeout 200 compute-sanitizer --tool $tool --error-exitcode 3 $T --gtest_filter='Sm80Sanitize.*' --gtest_brief=1 > $R/san-$tool.txt 2>&1
    echo "== $tool (exit $?)"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $R/san-$tool.txt | head -3
  done
  timeout 60 .bin/mlakit info --measure | tail -2
  .bin/mlakit bench --pdl --settle-ms 300 --heads 16,64,128 --batch 1,8,64 --seq-len 4096 --backend sm80:0,sm80:1 --json $R/cases.json > $R/cases.txt 2>&1; echo "cases rc $?"
  .bin/mlakit bench --pdl --no-verify --settle-ms 300 --grid standard --heads 128 --s-q 1 --backend sm80:0,sm80:1 --reference bench/reference/flashmla_h200.csv --json $R/grid-h128.json > $R/grid-h128.txt 2>&1; echo "grid rc $?"
  grep sm80 $R/cases.txt
} 2>&1 | tee $R/summary.txt
tar czf $OUT/run.tgz -C $OUT run
