#!/bin/bash
# mbarrier waits with a suspend-time hint (1 ms) against main's plain try_wait loops: settled
# times with clock and power, ABAB; then the stall reasons of one launch.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
for rep in 1 2; do for b in mlakit mlakit-hint; do
  for c in "128 128 8192 sm90:0,sm90:2 100" "128 64 4096 sm90:0,sm90:2 300" "128 8 4096 sm90:0,sm90:2 1500" "16 128 8192 sm90:3,sm90:5 150"; do
    read -r h bt l bk r <<<"$c"
    timeout 120 .bin/$b bench --heads $h --batch $bt --seq-len $l --pdl --no-verify --backend $bk --settle-ms 1000 --replays $r 2>&1 | grep '^sm90' | sed "s/^/$b /"
  done
done; done | tee $OUT/hint.txt
M="--metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,sm__cycles_elapsed.avg"
timeout 200 ncu --clock-control none --launch-skip 10 --launch-count 1 -k regex:decode_kernel $M .bin/mlakit-hint bench --heads 128 --batch 64 --seq-len 4096 --pdl --no-verify --backend sm90:0 --replays 1 --warmup 1 > $OUT/ncu2-hint.txt 2>&1; echo hint ncu rc $?
grep -E "long_scoreboard|branch_resolving|wait_per|barrier_per|inst_executed.sum|cycles_elapsed" $OUT/ncu2-hint.txt
