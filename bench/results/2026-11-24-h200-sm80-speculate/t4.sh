#!/bin/bash
OUT=${OUT:-/tmp/out}; R=$OUT/main-tests; mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH
for f in .bin/*.gz; do gunzip -kf $f; chmod +x ${f%.gz}; done
T=.bin/mlakit_gpu_tests-new
{
  echo "# $(date -u +%F) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  timeout 240 $T --gtest_brief=1 > $R/gpu-tests.txt 2>&1; echo "gpu tests rc $?"
  grep -E "PASSED|FAILED|SKIPPED" $R/gpu-tests.txt | head
  timeout 100 compute-sanitizer --tool memcheck --error-exitcode 3 $T --gtest_filter='Sm80Pdl.InputsWritten*:Sm90Pdl.InputsWritten*' --gtest_brief=1 > $R/san-memcheck.txt 2>&1
  echo "== memcheck (exit $?)"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/san-memcheck.txt | head -3
} 2>&1 | tee $R/summary.txt
