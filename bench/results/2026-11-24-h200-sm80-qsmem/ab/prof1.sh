#!/bin/bash
# ncu of the sm80 decode kernel, h_q 128 b 64 L 4096: tactic 0 (one group) vs 2 (two groups).
OUT=${OUT:-/tmp/out}; R=$OUT/prof; mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH
for t in 0 2; do
  timeout 200 ncu --kernel-name regex:decode_kernel --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis_Tables --section LaunchStats \
    --metrics smsp__pcsamp_warps_issue_stalled_barrier,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,sm__cycles_elapsed.avg \
    .bin/mlakit bench --heads 128 --batch 64 --seq-len 4096 --backend sm80:$t --pdl --no-verify --replays 3 --warmup 1 > $R/ncu-$t.txt 2>&1
  echo "tactic $t rc $?"
done
tar czf $OUT/prof.tgz -C $OUT prof
for t in 0 2; do echo "=== $t"; grep -E "Duration|SM Frequency|Issued Ipc|Warp Cycles Per Issued|Stall|hmma|bank_conflicts|wavefronts|inst_executed|Shared Memory|No Eligible|Active Warps|Eligible Warps" $R/ncu-$t.txt | head -40; done
