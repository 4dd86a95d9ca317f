#!/bin/bash
OUT=${OUT:-/tmp/out}; R=$OUT/run3; mkdir -p $R
for f in .bin/mlakit.gz .bin/mlakit-spec.gz .bin/mlakit-noop.gz .bin/mlakit-coal.gz; do gunzip -kf $f; chmod +x ${f%.gz}; done
{
  for rep in 1 2; do for v in mlakit mlakit-spec mlakit-noop mlakit-coal; do
    B=.bin/$v
    timeout 100 $B bench --pdl --no-verify --settle-ms 200 --heads 16 --batch 32,64 --seq-len 4096 --backend sm80:0,sm80:4 > $R/$v-$rep.txt 2>&1
    echo "$v $rep: $(grep '^sm80' $R/$v-$rep.txt | awk '{printf "%s/b%s %s  ", $1, $4, $8}')"
  done; done
} 2>&1 | tee $R/summary.txt
