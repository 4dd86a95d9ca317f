#!/bin/bash
# Recorded run at cd43d7b (kRoles: the swap across the barrier, the early stage test, softmax step 4, 152 registers):
# GPU tests, compute-sanitizer (memcheck, racecheck, synccheck) on Sm80Sanitize.*, read stream,
# A/B against a0c892e (mlakit-prev), the issue-3 cases (verified), the h_q 128 standard grid
# against FlashMLA. `rec24.sh python` runs the Python GPU tests instead (a second call).
OUT=${OUT:-/tmp/out}; R=$OUT/run; mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH
for f in .bin/*.gz; do gunzip -f $f; done
if [ "$1" = python ]; then
{
  MLAKIT_CUDA_ARCHITECTURES=90a MLAKIT_VENV=system timeout 400 python/run_tests.sh --offline -m gpu > $R/python-gpu.txt 2>&1
  echo "python gpu tests rc $?"; tail -3 $R/python-gpu.txt
} 2>&1 | tee $R/summary-python.txt
tar czf $OUT/py.tgz -C $OUT run
exit 0
fi
T=.bin/mlakit_gpu_tests
{
  echo "# $(date -u +%F) $(nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader)"
  timeout 240 $T --gtest_brief=1 > $R/gpu-tests.txt 2>&1; echo "gpu tests rc $?"
  grep -E "PASSED|FAILED|SKIPPED" $R/gpu-tests.txt | head
  for tool in memcheck racecheck synccheck; do
    timeout 240 compute-sanitizer --tool $tool --error-exitcode 3 $T --gtest_filter='Sm80Sanitize.*' --gtest_brief=1 > $R/san-$tool.txt 2>&1
    echo "== $tool (exit $?)"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $R/san-$tool.txt | head -3
  done
  timeout 60 .bin/mlakit info --measure | tail -2
  for rep in 1 2; do
    for v in prev new; do
      B=.bin/mlakit-$v; [ $v = new ] && B=.bin/mlakit
      timeout 120 $B bench --pdl --no-verify --settle-ms 300 --heads 16,64,128 --batch 64,8,1 --seq-len 4096 --backend sm80:0 > $R/ab-$v-$rep.txt 2>&1
      timeout 60 $B bench --pdl --no-verify --settle-ms 300 --heads 128 --s-q 2 --batch 32 --seq-len 4096 --backend sm80:0 >> $R/ab-$v-$rep.txt 2>&1
      echo "$v $rep: $(grep sm80 $R/ab-$v-$rep.txt | awk '{printf "h%s/s%s/b%s %s  ", $2, $3, $4, $8}')"
    done
  done
  timeout 200 .bin/mlakit bench --pdl --settle-ms 300 --heads 16,64,128 --batch 1,8,64 --seq-len 4096 --backend sm80:0,sm80:1 --json $R/cases.json > $R/cases.txt 2>&1; echo "cases rc $?"
  timeout 200 .bin/mlakit bench --pdl --no-verify --settle-ms 300 --grid standard --heads 128 --s-q 1 --backend sm80:0,sm80:1 --reference bench/reference/flashmla_h200.csv --json $R/grid-h128.json > $R/grid-h128.txt 2>&1; echo "grid rc $?"
  grep sm80 $R/cases.txt
} 2>&1 | tee $R/summary.txt
tar czf $OUT/run.tgz -C $OUT run
