#!/bin/bash
# kRoles q16 variants: mask bound hoisted (q16b), q12b, bar.sync (q16al), ablations: 1 no P V, 2 no scores, 3 no softmax.
OUT=${OUT:-/tmp/out}; R=$OUT/abl; mkdir -p $R
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 120 .bin/mlakit-q16b bench --pdl --settle-ms 300 --heads 128,64 --s-q 1 --batch 64,8 --seq-len 4096 --backend sm80:0 > $R/verify-q16b.txt 2>&1
echo "verify q16b rc $?: $(grep sm80 $R/verify-q16b.txt | awk '{printf "%s %s | ", $8, $NF}')"
timeout 120 .bin/mlakit-q16b bench --pdl --settle-ms 300 --heads 128 --s-q 2 --batch 32 --seq-len 4096 --var 1 --backend sm80:0 > $R/verify-q16b-sq2.txt 2>&1
echo "verify q16b s_q 2 var rc $?: $(grep sm80 $R/verify-q16b-sq2.txt | awk '{printf "%s %s | ", $8, $NF}')"
for rep in 1 2; do
for v in q16 q16b q12b q16al abl1 abl2 abl3; do
  timeout 60 .bin/mlakit-$v bench --pdl --no-verify --settle-ms 300 --heads 128,64 --batch 64,8 --seq-len 4096 --backend sm80:0 > $R/$v-$rep.txt 2>&1
  echo "$v: $(grep sm80 $R/$v-$rep.txt | awk '{printf "h%s/b%s %s  ", $2, $4, $8}')"
done
done
} 2>&1 | tee $R/summary.txt
tar czf $OUT/abl.tgz -C $OUT abl
