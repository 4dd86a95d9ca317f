#!/bin/bash
# Tactic 4 (persistent-speculative): A/B against tactic 0 and the three targets of #3 with the read
# stream measured in the same run, GPU tests between the two rounds, then the sanitizers.
OUT=${OUT:-/tmp/out}; R=$OUT/r1; mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH
for f in .bin/mlakit-spec.gz .bin/tests-spec.gz; do gunzip -kf $f; chmod +x ${f%.gz}; done
mkdir -p .bin/b/tests && cp .bin/tests-spec .bin/b/tests/mlakit_gpu_tests
B=.bin/mlakit-spec
stream() { timeout 60 $B info --measure | tee $R/stream-$1.txt | grep 'read-only HBM stream' | grep -oE '[0-9.]+ TB/s' | cut -d' ' -f1; }
ab() {
  { timeout 120 $B bench --pdl --no-verify --settle-ms 300 --peak-tbs $S --heads 16 --batch 1,8,64,128 --seq-len 4096 --backend sm80:0,sm80:4
    timeout 60 $B bench --pdl --no-verify --settle-ms 300 --peak-tbs $S --heads 16 --batch 64 --seq-len 8192 --backend sm80:0,sm80:4
    timeout 60 $B bench --pdl --no-verify --settle-ms 300 --peak-tbs $S --heads 16 --batch 64 --var 1 --seq-len 4096 --backend sm80:0,sm80:4
    timeout 60 $B bench --pdl --no-verify --settle-ms 300 --peak-tbs $S --heads 32 --batch 1,64 --seq-len 4096 --backend sm80:0,sm80:4
    timeout 60 $B bench --pdl --no-verify --settle-ms 300 --peak-tbs $S --heads 128 --batch 1,64 --seq-len 4096 --backend sm80:0
  } > $R/ab-$1.txt 2>&1
  echo "rep $1:"; grep '^sm80' $R/ab-$1.txt | awk '{printf "  %s h%s b%s L%s v%s %s us %s\n", $1, $2, $4, $5, $6, $8, $11}'
}
{
  echo "# $(date -u '+%F %T') $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  S=$(stream 1); echo "stream $S TB/s"
  ab 1
  timeout 200 .bin/tests-spec --gtest_brief=1 > $R/gpu-tests.txt 2>&1; echo "gpu tests rc $? ($(date -u +%T))"
  grep -E "PASSED|FAILED|SKIPPED" $R/gpu-tests.txt | head -20
  ab 2
  echo "stream after $(stream 2) TB/s ($(date -u +%T))"
  timeout 150 scripts/sanitize.sh .bin/b > $R/sanitize.txt 2>&1; echo "sanitize rc $? ($(date -u +%T))"
  grep -E "^==|SUMMARY" $R/sanitize.txt
  timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 .bin/tests-spec --gtest_brief=1 \
    --gtest_filter='Sm80Pdl.*:Sm80Graph.*' > $R/memcheck-pdl-graph.txt 2>&1; echo "memcheck pdl/graph rc $? ($(date -u +%T))"
  grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck-pdl-graph.txt
} 2>&1 | tee $R/summary.txt
