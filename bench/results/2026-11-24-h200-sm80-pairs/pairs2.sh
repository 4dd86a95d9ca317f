#!/bin/bash
# Score-warp pairs + setmaxnreg (score regs r, output 2048/8-r/2), PV unroll u.
OUT=${OUT:-/tmp/out}; R=$OUT/pairs2; mkdir -p $R
{
for f in .bin/*.gz; do gunzip -f $f; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 200 .bin/gpu_tests --gtest_filter='Sm80*' > $R/tests.txt 2>&1; echo "tests rc $?: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $R/tests.txt | tr '\n' ' ')"
grep -E "^\[  FAILED" $R/tests.txt | head
for v in r128a2q4u1 r112a2q0u2; do
timeout 120 .bin/mlakit-$v bench --pdl --settle-ms 300 --heads 128,64 --batch 64,8,1 --seq-len 4096 --backend sm80:0 > $R/verify-$v.txt 2>&1
echo "verify $v rc $?: $(grep sm80 $R/verify-$v.txt | awk '{printf "%s %s | ", $8, $NF}')"
done
for rep in 1 2; do
for v in base3 r128a2q4u1 r112a2q0u1 r136a2q4u1 r128a3q4u1 r128a2q4u2 r112a2q0u2; do
  b=$v; env=""; if [ $v = base3 ]; then b=base; env="MLAKIT_TMP_MAX_STAGES=3"; fi
  env $env timeout 60 .bin/mlakit-$b bench --pdl --no-verify --settle-ms 300 --heads 128,64 --batch 64,8 --seq-len 4096 --backend sm80:0 > $R/$v-$rep.txt 2>&1
  echo "$v: $(grep sm80 $R/$v-$rep.txt | awk '{printf "h%s/b%s %s  ", $2, $4, $8}')"
done
done
} 2>&1 | tee $R/summary.txt
tar czf $OUT/pairs2.tgz -C $OUT pairs2
