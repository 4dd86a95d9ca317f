#!/bin/bash
# 64-row tile variants: a = main (scores 4 x 2, 12 Q k-steps in registers), b = 4 x 2 with Q from
# shared memory, c = 2 x 4 (32 rows per score warp) with Q from shared memory. GPU tests on c.
OUT=${OUT:-/tmp/out}; R=$OUT/run; mkdir -p $R
T=.bin/mlakit_gpu_tests
timeout 150 $T --gtest_filter='Sm80*' --gtest_brief=1 > $R/gpu-tests.txt 2>&1; echo "gpu tests rc $?"
grep -E "PASSED|FAILED|SKIPPED" $R/gpu-tests.txt | head
for rep in 1 2; do
  for v in a b c; do
    .bin/mlakit-$v bench --pdl --no-verify --settle-ms 300 --heads 128,64 --batch 64,8,1 --seq-len 4096 --backend sm80:0 > $R/$v-$rep.txt 2>&1
    .bin/mlakit-$v bench --pdl --no-verify --settle-ms 300 --heads 128 --s-q 2 --batch 32 --seq-len 4096 --backend sm80:0 >> $R/$v-$rep.txt 2>&1
    .bin/mlakit-$v bench --pdl --no-verify --settle-ms 300 --heads 16 --batch 64 --seq-len 4096 --backend sm80:0 >> $R/$v-$rep.txt 2>&1
    echo "$v rep $rep: $(grep sm80 $R/$v-$rep.txt | awk '{printf "h%s/s%s/b%s %s  ", $2, $3, $4, $8}')"
  done
done
.bin/mlakit-c bench --pdl --heads 128 --batch 64 --seq-len 4096 --var 0,1 --backend sm80:0,sm80:1 > $R/verify.txt 2>&1; echo "verify rc $?"; grep sm80 $R/verify.txt
