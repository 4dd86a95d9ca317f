#!/bin/bash
OUT=${OUT:-/tmp/out}; R=$OUT/run; mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH
B=".bin/mlakit bench --pdl --no-verify --settle-ms 300"
for rep in 1 2; do
  $B --heads 128 --batch 64,8 --seq-len 4096 --backend sm80:0,sm80:2 > $R/ab-$rep.txt 2>&1
  grep sm80 $R/ab-$rep.txt
done
timeout 100 ncu --kernel-name regex:decode_kernel --launch-skip 2 --launch-count 1 \
    --metrics smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__thread_inst_executed_per_inst_executed.ratio,gpu__time_duration.sum \
    .bin/mlakit bench --heads 128 --batch 64 --seq-len 4096 --backend sm80:2 --pdl --no-verify --replays 3 --warmup 1 > $R/ncu.txt 2>&1
grep -E "inst_executed|hmma|duration" $R/ncu.txt
