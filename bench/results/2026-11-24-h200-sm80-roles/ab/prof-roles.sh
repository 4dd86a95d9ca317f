#!/bin/bash
# ncu source counters of the sm80 roles loop, h_q 128 b 64 L 4096.
OUT=${OUT:-/tmp/out}; R=$OUT/prof8; mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH
export MLAKIT_SM80_M64=roles
timeout 200 ncu --kernel-name regex:decode_kernel --launch-skip 2 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --section SpeedOfLight --section SchedulerStats --section ComputeWorkloadAnalysis \
  --metrics l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,sm__cycles_elapsed.avg -o $R/roles \
  .bin/mlakit bench --heads 128 --batch 64 --seq-len 4096 --backend sm80:0 --pdl --no-verify --replays 3 --warmup 1 > $R/ncu.log 2>&1
ncu -i $R/roles.ncu-rep --page source --csv --print-source sass > $R/src.csv 2>$R/src.err; echo "src rc $?"
ncu -i $R/roles.ncu-rep --page details --print-details all > $R/det.txt 2>&1
gzip $R/src.csv; rm -f $R/roles.ncu-rep
grep -E "Duration|Warp Cycles Per Issued|Stall |Issued Warp|Eligible Warps|hmma|wavefronts|inst_executed|cycles_elapsed|Tensor" $R/det.txt | head -40
tar czf $OUT/prof8.tgz -C $OUT prof8
