#!/bin/bash
# H100 check on the recorded commit: GPU tests, read stream, and the reference grid's s_q 1 rows
# for h_q 128 and 16 on every tactic of sm90 and sm80, settled 300 ms, PDL on, verified.
OUT=${OUT:-/tmp/out}; R=$OUT/h100; mkdir -p $R
{
  echo "# $(date -u +%F) $(nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader)"
  timeout 240 .bin/mlakit_gpu_tests --gtest_brief=1 > $R/gpu-tests.txt 2>&1; echo "gpu tests rc $?" >> $R/gpu-tests.txt
  grep -E "PASSED|FAILED|SKIPPED|rc" $R/gpu-tests.txt
  timeout 60 .bin/mlakit info --measure | tail -1
} 2>&1 | tee $R/summary.txt
timeout 200 .bin/mlakit bench --grid standard --heads 16 --s-q 1 --pdl --settle-ms 300 \
  --backend sm90:0,sm90:2,sm90:3,sm90:5,sm80:0,sm80:1 --json $R/grid-h16.json > $R/grid-h16.txt 2>&1; echo "h16 rc $?"
timeout 200 .bin/mlakit bench --grid standard --heads 128 --s-q 1 --pdl --settle-ms 300 \
  --backend sm90:0,sm90:2,sm80:0,sm80:1 --json $R/grid-h128.json > $R/grid-h128.txt 2>&1; echo "h128 rc $?"
tar czf $OUT/h100.tgz -C $OUT h100
grep -c " ok " $R/grid-h*.txt
awk '$3==1 && ($4==64||$4==128||$4==1) && ($5==4096||$5==8192) {print $1,$2,$4,$5,$8,$9,$12,$13}' $R/grid-h16.txt $R/grid-h128.txt
