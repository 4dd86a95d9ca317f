#!/bin/bash
# Tactic 4's L2 warm-up: full (spec), Q rows only (qwarm), none (nowarm); H200 then A/B.
OUT=${OUT:-/tmp/out}; R=$OUT/r3; mkdir -p $R
for f in .bin/mlakit-spec.gz .bin/mlakit-qwarm.gz .bin/mlakit-nowarm.gz; do gunzip -kf $f; chmod +x ${f%.gz}; done
{
  echo "# $(date -u '+%F %T') $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  for rep in 1 2; do for v in spec qwarm nowarm; do
    timeout 100 .bin/mlakit-$v bench --pdl --no-verify --settle-ms 300 --heads 16 --batch 1,8,64 --seq-len 4096 --backend sm80:0,sm80:4 > $R/$v-$rep.txt 2>&1
    echo "$v $rep: $(grep '^sm80' $R/$v-$rep.txt | awk '{printf "%s/b%s %s  ", $1, $4, $8}')"
  done; done
} 2>&1 | tee $R/summary.txt
