#!/bin/bash
# A/B: Q k-steps held in registers by the 64-row tile (0, 6, 12 = main)
OUT=${OUT:-/tmp/out}; R=$OUT/run; mkdir -p $R
for rep in 1 2; do
  for q in 12 6 0; do
    .bin/mlakit-q$q bench --pdl --no-verify --settle-ms 300 --heads 128,64 --batch 64,8 --seq-len 4096 --backend sm80:0 > $R/q$q-$rep.txt 2>&1
    echo "q$q rep $rep: $(grep sm80 $R/q$q-$rep.txt | awk '{printf "%s/b%s %s  ", $2, $4, $8}')"
  done
done
