#!/bin/bash
# PC sampling (stall reason per SASS instruction) of one launch: FlashMLA rebuilt and the pair patch.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
MET="--metrics smsp__pcsamp_sample_count,smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_wait,smsp__pcsamp_warps_issue_stalled_gmma,smsp__pcsamp_warps_issue_stalled_math_pipe_throttle,smsp__pcsamp_warps_issue_stalled_selected,smsp__pcsamp_warps_issue_stalled_branch_resolving,smsp__pcsamp_warps_issue_stalled_no_instructions,smsp__pcsamp_warps_issue_stalled_dispatch_stall,smsp__pcsamp_warps_issue_stalled_short_scoreboard"
timeout 300 ncu --clock-control none --launch-skip 10 --launch-count 1 -k regex:flash_fwd_splitkv_mla_kernel --page source --print-source sass --csv $MET .bin/fmla_bench38 128 64 4096 0.05 > $OUT/pc-fmla.csv 2>&1; echo fmla rc $?
timeout 300 ncu --clock-control none --launch-skip 10 --launch-count 1 -k regex:decode_kernel --page source --print-source sass --csv $MET .bin/mlakit-pairs bench --heads 128 --batch 64 --seq-len 4096 --pdl --no-verify --backend sm90:6 --replays 1 --warmup 1 > $OUT/pc-pairs.csv 2>&1; echo pairs rc $?
timeout 300 ncu --clock-control none --launch-skip 10 --launch-count 1 -k regex:decode_kernel --page source --print-source sass --csv $MET .bin/mlakit bench --heads 128 --batch 64 --seq-len 4096 --pdl --no-verify --backend sm90:0 --replays 1 --warmup 1 > $OUT/pc-main.csv 2>&1; echo main rc $?
wc -l $OUT/pc-*.csv
