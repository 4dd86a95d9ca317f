#!/bin/bash
# Grouped 64-row tile (sm80 tactics 2, 3): tests, then A/B against tactics 0, 1.
OUT=${OUT:-/tmp/out}; R=$OUT/run; mkdir -p $R
T=.bin/mlakit_gpu_tests
{
  echo "# $(date -u +%F) $(nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader)"
  timeout 200 $T --gtest_filter='Sm80*:*GraphPdl*:*Graph*' --gtest_brief=1 > $R/gpu-tests.txt 2>&1; echo "gpu tests rc $?"
  grep -E "PASSED|FAILED|SKIPPED" $R/gpu-tests.txt | head -20
  B=".bin/mlakit bench --pdl --no-verify --settle-ms 300"
  for rep in 1 2; do
    $B --heads 128 --batch 64,8,1 --seq-len 4096 --backend sm80:0,sm80:2,sm80:1,sm80:3 --json $R/ab-h128-$rep.json > $R/ab-h128-$rep.txt 2>&1
    $B --heads 128 --batch 32 --seq-len 8192 --s-q 1,2 --backend sm80:0,sm80:2 --json $R/ab-h128b-$rep.json > $R/ab-h128b-$rep.txt 2>&1
    $B --heads 64 --batch 64 --seq-len 4096 --backend sm80:0,sm80:2 --json $R/ab-h64-$rep.json > $R/ab-h64-$rep.txt 2>&1
  done
  .bin/mlakit bench --heads 128 --batch 64 --seq-len 4096 --var 0,1 --backend sm80:2,sm80:3 --pdl > $R/verify.txt 2>&1; echo "verify rc $?"
  for f in $R/ab-*.txt $R/verify.txt; do echo "== $f"; grep -E "sm80" $f | head -20; done
} 2>&1 | tee $R/summary.txt
tar czf $OUT/run.tgz -C $OUT run
