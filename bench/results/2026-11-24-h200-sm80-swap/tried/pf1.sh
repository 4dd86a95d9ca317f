#!/bin/bash
# Plain loop: the next tile's copy issued before the wait for the current one (pf) vs 0d6b276 (base).
OUT=${OUT:-/tmp/out}; R=$OUT/pf1; mkdir -p $R
for f in .bin/*.gz .bin/v/*.gz; do gunzip -f $f; done
echo "# $(nvidia-smi --query-gpu=name --format=csv,noheader)"
timeout 240 .bin/v/mlakit_gpu_tests-pf --gtest_brief=1 > $R/tests-pf.txt 2>&1; echo "tests pf exit $?"; grep -E "PASSED|FAILED|SKIPPED" $R/tests-pf.txt | head -8
timeout 60 .bin/mlakit info --measure | tail -1
for rep in 1 2; do
for v in base pf; do
  B=.bin/v/mlakit-$v; [ $v = base ] && B=.bin/mlakit
  { timeout 60 $B bench --pdl --no-verify --settle-ms 300 --heads 16 --batch 64,128,8,1 --seq-len 4096 --backend sm80:0
    timeout 60 $B bench --pdl --no-verify --settle-ms 300 --heads 16 --batch 64 --seq-len 8192 --backend sm80:0
    timeout 60 $B bench --pdl --no-verify --settle-ms 300 --heads 32 --batch 64,8 --seq-len 4096 --backend sm80:0
    timeout 60 $B bench --pdl --no-verify --settle-ms 300 --heads 64,128 --batch 64,8 --seq-len 4096 --backend sm80:2; } > $R/$v-$rep.txt 2>&1
  echo "$v: $(grep sm80 $R/$v-$rep.txt | awk '{printf "h%s/b%s/L%s %s  ", $2, $4, $5, $8}')"
done
done
timeout 120 .bin/v/mlakit-pf bench --pdl --settle-ms 300 --heads 16 --batch 64,128 --seq-len 4096,8192 --backend sm80:0,sm80:1 > $R/pf-h16-verified.txt 2>&1
echo "pf verified: $(grep sm80 $R/pf-h16-verified.txt | awk '{printf "%s h%s/b%s/L%s %s %s %s  ", $1, $2, $4, $5, $8, $9, $NF}')"
