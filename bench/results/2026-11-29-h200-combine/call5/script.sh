#!/bin/bash
# Session 31 call 5: ncu sections of the combine kernel (h_q 128 b 32 L 4096, e4m3, tactic 0),
# the old kernel (variant 0) and combine_rows (variant 1).
set -u
mkdir -p /tmp/b $OUT/w
W=$OUT/w
for f in mlakit; do xz -dc .peers/ab/$f.xz > /tmp/b/$f; chmod +x /tmp/b/$f; done
for v in 0 1; do
  MLAKIT_COMBINE_VARIANT=$v timeout 90 ncu --cache-control none --clock-control none -k regex:combine -s 1 -c 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section LaunchStats --section Occupancy --section SchedulerStats \
    --metrics lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum,lts__t_sector_hit_rate.pct,l1tex__t_bytes.sum \
    /tmp/b/mlakit bench --pdl --replays 1 --warmup 0 --no-verify --dtype fp8 --q-dtype fp8 --heads 128 --batch 32 --seq-len 4096 --backend sm90:0 > $W/ncu_v$v.txt 2>&1
  echo "== v$v"; grep -E "Duration|Throughput|Hit Rate|Achieved Occupancy|Theoretical Occupancy|Registers|Warp Cycles Per Issued|Issue Slots|No Eligible|Stall|lts__|l1tex__t_bytes|Mem Busy|Max Bandwidth|L2 Compression|Block Limit" $W/ncu_v$v.txt | head -40
done
tar czf $OUT/all.tgz -C $OUT w
