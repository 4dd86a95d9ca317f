#!/bin/bash
# Final build: GPU tests; verified bench on a few wide-tile cases; then FlashMLA (rebuilt) and
# mlakit's sm90 (tactics 0/2) on the standard grid's s_q 1 rows for h_q 128 and 64, in the same
# session, settled as in 2026-11-24-h200-flashmla-rebuilt.
OUT=${OUT:-/tmp/out}; R=$OUT/f; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader > $R/device.txt
timeout 300 stdbuf -oL .bin/mlakit_gpu_tests > $R/gpu-tests.txt 2>&1; echo "gpu tests rc $?" >> $R/gpu-tests.txt
timeout 120 .bin/mlakit-new bench --pdl --heads 128,64 --batch 1,64,128 --seq-len 1024 --backend sm90:0,sm90:2 > $R/verified.txt 2>&1
timeout 60 .bin/mlakit-new bench --pdl --heads 128 --s-q 2 --batch 32 --seq-len 1024 --var 1 --lse --sinks --backend sm90:0,sm90:2 >> $R/verified.txt 2>&1
for h in 128 64; do for b in 1 8 32 64 128; do for l in 1024 4096 8192 32768; do
  [ $((b * l)) -le $((128 * 8192)) ] || continue
  echo "$h $b $l $(timeout 60 .bin/fmla_bench38 $h $b $l 0.6 2>&1 | grep -o 'median_us=[0-9.]*' | cut -d= -f2)"
done; done; done > $R/fmla-grid.txt
for h in 128 64; do
  timeout 200 .bin/mlakit-new bench --grid standard --heads $h --s-q 1 --pdl --no-verify --backend sm90:0,sm90:2 --settle-ms 300 --json $R/mlakit-h$h.json > $R/mlakit-h$h.txt 2>&1
done
tar czf $OUT/f.tgz -C $OUT f
tail -2 $R/gpu-tests.txt; grep -E "^sm90" $R/verified.txt | cut -c1-110
cat $R/fmla-grid.txt | tr '\n' ';'; echo
grep -E "^sm90" $R/mlakit-h128.txt $R/mlakit-h64.txt | cut -c1-80
