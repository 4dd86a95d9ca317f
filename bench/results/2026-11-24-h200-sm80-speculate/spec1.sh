#!/bin/bash
# Speculative persistent plan + L2 warm-up of the first chunk: tests, mutant check, sanitizers, A/B.
OUT=${OUT:-/tmp/out}; R=$OUT/spec; mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH
for f in .bin/*.gz; do gunzip -kf $f; chmod +x ${f%.gz}; done
T=.bin/mlakit_gpu_tests-new
{
  echo "# $(date -u +%F) $(nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader)"
  timeout 240 $T --gtest_brief=1 > $R/gpu-tests.txt 2>&1; echo "gpu tests rc $?"
  grep -E "PASSED|FAILED|SKIPPED" $R/gpu-tests.txt | head
  timeout 60 .bin/mlakit_gpu_tests-mut --gtest_filter='Sm80Pdl.InputsWritten*' --gtest_brief=1 > $R/mutant.txt 2>&1; echo "mutant (trusts the speculation unconfirmed) rc $? (want 1)"
  grep -E "PASSED|FAILED" $R/mutant.txt | head -3
  for tool in memcheck racecheck synccheck; do
    timeout 200 compute-sanitizer --tool $tool --error-exitcode 3 $T --gtest_filter='Sm80Sanitize.*:Sm80Pdl.InputsWritten*' --gtest_brief=1 > $R/san-$tool.txt 2>&1
    echo "== $tool (exit $?)"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $R/san-$tool.txt | head -3
  done
  timeout 60 .bin/mlakit info --measure | tail -1
  for rep in 1 2; do for v in old new; do
    B=.bin/mlakit; [ $v = new ] && B=.bin/mlakit-new
    { timeout 100 $B bench --pdl --no-verify --settle-ms 300 --heads 16 --batch 1,8,64,128 --seq-len 4096 --backend sm80:0
      timeout 60 $B bench --pdl --no-verify --settle-ms 300 --heads 16 --batch 64 --seq-len 8192 --backend sm80:0
      timeout 60 $B bench --pdl --no-verify --settle-ms 300 --heads 16 --batch 64 --var 1 --seq-len 4096 --backend sm80:0
      timeout 100 $B bench --pdl --no-verify --settle-ms 300 --heads 64,128 --batch 1,64 --seq-len 4096 --backend sm80:0; } > $R/ab-$v-$rep.txt 2>&1
    echo "$v $rep: $(grep '^sm80' $R/ab-$v-$rep.txt | awk '{printf "h%s/b%s/L%s/v%s %s  ", $2, $4, $5, $6, $8}')"
  done; done
} 2>&1 | tee $R/summary.txt
