#!/bin/bash
# In-kernel merge (merge build) and merge + speculative plan (spec build) vs main (mlakit).
OUT=${OUT:-/tmp/out}; R=$OUT/run; mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH
for f in .bin/mlakit.gz .bin/mlakit-merge.gz .bin/mlakit-spec.gz .bin/tests-merge.gz .bin/tests-spec.gz; do gunzip -kf $f; chmod +x ${f%.gz}; done
{
  echo "# $(date -u +%F) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  timeout 200 .bin/tests-spec --gtest_brief=1 > $R/tests-spec.txt 2>&1; echo "spec gpu tests rc $?"
  grep -E "PASSED|FAILED|SKIPPED" $R/tests-spec.txt | head -20
  timeout 100 .bin/tests-merge --gtest_brief=1 --gtest_filter='Sm80*:-Sm80Timing*' > $R/tests-merge.txt 2>&1; echo "merge sm80 tests rc $?"
  grep -E "PASSED|FAILED|SKIPPED" $R/tests-merge.txt | head -20
  timeout 30 .bin/mlakit info --measure | tail -1
  for rep in 1 2; do for v in mlakit mlakit-merge mlakit-spec; do
    B=.bin/$v
    { timeout 100 $B bench --pdl --no-verify --settle-ms 300 --heads 16 --batch 8,32,64,128 --seq-len 4096 --backend sm80:0,sm80:4
      timeout 60 $B bench --pdl --no-verify --settle-ms 300 --heads 16 --batch 64 --var 1 --seq-len 4096 --backend sm80:0; } > $R/ab-$v-$rep.txt 2>&1
    echo "$v $rep: $(grep '^sm80' $R/ab-$v-$rep.txt | awk '{printf "%s/h%s/b%s/v%s %s  ", $1, $2, $4, $6, $8}')"
  done; done
} 2>&1 | tee $R/summary.txt
