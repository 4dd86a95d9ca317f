#!/bin/bash
# sm80 roles loop: 4 score warps x 16 rows (mlakit) vs 2 x 32 rows, ahead 3 / 2; tests on the 2 x 32 (ahead 2) build.
OUT=${OUT:-/tmp/out}; R=$OUT/run11; mkdir -p $R
export MLAKIT_SM80_M64=roles
T=.bin/mlakit_gpu_tests
{
timeout 200 $T --gtest_filter='Sm80.Sweep:Sm80.Edges:Sm80Sanitize.*:Sm80Graph*:Sm80Pdl*' --gtest_brief=1 > $R/gpu-tests.txt 2>&1; echo "gpu tests rc $?"
grep -E "PASSED|FAILED|SKIPPED" $R/gpu-tests.txt | head
for rep in 1 2; do
for v in s4 s2a3 s2a2; do
  B=.bin/mlakit-$v; [ $v = s4 ] && B=.bin/mlakit
  timeout 60 $B bench --pdl --no-verify --settle-ms 300 --heads 128,64 --batch 64,8 --seq-len 4096 --backend sm80:0 > $R/$v-$rep.txt 2>&1
  timeout 60 $B bench --pdl --no-verify --settle-ms 300 --heads 128 --s-q 2 --batch 32 --seq-len 4096 --backend sm80:0 >> $R/$v-$rep.txt 2>&1
  echo "$v: $(grep sm80 $R/$v-$rep.txt | awk '{printf "h%s/s%s/b%s %s  ", $2, $3, $4, $8}')"
done
done
for v in s2a3; do
timeout 60 .bin/mlakit-$v bench --pdl --heads 128,64 --s-q 1,2 --batch 64 --seq-len 4096 --var 0,1 --backend sm80:0,sm80:1 > $R/verify-$v.txt 2>&1; echo "verify $v rc $?"; grep -c " ok " $R/verify-$v.txt; grep FAIL $R/verify-$v.txt
done
} 2>&1 | tee $R/summary.txt
tar czf $OUT/run11.tgz -C $OUT run11
