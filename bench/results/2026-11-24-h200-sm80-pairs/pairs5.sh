#!/bin/bash
# Pairs + setmaxnreg + swap in Q + softmax inside the next tile's score loop (m = k-step; -1 off).
OUT=${OUT:-/tmp/out}; R=$OUT/pairs5; mkdir -p $R
{
for f in .bin/*.gz; do gunzip -f $f; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 120 .bin/gpu_tests --gtest_filter='Sm80*' > $R/tests.txt 2>&1; echo "tests rc $?: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $R/tests.txt | tr '\n' ' ')"
grep -E "^\[  FAILED" $R/tests.txt | head
for v in r144a2q4u1m3; do
timeout 60 .bin/mlakit-$v bench --pdl --settle-ms 300 --heads 128,64 --batch 64,8,1 --seq-len 4096 --backend sm80:0 > $R/verify-$v.txt 2>&1
echo "verify $v rc $?: $(grep sm80 $R/verify-$v.txt | awk '{printf "%s %s | ", $8, $NF}')"
done
for rep in 1 2 3; do
for v in r144a2q4u1m3:4 r152a2q4u1m3:4 r144a2q4u1m2:4 r144a2q4u1m4:4 r144a2q4u2m3:4 r152a2q4u1m6:4 r144a3q4u1m3:4 r152a2q8u1m3:4 r152a2q6u1m3:4; do
  b=${v%:*}; st=${v#*:}
  MLAKIT_TMP_MAX_STAGES=$st timeout 40 .bin/mlakit-$b bench --pdl --no-verify --settle-ms 300 --heads 128,64 --batch 64,8 --seq-len 4096 --backend sm80:0 > $R/$b-s$st-$rep.txt 2>&1
  echo "$v: $(grep sm80 $R/$b-s$st-$rep.txt | awk '{printf "h%s/b%s %s  ", $2, $4, $8}')"
done
done
} 2>&1 | tee $R/summary.txt
tar czf $OUT/pairs5.tgz -C $OUT pairs5
