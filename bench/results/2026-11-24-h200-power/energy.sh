#!/bin/bash
# Steady state (400 replays, several seconds, power cap reached): time, SM clock and board power
# for the copies as they are (mlakit), the copies from 256 L2-resident pages (mlakit-dram: no DRAM
# traffic, same L2-to-SM traffic) and no copies (mlakit-abl). Each twice, interleaved.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
for rep in 1 2; do
  for b in mlakit mlakit-dram mlakit-abl; do
    for c in "128 1 128 8192 0" "128 1 128 8192 6" "16 1 128 8192 3" "128 1 64 4096 2"; do
      read -r h s bt l t <<<"$c"
      echo "$b $(timeout 60 .bin/$b bench --heads $h --s-q $s --batch $bt --seq-len $l --backend sm90:$t --pdl --no-verify --replays 300 2>&1 | grep '^sm90')"
    done
  done
done | tee $OUT/energy.txt
