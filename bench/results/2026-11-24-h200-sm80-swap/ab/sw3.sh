#!/bin/bash
OUT=${OUT:-/tmp/out}; R=$OUT/sw3; mkdir -p $R
for f in .bin/*.gz .bin/v/*.gz; do gunzip -f $f; done
timeout 200 .bin/v/mlakit_gpu_tests-sm4 --gtest_brief=1 > $R/tests-sm4.txt 2>&1; echo "tests sm4 exit $?"; grep -E "PASSED|FAILED|SKIPPED" $R/tests-sm4.txt | head -8
for rep in 1 2 3; do
for v in base sm4 r152 r152a4; do
  B=.bin/v/mlakit-$v; [ $v = base ] && B=.bin/mlakit
  timeout 40 $B bench --pdl --no-verify --settle-ms 300 --heads 128 --batch 64 --seq-len 4096 --backend sm80:0 > $R/$v-$rep.txt 2>&1
  echo "$v: $(grep sm80 $R/$v-$rep.txt | awk '{printf "h%s/b%s %s  ", $2, $4, $8}')"
done
done
