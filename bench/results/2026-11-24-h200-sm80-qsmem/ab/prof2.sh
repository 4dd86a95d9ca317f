#!/bin/bash
# pc sampling of the sm80 decode kernel, h_q 128 b 64 L 4096, tactic $1
OUT=${OUT:-/tmp/out}; R=$OUT/prof; mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH
t=${1:-0}
timeout 200 ncu --kernel-name regex:decode_kernel --launch-skip 2 --launch-count 1 \
  --section SourceCounters --section WarpStateStats -o $R/t$t \
  .bin/mlakit bench --heads 128 --batch 64 --seq-len 4096 --backend sm80:$t --pdl --no-verify --replays 3 --warmup 1 > $R/ncu-$t.log 2>&1
echo "ncu rc $?"
ncu -i $R/t$t.ncu-rep --page source --csv --print-source sass > $R/src-$t.csv 2>$R/src-$t.err; echo "src rc $?"
ncu -i $R/t$t.ncu-rep --page details --print-details all > $R/det-$t.txt 2>&1
gzip $R/src-$t.csv; ls -la $R
grep -iE "stall|Warp Cycles" $R/det-$t.txt | head -40
