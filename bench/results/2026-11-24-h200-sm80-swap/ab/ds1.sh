#!/bin/bash
# Deferred swap: tests (d2), A/B base vs d2 (ahead 2) vs d3 (ahead 3), h_q 128 b 64 L 4096.
OUT=${OUT:-/tmp/out}; R=$OUT/ds1; mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH
for f in .bin/*.gz .bin/v/*.gz; do gunzip -f $f; done
timeout 200 .bin/v/mlakit_gpu_tests-d2 --gtest_brief=1 > $R/tests-d2.txt 2>&1; echo "tests d2 exit $?"; grep -E "PASSED|FAILED|SKIPPED" $R/tests-d2.txt | head -8
for rep in 1 2 3; do
for v in base d2 d3; do
  B=.bin/v/mlakit-$v; [ $v = base ] && B=.bin/mlakit
  timeout 40 $B bench --pdl --no-verify --settle-ms 300 --heads 128 --batch 64 --seq-len 4096 --backend sm80:0 > $R/$v-$rep.txt 2>&1
  echo "$v: $(grep sm80 $R/$v-$rep.txt | awk '{printf "h%s/b%s %s  ", $2, $4, $8}')"
done
done
for v in base d2; do
  B=.bin/v/mlakit-$v; [ $v = base ] && B=.bin/mlakit
  timeout 90 $B bench --pdl --settle-ms 200 --heads 64,128 --batch 1,8,64 --seq-len 4096 --backend sm80:0 > $R/$v-cases.txt 2>&1
  echo "$v cases: $(grep sm80 $R/$v-cases.txt | awk '{printf "h%s/b%s %s %s  ", $2, $4, $8, $NF}')"
done
