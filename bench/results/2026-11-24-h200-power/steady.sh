#!/bin/bash
# Short (15 replays) against long (400 replays, ~5 s) timing windows: does the power cap reach the
# bench's window? nvidia-smi samples alongside as a second witness.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw.instant,clocks_event_reasons.active --format=csv,noheader -lms 50 > $OUT/smi.csv 2>&1 &
SMI=$!
b() { echo "## $(date +%T.%N | cut -c1-12) $*"; timeout 100 "$@" --pdl --no-verify 2>&1 | grep "sm90"; }
for r in 15 400 15; do
  b .bin/mlakit bench --heads 128 --batch 128 --seq-len 8192 --backend sm90:0 --replays $r
  b .bin/mlakit-pairs bench --heads 128 --batch 128 --seq-len 8192 --backend sm90:6 --replays $r
  b .bin/mlakit-abl bench --heads 128 --batch 128 --seq-len 8192 --backend sm90:0 --replays $r
  b .bin/mlakit bench --heads 16 --batch 128 --seq-len 8192 --backend sm90:5 --replays $r
done
b .bin/mlakit bench --heads 128 --batch 64 --seq-len 4096 --backend sm90:0,sm90:2 --replays 400
b .bin/mlakit bench --heads 128 --s-q 2 --batch 32 --seq-len 8192 --backend sm90:0,sm90:2 --replays 400
echo "## $(date +%T.%N | cut -c1-12) end"
kill $SMI
