#!/bin/bash
# The issues' target rows on the final build (settled, verified against the CPU reference), and
# the GPU tests.
OUT=${OUT:-/tmp/out}; R=$OUT/targets; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader > $R/device.txt
REF="--reference bench/reference/flashmla_h200.csv"
b() { timeout 150 .bin/mlakit-new bench --pdl --settle-ms 300 $REF "$@" 2>&1 | grep -v "^device" >> $R/targets.txt; }
b --heads 128 --batch 128 --seq-len 8192 --backend sm90:0,sm90:2
b --heads 128 --s-q 2 --batch 32 --seq-len 8192 --backend sm90:0,sm90:2
b --heads 16 --batch 128 --seq-len 8192 --backend sm90:3,sm90:5
b --heads 16 --batch 32 --seq-len 4096 --backend sm90:3,sm90:5
b --heads 128 --batch 8 --seq-len 4096 --backend sm90:0,sm90:2
b --heads 128 --batch 1 --seq-len 4096 --backend sm90:0,sm90:2
b --heads 16 --batch 64 --seq-len 4096 --backend sm80:0,sm80:1
b --heads 128 --batch 64 --seq-len 4096 --backend sm80:0,sm80:1
timeout 300 stdbuf -oL .bin/mlakit_gpu_tests > $R/gpu-tests.txt 2>&1; echo "gpu tests rc $?" >> $R/gpu-tests.txt
tar czf $OUT/targets.tgz -C $OUT targets
grep -v "^backend" $R/targets.txt | cut -c1-140
grep -E "PASSED|FAILED|SKIPPED \]" $R/gpu-tests.txt | head -5; tail -1 $R/gpu-tests.txt
