#!/bin/bash
OUT=${OUT:-/tmp/out}; R=$OUT/bd1; mkdir -p $R
for f in .bin/*.gz; do gunzip -f $f; done
echo "# $(nvidia-smi --query-gpu=name --format=csv,noheader)"
MLAKIT_TIMING_SHAPES=0 timeout 200 .bin/mlakit_gpu_tests --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_Breakdown*' > $R/bd.txt 2>&1
grep -E "h_q|SMs" $R/bd.txt
