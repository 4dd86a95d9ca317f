#!/bin/bash
OUT=${OUT:-/tmp/out}; R=$OUT/sw4; mkdir -p $R
for f in .bin/*.gz .bin/v/*.gz; do gunzip -f $f; done
timeout 200 .bin/v/mlakit_gpu_tests-r152 --gtest_brief=1 > $R/tests-r152.txt 2>&1; echo "tests r152 exit $?"; grep -E "PASSED|FAILED|SKIPPED" $R/tests-r152.txt | head -8
for rep in 1 2 3; do
for v in base r152 rsm3 rsm7 rq6; do
  B=.bin/v/mlakit-$v; [ $v = base ] && B=.bin/mlakit
  timeout 40 $B bench --pdl --no-verify --settle-ms 300 --heads 128 --batch 64 --seq-len 4096 --backend sm80:0 > $R/$v-$rep.txt 2>&1
  echo "$v: $(grep sm80 $R/$v-$rep.txt | awk '{printf "h%s/b%s %s  ", $2, $4, $8}')"
done
done
for v in base r152; do
  B=.bin/v/mlakit-$v; [ $v = base ] && B=.bin/mlakit
  timeout 90 $B bench --pdl --settle-ms 300 --heads 64,128 --batch 1,8,64 --seq-len 4096 --backend sm80:0,sm80:1 > $R/$v-cases.txt 2>&1
  echo "$v cases: $(grep sm80 $R/$v-cases.txt | awk '{printf "%s h%s/b%s %s %s  ", $1, $2, $4, $8, $NF}')"
done
