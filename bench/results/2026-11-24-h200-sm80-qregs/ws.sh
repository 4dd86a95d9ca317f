#!/bin/bash
# 8 score warps (split-K pairs, setmaxnreg) vs the committed 4+8 kRoles: sm80 GPU tests, A/B.
OUT=${OUT:-/tmp/out}; R=$OUT/ws; mkdir -p $R
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 200 .bin/mlakit_gpu_tests --gtest_filter='Sm80*' --gtest_brief=1 > $R/gpu-tests-sm80.txt 2>&1
echo "sm80 tests rc $?: $(grep -E 'PASSED|FAILED|SKIPPED' $R/gpu-tests-sm80.txt | tr '\n' ' ')"
grep -E "roles|Failure" $R/gpu-tests-sm80.txt | head -12
timeout 120 .bin/mlakit-new bench --pdl --settle-ms 300 --heads 128,64 --batch 64,8 --seq-len 4096 --backend sm80:0 > $R/verify-new.txt 2>&1
echo "verify new rc $?: $(grep sm80 $R/verify-new.txt | awk '{printf "%s %s | ", $8, $NF}')"
for rep in 1 2; do
for v in old new; do
  timeout 60 .bin/mlakit-$v bench --pdl --no-verify --settle-ms 300 --heads 128,64 --batch 64,8 --seq-len 4096 --backend sm80:0 > $R/$v-$rep.txt 2>&1
  echo "$v: $(grep sm80 $R/$v-$rep.txt | awk '{printf "h%s/b%s %s  ", $2, $4, $8}')"
done
done
} 2>&1 | tee $R/summary.txt
tar czf $OUT/ws.tgz -C $OUT ws
