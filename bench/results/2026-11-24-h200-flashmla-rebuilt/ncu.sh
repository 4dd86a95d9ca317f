#!/bin/bash
# ncu (clocks left alone) on one decode launch of FlashMLA (rebuilt), main (sm90:0) and the pair
# patch (sm90:6): h_q 128 b 64 L 4096.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section InstructionStats --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy"
timeout 200 ncu --clock-control none --launch-skip 10 --launch-count 1 -k regex:flash_fwd_splitkv_mla_kernel $S .bin/fmla_bench38 128 64 4096 0.05 > $OUT/ncu-fmla.txt 2>&1; echo fmla rc $?
timeout 200 ncu --clock-control none --launch-skip 10 --launch-count 1 -k regex:decode_kernel $S .bin/mlakit bench --heads 128 --batch 64 --seq-len 4096 --pdl --no-verify --backend sm90:0 --replays 1 --warmup 1 > $OUT/ncu-main.txt 2>&1; echo main rc $?
timeout 200 ncu --clock-control none --launch-skip 10 --launch-count 1 -k regex:decode $S .bin/mlakit-pairs bench --heads 128 --batch 64 --seq-len 4096 --pdl --no-verify --backend sm90:6 --replays 1 --warmup 1 > $OUT/ncu-pairs.txt 2>&1; echo pairs rc $?
for f in fmla main pairs; do echo "=== $f"; grep -E "Duration|SM Frequency|Elapsed Cycles|Executed Ipc Active|Issue Slots Busy|Executed Instructions  |Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|L2 Hit Rate|Registers Per|Threads  |No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Avg. Executed Instructions Per Scheduler" $OUT/ncu-$f.txt | head -30; done
