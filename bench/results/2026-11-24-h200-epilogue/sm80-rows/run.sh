#!/bin/bash
# sm80 epilogue: the two rows' LSE and scale side by side (lanes q 0 and 1). A/B base2 (HEAD) vs new.
OUT=${OUT:-/tmp/out}; R=$OUT/s80; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader > $R/device.txt
run() { # bin tag args...
  local b=$1 tag=$2; shift 2
  echo "## $b $*" >> $R/ab-$tag.txt
  timeout 120 .bin/$b bench --pdl --no-verify --settle-ms 300 "$@" 2>&1 | grep -v "^device\|^backend" >> $R/ab-$tag.txt
}
for rep in 1 2; do
  for b in mlakit-base2 mlakit-new; do
    run $b h16b64 --heads 16 --batch 64 --seq-len 4096 --backend sm80:0,sm80:1
    run $b h128b64 --heads 128 --batch 64 --seq-len 4096 --backend sm80:0,sm80:1
    run $b h16b32 --heads 16 --batch 32 --seq-len 4096 --backend sm80:0
    run $b h128small --heads 128 --batch 1,8 --seq-len 4096 --backend sm80:0
    run $b h16b128 --heads 16 --batch 128 --seq-len 8192 --backend sm80:0
  done
done
timeout 120 .bin/mlakit-new bench --pdl --heads 128,16 --batch 1,8 --seq-len 1024,4096 --backend sm80:0,sm80:1 > $R/verified.txt 2>&1
timeout 60 .bin/mlakit-new bench --pdl --heads 16 --s-q 4 --batch 8 --seq-len 4096 --var 1 --lse --sinks --backend sm80:0,sm80:1 >> $R/verified.txt 2>&1
timeout 300 stdbuf -oL .bin/mlakit_gpu_tests > $R/gpu-tests.txt 2>&1; echo "gpu tests rc $?" >> $R/gpu-tests.txt
tar czf $OUT/s80.tgz -C $OUT s80
for f in $R/ab-*.txt; do echo "== $f"; cat $f; done | grep -v "^$" | grep -E "^##|^ *sm80" | cut -c1-80
grep -E "^sm80" $R/verified.txt | awk '{print $1,$2,$3,$4,$5,$6,$8,$(NF-1),$NF}' | grep -v " ok "; grep -c " ok " $R/verified.txt
grep -E "FAILED|PASSED" $R/gpu-tests.txt | head; tail -1 $R/gpu-tests.txt
