#!/bin/bash
# FlashMLA (rebuilt) and mlakit's sm90 narrow tile (tactics 3/5) on the standard grid's h_q 16
# s_q 1 rows, same session, settled; then the README's default bench.
OUT=${OUT:-/tmp/out}; R=$OUT/h16; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader > $R/device.txt
for b in 1 8 32 64 128; do for l in 1024 4096 8192 32768; do
  [ $((b * l)) -le $((128 * 8192)) ] || continue
  echo "16 $b $l $(timeout 60 .bin/fmla_bench38 16 $b $l 0.6 2>&1 | grep -o 'median_us=[0-9.]*' | cut -d= -f2)"
done; done > $R/fmla-grid.txt
timeout 200 .bin/mlakit-new bench --grid standard --heads 16 --s-q 1 --pdl --no-verify --backend sm90:3,sm90:5 --settle-ms 300 --json $R/mlakit-h16.json > $R/mlakit-h16.txt 2>&1
timeout 250 .bin/mlakit-new bench > $R/default-bench.txt 2>&1; echo "rc $?" >> $R/default-bench.txt
tar czf $OUT/h16.tgz -C $OUT h16
cat $R/fmla-grid.txt | tr '\n' ';'; echo
grep -E "^sm90" $R/mlakit-h16.txt | cut -c1-80
tail -5 $R/default-bench.txt
