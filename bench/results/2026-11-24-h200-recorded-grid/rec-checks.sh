#!/bin/bash
# Recorded run, part 1: GPU tests, compute-sanitizer (memcheck, racecheck: sm80 + sm90 sweeps;
# synccheck: sm90), read bandwidth. Binaries built on the CPU machine at the recorded commit.
OUT=${OUT:-/tmp/out}; R=$OUT/run; mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH
T=.bin/mlakit_gpu_tests
{
  echo "# $(date -u +%F) $(nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader)"
  timeout 240 $T --gtest_brief=1 > $R/gpu-tests.txt 2>&1; echo "gpu tests rc $?" >> $R/gpu-tests.txt
  grep -E "PASSED|FAILED|SKIPPED|rc" $R/gpu-tests.txt
  for tf in "memcheck Sm80Sanitize.*:Sm90Sanitize.*" "racecheck Sm80Sanitize.*:Sm90Sanitize.*" "synccheck Sm90Sanitize.*"; do
    set -- $tf
    timeout 200 compute-sanitizer --tool $1 --error-exitcode 3 $T --gtest_filter="$2" --gtest_brief=1 > $R/san-$1.txt 2>&1
    echo "== $1 $2 (exit $?)"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $R/san-$1.txt | head -5
  done
  timeout 60 .bin/mlakit info --measure | tail -2
} 2>&1 | tee $R/summary.txt
tar czf $OUT/run.tgz -C $OUT run
