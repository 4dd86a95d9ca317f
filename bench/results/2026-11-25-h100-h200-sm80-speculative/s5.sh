#!/bin/bash
# Tactic 4 without the L2 warm-up (t4) and the combine grid capped at 4 or 2 CTAs per SM (c4, c2),
# so that the next call's decode CTAs find room during the combine.
OUT=${OUT:-/tmp/out}; R=$OUT/r5; mkdir -p $R
for f in .bin/mlakit-t4.gz .bin/mlakit-c4.gz .bin/mlakit-c2.gz; do gunzip -kf $f; chmod +x ${f%.gz}; done
{
  echo "# $(date -u '+%F %T') $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  .bin/mlakit-t4 info --measure | grep 'read-only'
  for rep in 1 2; do for v in t4 c4 c2; do
    { timeout 100 .bin/mlakit-$v bench --pdl --no-verify --settle-ms 300 --heads 16 --batch 1,8,32,64,128 --seq-len 4096 --backend sm80:0,sm80:4
      timeout 100 .bin/mlakit-$v bench --pdl --no-verify --settle-ms 300 --heads 128 --batch 8,64 --seq-len 4096 --backend sm80:0; } > $R/$v-$rep.txt 2>&1
    echo "$v $rep: $(grep '^sm80' $R/$v-$rep.txt | awk '{printf "%s/h%s/b%s %s  ", $1, $2, $4, $8}')"
  done; done
} 2>&1 | tee $R/summary.txt
