#!/bin/bash
# ncu of the decode kernel, h_q 128 b 64 L 4096: new (8+8 setmaxnreg) vs old (4+8, q16).
OUT=${OUT:-/tmp/out}; R=$OUT/prof9; mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH
for v in new old; do
timeout 240 ncu --kernel-name regex:decode_kernel --launch-skip 2 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --section SpeedOfLight --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --metrics l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,sm__cycles_elapsed.avg,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed -o $R/$v \
  .bin/mlakit-$v bench --heads 128 --batch 64 --seq-len 4096 --backend sm80:0 --pdl --no-verify --replays 3 --warmup 1 > $R/ncu-$v.log 2>&1
ncu -i $R/$v.ncu-rep --page source --csv --print-source sass > $R/src-$v.csv 2>$R/src-$v.err
ncu -i $R/$v.ncu-rep --page details --print-details all > $R/det-$v.txt 2>&1
gzip $R/src-$v.csv; rm -f $R/$v.ncu-rep
echo "== $v"; grep -E "Duration|Warp Cycles Per Issued|Issued Warp|Eligible Warps|hmma|wavefronts|inst_executed|Shared Memory|L2 Hit|DRAM Throughput|Memory Throughput" $R/det-$v.txt | head -24
done
tar czf $OUT/prof9.tgz -C $OUT prof9
