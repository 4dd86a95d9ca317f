#!/bin/bash
# Role trace (clock stamps, CTA 0) + ncu source counters of the kRoles kernel, h_q 128 b 64 L 4096.
OUT=${OUT:-/tmp/out}; R=$OUT/tr1; mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH
for f in .bin/*.gz .bin/v/*.gz; do gunzip -f $f; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv > $R/device.txt
timeout 60 .bin/v/mlakit-trace bench --heads 128 --batch 64 --seq-len 4096 --backend sm80:0 --pdl --no-verify --replays 3 --warmup 1 > $R/trace.txt 2>&1
grep "^T " $R/trace.txt | head -130 > $R/t.txt; wc -l $R/t.txt
timeout 40 .bin/mlakit bench --pdl --no-verify --settle-ms 300 --heads 128 --batch 64 --seq-len 4096 --backend sm80:0 | grep sm80
timeout 240 ncu --kernel-name regex:decode_kernel --launch-skip 2 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --section SpeedOfLight --section SchedulerStats \
  --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,sm__cycles_elapsed.avg,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed -o $R/cur \
  .bin/mlakit bench --heads 128 --batch 64 --seq-len 4096 --backend sm80:0 --pdl --no-verify --replays 3 --warmup 1 > $R/ncu.log 2>&1
ncu -i $R/cur.ncu-rep --page source --csv --print-source sass > $R/src.csv 2>$R/src.err
ncu -i $R/cur.ncu-rep --page details --print-details all > $R/det.txt 2>&1
gzip $R/src.csv; rm -f $R/cur.ncu-rep
grep -E "Duration|Warp Cycles Per Issued|Issued Warp|Eligible Warps|hmma|wavefronts|inst_executed|SM Frequency" $R/det.txt | head -16
cat $R/device.txt
