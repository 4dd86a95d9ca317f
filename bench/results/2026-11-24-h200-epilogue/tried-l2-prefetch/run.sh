#!/bin/bash
# L2 prefetch before the PDL wait (lengths, first page ids, Q tile). A/B base2 (HEAD) vs new,
# interleaved, each twice, settled; checks; GPU tests.
OUT=${OUT:-/tmp/out}; R=$OUT/pref; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader > $R/device.txt
run() { # bin tag args...
  local b=$1 tag=$2; shift 2
  echo "## $b $*" >> $R/ab-$tag.txt
  timeout 120 .bin/$b bench --pdl --no-verify --settle-ms 300 "$@" 2>&1 | grep -v "^device\|^backend" >> $R/ab-$tag.txt
}
for rep in 1 2; do
  for b in mlakit-base2 mlakit-new; do
    run $b h128b1 --heads 128 --batch 1 --seq-len 1024,4096,8192 --backend sm90:2
    run $b h128b8 --heads 128 --batch 8 --seq-len 1024,4096 --backend sm90:0,sm90:2
    run $b h16 --heads 16 --batch 1,8,32 --seq-len 4096 --backend sm90:3,sm90:5
    run $b h64b1 --heads 64 --batch 1 --seq-len 4096 --backend sm90:0,sm90:2
    run $b ctl --heads 128 --batch 64 --seq-len 1024 --backend sm90:0,sm90:2
    run $b ctl16 --heads 16 --batch 128 --seq-len 8192 --backend sm90:5
  done
done
timeout 120 .bin/mlakit-new bench --pdl --heads 128,16 --batch 1,8 --seq-len 1024,4096 --backend sm90:0,sm90:1,sm90:2,sm90:3,sm90:4,sm90:5 > $R/verified.txt 2>&1
timeout 60 .bin/mlakit-new bench --pdl --heads 128 --s-q 2 --batch 8 --seq-len 4096 --var 1 --lse --sinks --backend sm90:0,sm90:1,sm90:2 >> $R/verified.txt 2>&1
timeout 300 stdbuf -oL .bin/mlakit_gpu_tests > $R/gpu-tests.txt 2>&1; echo "gpu tests rc $?" >> $R/gpu-tests.txt
tar czf $OUT/pref.tgz -C $OUT pref
for f in $R/ab-*.txt; do echo "== $f"; cat $f; done | grep -v "^$" | grep -E "^##|^ *sm90" | cut -c1-80
grep -E "^sm90" $R/verified.txt | awk '{print $1,$2,$3,$4,$5,$6,$8,$(NF-1),$NF}' | grep -v " ok " ; grep -c " ok " $R/verified.txt
grep -E "FAILED|PASSED" $R/gpu-tests.txt | head; tail -1 $R/gpu-tests.txt
