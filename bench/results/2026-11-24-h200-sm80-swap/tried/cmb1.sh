#!/bin/bash
# Combine: the first partial outputs loaded before the LSE pass (cmb) vs fc48920 (base).
OUT=${OUT:-/tmp/out}; R=$OUT/cmb1; mkdir -p $R
for f in .bin/*.gz .bin/v/*.gz; do gunzip -f $f; done
echo "# $(nvidia-smi --query-gpu=name --format=csv,noheader)"
timeout 240 .bin/v/mlakit_gpu_tests-cmb --gtest_brief=1 > $R/tests-cmb.txt 2>&1; echo "tests cmb exit $?"; grep -E "PASSED|FAILED|SKIPPED" $R/tests-cmb.txt | head -8
timeout 60 .bin/mlakit info --measure | tail -1
for rep in 1 2 3; do
for v in base cmb; do
  B=.bin/v/mlakit-$v; [ $v = base ] && B=.bin/mlakit
  { timeout 60 $B bench --pdl --no-verify --settle-ms 300 --heads 16 --batch 64,128,8,1 --seq-len 4096 --backend sm80:0
    timeout 60 $B bench --pdl --no-verify --settle-ms 300 --heads 128 --batch 8,1 --seq-len 4096 --backend sm80:0
    timeout 60 $B bench --pdl --no-verify --settle-ms 300 --heads 16,128 --batch 64,8,1 --seq-len 4096 --backend sm90; } > $R/$v-$rep.txt 2>&1
  echo "$v: $(grep sm[89]0 $R/$v-$rep.txt | awk '{printf "%s h%s/b%s %s  ", substr($1,1,4), $2, $4, $8}')"
done
done
MLAKIT_TIMING_SHAPES=0 timeout 200 .bin/v/mlakit_gpu_tests-cmb --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_Breakdown*' > $R/bd-cmb.txt 2>&1
grep -E "h_q" $R/bd-cmb.txt | head -1
timeout 120 .bin/v/mlakit-cmb bench --pdl --settle-ms 300 --heads 16 --batch 64,128 --seq-len 4096,8192 --backend sm80:0 > $R/cmb-h16-verified.txt 2>&1
echo "cmb verified: $(grep sm80 $R/cmb-h16-verified.txt | awk '{printf "h%s/b%s/L%s %s %s %s  ", $2, $4, $5, $8, $9, $NF}')"
