#!/bin/bash
OUT=${OUT:-/tmp/out}; R=$OUT/sw2; mkdir -p $R
for f in .bin/*.gz .bin/v/*.gz; do gunzip -f $f; done
for rep in 1 2 3; do
for v in tw sm4 sm4a2 sm6 sm7 sm9; do
  B=.bin/v/mlakit-$v; [ $v = base ] && B=.bin/mlakit
  timeout 40 $B bench --pdl --no-verify --settle-ms 300 --heads 128 --batch 64 --seq-len 4096 --backend sm80:0 > $R/$v-$rep.txt 2>&1
  echo "$v: $(grep sm80 $R/$v-$rep.txt | awk '{printf "h%s/b%s %s  ", $2, $4, $8}')"
done
done
