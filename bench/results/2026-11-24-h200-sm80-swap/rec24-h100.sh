#!/bin/bash
# H100 check at cd43d7b (item 24): GPU tests, read stream, the memory-bound h_q 16 cases and
# h_q 128 (issue 3), and tactics 0 (kRoles) vs 2 (plain loop) at h_q 64 / 128.
OUT=${OUT:-/tmp/out}; R=$OUT/h100; mkdir -p $R
for f in .bin/*.gz; do gunzip -f $f; done
export PATH=/usr/local/cuda/bin:$PATH
{
  echo "# $(date -u +%F) $(nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader)"
  timeout 240 .bin/mlakit_gpu_tests --gtest_brief=1 > $R/gpu-tests.txt 2>&1; echo "gpu tests rc $?"
  grep -E "PASSED|FAILED|SKIPPED" $R/gpu-tests.txt | head
  timeout 60 .bin/mlakit info --measure | tail -1
  for rep in 1 2; do timeout 60 .bin/mlakit bench --pdl --no-verify --settle-ms 300 --heads 16 --batch 64 --seq-len 4096 --backend sm80:0 | grep sm80; done
  timeout 120 .bin/mlakit bench --pdl --settle-ms 300 --heads 16 --batch 64,128 --seq-len 4096,8192 --backend sm80:0,sm80:1 --json $R/h16.json > $R/h16.txt 2>&1; echo "h16 rc $?"
  timeout 120 .bin/mlakit bench --pdl --settle-ms 300 --heads 128 --batch 1,64 --seq-len 4096 --backend sm80:0,sm80:1,sm80:2 --json $R/h128.json > $R/h128.txt 2>&1; echo "h128 rc $?"
  timeout 120 .bin/mlakit bench --pdl --no-verify --settle-ms 300 --heads 64 --batch 1,8,64 --seq-len 4096 --backend sm80:0,sm80:2 > $R/h64.txt 2>&1; echo "h64 rc $?"
  grep sm80 $R/h16.txt $R/h128.txt $R/h64.txt
} 2>&1 | tee $R/summary.txt
tar czf $OUT/h100.tgz -C $OUT h100
