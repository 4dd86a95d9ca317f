#!/bin/bash
# Wide tile publish A/B: base (c45155b), v1 (reader ldmatrix + RS, fence off the chain, per-warp
# publish), v2 (v1 + named-barrier publish). Interleaved, each twice, settled. Then GPU tests.
OUT=${OUT:-/tmp/out}; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader > $R/device.txt
run() { # bin tag args...
  local b=$1 tag=$2; shift 2
  echo "## $b $*" >> $R/ab-$tag.txt
  timeout 120 .bin/$b bench --pdl --no-verify --settle-ms 300 "$@" 2>&1 | grep -v "^device\|^backend" >> $R/ab-$tag.txt
}
for rep in 1 2; do
  for b in mlakit-base mlakit-v1 mlakit-v2; do
    run $b h128b128L8k --heads 128 --batch 128 --seq-len 8192 --backend sm90:0
    run $b h128s2b32L8k --heads 128 --s-q 2 --batch 32 --seq-len 8192 --backend sm90:0
    run $b h128b64L4k --heads 128 --batch 64 --seq-len 4096 --backend sm90:2
    run $b h128b32L8k --heads 128 --batch 32 --seq-len 8192 --backend sm90:2
    run $b h128b8L4k --heads 128 --batch 8 --seq-len 4096 --backend sm90:2
    run $b h128b8L32k --heads 128 --batch 8 --seq-len 32768 --backend sm90:0
    run $b h64b64L8k --heads 64 --batch 64 --seq-len 8192 --backend sm90:2
    run $b h128b1L4k --heads 128 --batch 1 --seq-len 4096 --backend sm90:2
  done
done
for v in v1 v2; do
  timeout 200 stdbuf -oL .bin/gpu-tests-$v --gtest_filter='Sm90*' > $R/gpu-tests-$v.txt 2>&1; echo "gpu tests rc $?" >> $R/gpu-tests-$v.txt
done
tar czf $OUT/r.tgz -C $OUT r
for f in $R/ab-*.txt; do echo "== $f"; cat $f; done | grep -v "^$" | grep -E "^##|^ *sm[89]0" | awk '{ if ($1=="##") printf "%s ", $2; else print $1, $2, $3, $4, $5, $8, $(NF-4), $(NF-3) }'
for v in v1 v2; do grep -E "FAILED|PASSED" $R/gpu-tests-$v.txt | head -5; tail -1 $R/gpu-tests-$v.txt; done
