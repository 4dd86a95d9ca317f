#!/bin/bash
# FlashMLA (rebuilt: nvcc 13.0, CUTLASS 3.8 headers) and main's sm90 on the standard grid's s_q 1
# rows for h_q 128 and 16, each case settled (FlashMLA: median over 0.6 s after 3 warm-up
# replays; mlakit: --settle-ms 300, 15 replays).
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
for h in 128 16; do for b in 1 8 32 64 128; do for l in 1024 4096 8192 32768; do
  [ $((b * l)) -le $((128 * 8192)) ] || continue
  echo "$h $b $l $(timeout 60 .bin/fmla_bench38 $h $b $l 0.6 2>&1 | grep -o 'median_us=[0-9.]*' | cut -d= -f2)"
done; done; done | tee $OUT/fmla-grid.txt
for h in 128 16; do
  BK=sm90:0,sm90:2; [ $h = 16 ] && BK=sm90:3,sm90:5
  timeout 280 .bin/mlakit bench --grid standard --heads $h --s-q 1 --pdl --no-verify --backend $BK --settle-ms 300 --json $OUT/mlakit-h$h.json > $OUT/mlakit-h$h.txt 2>&1
done
tail -3 $OUT/mlakit-h128.txt
