#!/bin/bash
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 300 ncu --clock-control none --launch-skip 10 --launch-count 1 -k regex:decode_kernel --section SourceCounters --section WarpStateStats .bin/mlakit bench --heads 128 --batch 64 --seq-len 4096 --pdl --no-verify --backend sm90:0 --replays 1 --warmup 1 > $OUT/ncu3-main.txt 2>&1; echo main rc $?
timeout 300 ncu --clock-control none --launch-skip 10 --launch-count 1 -k regex:decode_kernel --page source --print-source sass --csv --metrics smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_branch_resolving,smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_wait,smsp__pcsamp_sample_count .bin/mlakit bench --heads 128 --batch 64 --seq-len 4096 --pdl --no-verify --backend sm90:0 --replays 1 --warmup 1 > $OUT/ncu3-main-sass.csv 2>&1; echo sass rc $?
wc -l $OUT/ncu3-main-sass.csv; sed -n '/Source Counters/,$p' $OUT/ncu3-main.txt | head -60
