#!/bin/bash
# TileSlot advanced per tile (no division): old 4+8 (q16) +-ts, new 8+8 +-ts. Tests of newts first.
OUT=${OUT:-/tmp/out}; R=$OUT/ts; mkdir -p $R
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 200 .bin/mlakit_gpu_tests --gtest_filter='Sm80*' --gtest_brief=1 > $R/gpu-tests-sm80.txt 2>&1
echo "sm80 tests rc $?: $(grep -E 'PASSED|FAILED|SKIPPED' $R/gpu-tests-sm80.txt | tr '\n' ' ')"
for rep in 1 2; do
for v in old oldts new newts; do
  timeout 60 .bin/mlakit-$v bench --pdl --no-verify --settle-ms 300 --heads 128,64 --batch 64,8,1 --seq-len 4096 --backend sm80:0 > $R/$v-$rep.txt 2>&1
  echo "$v: $(grep sm80 $R/$v-$rep.txt | awk '{printf "h%s/b%s %s  ", $2, $4, $8}')"
done
done
} 2>&1 | tee $R/summary.txt
tar czf $OUT/ts.tgz -C $OUT ts
