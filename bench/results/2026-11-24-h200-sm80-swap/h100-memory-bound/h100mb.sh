#!/bin/bash
# H100: read stream and the memory-bound h_q 16 cases (issue 3), cd43d7b's build.
OUT=${OUT:-/tmp/out}; R=$OUT/h100mb; mkdir -p $R
for f in .bin/*.gz; do gunzip -f $f; done
echo "# $(date -u +%F) $(nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader)"
for rep in 1 2; do timeout 60 .bin/mlakit info --measure | tail -1; done
for rep in 1 2 3; do timeout 60 .bin/mlakit bench --pdl --no-verify --settle-ms 300 --heads 16 --batch 64 --seq-len 4096 --backend sm80:0 | grep sm80; done
timeout 120 .bin/mlakit bench --pdl --settle-ms 300 --heads 16 --batch 64,128 --seq-len 4096,8192 --backend sm80:0 --json $R/h16.json > $R/h16.txt 2>&1; echo "h16 rc $?"
grep sm80 $R/h16.txt
MLAKIT_TIMING_SHAPES=0 timeout 200 .bin/mlakit_gpu_tests --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_Breakdown*' > $R/bd.txt 2>&1
grep -E "h_q" $R/bd.txt
