#!/bin/bash
# Tactic 4's L2 warm-up on the H100: full (spec), Q rows only (qwarm), none (nowarm).
OUT=${OUT:-/tmp/out}; R=$OUT/r4; mkdir -p $R
for f in .bin/mlakit-spec.gz .bin/mlakit-qwarm.gz .bin/mlakit-nowarm.gz; do gunzip -kf $f; chmod +x ${f%.gz}; done
{
  echo "# $(date -u '+%F %T') $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  .bin/mlakit-spec info --measure | grep 'read-only'
  for rep in 1 2; do for v in spec qwarm nowarm; do
    { timeout 100 .bin/mlakit-$v bench --pdl --no-verify --settle-ms 300 --heads 16 --batch 1,8,64,128 --seq-len 4096 --backend sm80:0,sm80:4
      timeout 100 .bin/mlakit-$v bench --pdl --no-verify --settle-ms 300 --heads 16 --batch 64 --var 1 --seq-len 4096 --backend sm80:0,sm80:4; } > $R/$v-$rep.txt 2>&1
    echo "$v $rep: $(grep '^sm80' $R/$v-$rep.txt | awk '{printf "%s/b%s/v%s %s  ", $1, $4, $6, $8}')"
  done; done
} 2>&1 | tee $R/summary.txt
