#!/bin/bash
# PC sampling (stall reason per SASS instruction) of one narrow-tile launch, h_q 16 b 32 L 4096, tactic 5.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
MET="--metrics smsp__pcsamp_sample_count,smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_wait,smsp__pcsamp_warps_issue_stalled_gmma,smsp__pcsamp_warps_issue_stalled_math_pipe_throttle,smsp__pcsamp_warps_issue_stalled_selected,smsp__pcsamp_warps_issue_stalled_branch_resolving,smsp__pcsamp_warps_issue_stalled_no_instructions,smsp__pcsamp_warps_issue_stalled_dispatch_stall,smsp__pcsamp_warps_issue_stalled_short_scoreboard,smsp__pcsamp_warps_issue_stalled_lg_throttle,smsp__pcsamp_warps_issue_stalled_mio_throttle,smsp__pcsamp_warps_issue_stalled_drain,smsp__pcsamp_warps_issue_stalled_membar,smsp__pcsamp_warps_issue_stalled_sleeping"
timeout 300 ncu --clock-control none --launch-skip 10 --launch-count 1 -k regex:decode_kernel --page source --print-source sass --csv $MET .bin/mlakit bench --heads 16 --batch 32 --seq-len 4096 --pdl --no-verify --backend sm90:5 --replays 1 --warmup 1 > $OUT/pc-narrow.csv 2>&1; echo rc $?
gzip -k $OUT/pc-narrow.csv; rm $OUT/pc-narrow.csv
ls -la $OUT
