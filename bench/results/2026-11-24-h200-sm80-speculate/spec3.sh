#!/bin/bash
OUT=${OUT:-/tmp/out}; R=$OUT/ab3; mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH
for f in .bin/*.gz; do gunzip -kf $f; chmod +x ${f%.gz}; done
{
  echo "# $(date -u +%F) $(nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader)"
  timeout 120 .bin/mlakit_gpu_tests-new --gtest_filter='Sm80*:Sm90Pdl*' --gtest_brief=1 > $R/gpu-tests.txt 2>&1; echo "sm80 gpu tests rc $?"
  grep -E "PASSED|FAILED|SKIPPED" $R/gpu-tests.txt | head -3
  for rep in 1 2 3; do for v in old new new2; do
    B=.bin/mlakit; [ $v != old ] && B=.bin/mlakit-$v
    { timeout 100 $B bench --pdl --no-verify --settle-ms 300 --heads 16 --batch 1,8,64,128 --seq-len 4096 --backend sm80:0
      timeout 60 $B bench --pdl --no-verify --settle-ms 300 --heads 16 --batch 64 --var 1 --seq-len 4096 --backend sm80:0
      timeout 100 $B bench --pdl --no-verify --settle-ms 300 --heads 32,128 --batch 1 --seq-len 4096 --backend sm80:0; } > $R/ab-$v-$rep.txt 2>&1
    echo "$v $rep: $(grep '^sm80' $R/ab-$v-$rep.txt | awk '{printf "h%s/b%s/v%s %s  ", $2, $4, $6, $8}')"
  done; done
} 2>&1 | tee $R/summary.txt
