#!/bin/bash
# Clock and power beside each time: main (tactics 0/2, narrow 3/5), the pair patch (6/8), and the
# pair patch's no-copy ablation; each binary twice, interleaved. Then main's GPU tests.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
run() { # bin tag args...
  local b=$1 tag=$2; shift 2
  echo "## $b $*" >> $OUT/ab-$tag.txt
  timeout 120 .bin/$b bench --pdl --no-verify "$@" 2>&1 | grep -v "^device\|^backend" >> $OUT/ab-$tag.txt
}
for rep in 1 2; do
  for b in mlakit mlakit-pairs mlakit-abl; do
    case $b in mlakit) W=sm90:0,sm90:2;; *) W=sm90:0,sm90:2,sm90:6,sm90:8;; esac
    run $b h128 --heads 128 --batch 128 --seq-len 8192 --backend $W
    run $b h128s2 --heads 128 --s-q 2 --batch 32 --seq-len 8192 --backend $W
    run $b h128b64 --heads 128 --batch 64 --seq-len 4096 --backend $W
    run $b h128b8 --heads 128 --batch 8 --seq-len 4096 --backend $W
    run $b h16 --heads 16 --batch 128 --seq-len 8192 --backend sm90:3,sm90:5
    run $b h16b32 --heads 16 --batch 32 --seq-len 4096 --backend sm90:3,sm90:5
  done
done
head -3 $OUT/ab-h128.txt > /dev/null
# Verified once (main binary) so the power columns come from a checked run too.
timeout 120 .bin/mlakit bench --pdl --heads 128 --batch 128 --seq-len 8192 --backend sm90:0,sm90:2 > $OUT/verified-h128.txt 2>&1
timeout 400 stdbuf -oL .bin/mlakit_gpu_tests > $OUT/gpu-tests.txt 2>&1; echo "gpu tests rc $?" >> $OUT/gpu-tests.txt
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/device.txt
for f in $OUT/ab-*.txt; do echo "== $f"; cat $f; done | grep -v "^$" | tail -80
tail -3 $OUT/gpu-tests.txt; cat $OUT/verified-h128.txt | tail -3; cat $OUT/device.txt
