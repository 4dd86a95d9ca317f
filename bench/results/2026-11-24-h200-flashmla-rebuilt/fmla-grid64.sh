#!/bin/bash
# As fmla-grid.sh, for h_q 64.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
h=64
for b in 1 8 32 64 128; do for l in 1024 4096 8192 32768; do
  [ $((b * l)) -le $((128 * 8192)) ] || continue
  echo "$h $b $l $(timeout 60 .bin/fmla_bench38 $h $b $l 0.6 2>&1 | grep -o 'median_us=[0-9.]*' | cut -d= -f2)"
done; done | tee $OUT/fmla-grid-h64.txt
timeout 280 .bin/mlakit bench --grid standard --heads 64 --s-q 1 --pdl --no-verify --backend sm90:0,sm90:2 --settle-ms 300 --json $OUT/mlakit-h64.json > $OUT/mlakit-h64.txt 2>&1
.bin/fmla_bench38 64 8 4096 0.1 2>&1 | grep check
tail -2 $OUT/mlakit-h64.txt
