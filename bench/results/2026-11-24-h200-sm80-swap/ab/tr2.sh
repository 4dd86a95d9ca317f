#!/bin/bash
OUT=${OUT:-/tmp/out}; R=$OUT/tr2; mkdir -p $R
for f in .bin/*.gz .bin/v/*.gz; do gunzip -f $f; done
timeout 60 .bin/v/mlakit-trace bench --heads 128 --batch 64 --seq-len 4096 --backend sm80:0 --no-verify --replays 3 --warmup 1 > $R/trace-nopdl.txt 2>&1
grep "^T " $R/trace-nopdl.txt | head -130 > $R/t-nopdl.txt
timeout 60 .bin/v/mlakit-trace bench --heads 128 --batch 64 --seq-len 4096 --backend sm80:0 --pdl --no-verify --replays 3 --warmup 1 > $R/trace-pdl.txt 2>&1
grep "^T " $R/trace-pdl.txt | head -130 > $R/t-pdl.txt
rm $R/trace-*.txt; wc -l $R/*.txt
