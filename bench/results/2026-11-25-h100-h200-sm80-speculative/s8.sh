#!/bin/bash
OUT=${OUT:-/tmp/out}; R=$OUT/head; mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH
{
  echo "# $(date -u '+%F %T') $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  scripts/device-build.sh build-gpu > $R/build.txt 2>&1; echo "build rc $?"
  (cd build-gpu && timeout 240 ctest -L gpu > $R/ctest-gpu.txt 2>&1); echo "ctest -L gpu rc $?"
  grep -E "tests passed|tests failed|Total Test" $R/ctest-gpu.txt
  timeout 120 scripts/sanitize.sh build-gpu > $R/sanitize.txt 2>&1; echo "sanitize rc $?"
  grep -E "^==|SUMMARY" $R/sanitize.txt
  timeout 60 build-gpu/mlakit bench --pdl --settle-ms 300 --heads 16 --batch 64 --seq-len 4096 --backend sm80 > $R/bench.txt 2>&1
  grep '^sm80' $R/bench.txt
} 2>&1 | tee $R/summary.txt
rm -f $R/build.txt
