#!/bin/bash
# H100 check of the sm80 memory-bound cases (issue 3) and h_q 128 at the commit.
OUT=${OUT:-/tmp/out}; R=$OUT/h100; mkdir -p $R
{
  echo "# $(date -u +%F) $(nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader)"
  timeout 60 .bin/mlakit info --measure | tail -1
  .bin/mlakit bench --pdl --settle-ms 300 --heads 16 --batch 64,128 --seq-len 4096,8192 --backend sm80:0,sm80:1 --json $R/h16.json > $R/h16.txt 2>&1; echo "h16 rc $?"
  .bin/mlakit bench --pdl --settle-ms 300 --heads 128 --batch 1,64 --seq-len 4096 --backend sm80:0,sm80:1 --json $R/h128.json > $R/h128.txt 2>&1; echo "h128 rc $?"
  grep sm80 $R/h16.txt $R/h128.txt
} 2>&1 | tee $R/summary.txt
