#!/bin/bash
# kRoles: Q k-steps held in the score warps' registers (0..32), A/B, h_q 128/64, b 64/8, L 4096.
OUT=${OUT:-/tmp/out}; R=$OUT/qreg; mkdir -p $R
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 120 .bin/mlakit-q24 bench --pdl --settle-ms 300 --heads 128,64 --batch 64,8 --seq-len 4096 --backend sm80:0 > $R/verify-q24.txt 2>&1
echo "verify q24 rc $?: $(grep sm80 $R/verify-q24.txt | awk '{printf "%s %s | ", $8, $NF}')"
for rep in 1 2; do
for v in 0 16 20 24 28 32; do
  timeout 60 .bin/mlakit-q$v bench --pdl --no-verify --settle-ms 300 --heads 128,64 --batch 64,8 --seq-len 4096 --backend sm80:0 > $R/q$v-$rep.txt 2>&1
  echo "q$v: $(grep sm80 $R/q$v-$rep.txt | awk '{printf "h%s/b%s %s  ", $2, $4, $8}')"
done
done
} 2>&1 | tee $R/summary.txt
tar czf $OUT/qreg.tgz -C $OUT qreg
