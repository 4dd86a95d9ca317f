#!/bin/bash
# Recorded run: speculative persistent plan + L2 warm-up of the first chunk (plain loop only).
# GPU tests, compute-sanitizer (memcheck, racecheck, synccheck) on Sm80Sanitize.* and the
# late-inputs test, read stream, A/B against the previous build (old) twice, verified cases.
OUT=${OUT:-/tmp/out}; R=$OUT/run; mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH
for f in .bin/*.gz; do gunzip -kf $f; chmod +x ${f%.gz}; done
T=.bin/mlakit_gpu_tests-new
{
  echo "# $(date -u +%F) $(nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader)"
  timeout 240 $T --gtest_brief=1 > $R/gpu-tests.txt 2>&1; echo "gpu tests rc $?"
  grep -E "PASSED|FAILED|SKIPPED" $R/gpu-tests.txt | head
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
      timeout 100 $B bench --pdl --no-verify --settle-ms 300 --heads 32,128 --batch 1,64 --seq-len 4096 --backend sm80:0; } > $R/ab-$v-$rep.txt 2>&1
    echo "$v $rep: $(grep '^sm80' $R/ab-$v-$rep.txt | awk '{printf "h%s/b%s/L%s/v%s %s  ", $2, $4, $5, $6, $8}')"
  done; done
  timeout 200 .bin/mlakit-new bench --pdl --settle-ms 300 --heads 16 --batch 64,128 --seq-len 4096,8192 --backend sm80:0,sm80:1 --json $R/h16.json > $R/h16.txt 2>&1; echo "h16 verified rc $?"
  timeout 200 .bin/mlakit-new bench --pdl --settle-ms 300 --heads 128 --batch 1,64 --seq-len 4096 --backend sm80:0 --json $R/h128.json > $R/h128.txt 2>&1; echo "h128 verified rc $?"
  grep '^sm80' $R/h16.txt $R/h128.txt
} 2>&1 | tee $R/summary.txt
