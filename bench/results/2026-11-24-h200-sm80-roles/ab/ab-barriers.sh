#!/bin/bash
# kRoles, rescale before the stage wait: non-aligned barriers (-na) vs bar.sync (-al): racecheck, A/B.
OUT=${OUT:-/tmp/out}; R=$OUT/run17; mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH
{
for v in na al; do
timeout 200 compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 3 .bin/mlakit_gpu_tests-$v --gtest_filter='Sm80Sanitize.*' --gtest_brief=1 > $R/san-racecheck-$v.txt 2>&1
echo "== racecheck $v (exit $?)"; grep -E "RACECHECK SUMMARY|PASSED|FAILED" $R/san-racecheck-$v.txt | head -3
grep -A2 "Potential" $R/san-racecheck-$v.txt | grep -oE "(Write|Read) Thread \([0-9]+,0,0\) at .* in [a-z_.]*:[0-9]*" | sed -E 's/.*(Write|Read) Thread \(([0-9]+),0,0\).* in ([a-z_.]*:[0-9]*)/\1 \3/' | sort | uniq -c
done
for rep in 1 2; do
for v in arrive na al; do
  B=.bin/mlakit-$v; [ $v = arrive ] && B=.bin/mlakit
  timeout 60 $B bench --pdl --no-verify --settle-ms 300 --heads 128,64 --batch 64,8 --seq-len 4096 --backend sm80:0 > $R/$v-$rep.txt 2>&1
  echo "$v: $(grep sm80 $R/$v-$rep.txt | awk '{printf "h%s/s%s/b%s %s  ", $2, $3, $4, $8}')"
done
done
} 2>&1 | tee $R/summary.txt
tar czf $OUT/run17.tgz -C $OUT run17
