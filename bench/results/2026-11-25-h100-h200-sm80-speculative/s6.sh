#!/bin/bash
# Final check of tactic 4 as the default for 16- and 32-row tiles: device build of the working
# tree, ctest -L gpu, sanitizers, the #3 targets with the default tactic (verified), then A/B of
# tactics 4 and 0 over more shapes, two rounds, with the read stream measured before and after.
OUT=${OUT:-/tmp/out}; R=$OUT/final; mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH
B=build-gpu/mlakit
stream() { timeout 60 $B info --measure | tee $R/stream-$1.txt | grep 'read-only HBM stream' | grep -oE '[0-9.]+ TB/s' | cut -d' ' -f1; }
bench() { timeout 120 $B bench --pdl --settle-ms 300 --peak-tbs $S "$@"; }
{
  echo "# $(date -u '+%F %T') $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader) $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' + working tree')"
  scripts/device-build.sh build-gpu > $R/build.txt 2>&1; echo "build rc $? ($(date -u +%T))"
  (cd build-gpu && timeout 240 ctest -L gpu --output-on-failure > $R/ctest-gpu.txt 2>&1); echo "ctest -L gpu rc $? ($(date -u +%T))"
  grep -E "tests passed|tests failed|Total Test" $R/ctest-gpu.txt
  timeout 120 scripts/sanitize.sh build-gpu > $R/sanitize.txt 2>&1; echo "sanitize rc $? ($(date -u +%T))"
  grep -E "^==|SUMMARY" $R/sanitize.txt
  timeout 90 compute-sanitizer --tool memcheck --error-exitcode 3 build-gpu/tests/mlakit_gpu_tests --gtest_brief=1 \
    --gtest_filter='Sm80Pdl.*:Sm80Graph.*' > $R/memcheck-pdl-graph.txt 2>&1; echo "memcheck Sm80Pdl/Sm80Graph rc $?"
  grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck-pdl-graph.txt
  S=$(stream 1); echo "stream $S TB/s"
  { bench --heads 16 --batch 64,128 --seq-len 4096 --backend sm80
    bench --heads 16 --batch 64 --seq-len 8192 --backend sm80
    bench --heads 128 --batch 1,64 --seq-len 4096 --backend sm80; } > $R/targets.txt 2>&1
  echo "targets (default tactic, verified):"; grep '^sm80' $R/targets.txt | awk '{printf "  %s h%s b%s L%s %s us %s %s\n", $1, $2, $4, $5, $8, $11, $14}'
  for rep in 1 2; do
    { bench --no-verify --heads 16 --batch 1,8,32,64,128 --seq-len 4096 --backend sm80:0,sm80:4
      bench --no-verify --heads 16 --batch 8,64 --seq-len 1024,8192 --backend sm80:0,sm80:4
      bench --no-verify --heads 16 --batch 64 --var 1 --seq-len 4096 --backend sm80:0,sm80:4
      bench --no-verify --heads 32 --batch 1,8,64 --seq-len 4096 --backend sm80:0,sm80:4
      bench --no-verify --heads 16 --s-q 2 --batch 1,8,64 --seq-len 4096 --backend sm80:0,sm80:4
      bench --no-verify --heads 128 --batch 1,64 --seq-len 4096 --backend sm80:0; } > $R/ab-$rep.txt 2>&1
  done
  echo "stream after $(stream 2) TB/s ($(date -u +%T))"
  bench --no-verify --replays 6000 --heads 128 --batch 64 --seq-len 4096 --backend sm80:0,sm80:1 > $R/h128-clock.txt 2>&1
  echo "h_q 128 b 64 with clock and power:"; grep '^sm80' $R/h128-clock.txt | awk '{printf "  %s %s us MHz %s W %s\n", $1, $8, $12, $13}'
  echo "A/B (us, two rounds):"
  paste <(grep '^sm80' $R/ab-1.txt | awk '{printf "%s h%s s%s b%s L%s v%s %s\n", $1, $2, $3, $4, $5, $6, $8}') \
        <(grep '^sm80' $R/ab-2.txt | awk '{print $8, $11}')
} 2>&1 | tee $R/summary.txt
cd $R && tar czf $OUT/final-logs.tgz . && cp summary.txt $OUT/summary.txt && cd $OUT && rm -rf $R
