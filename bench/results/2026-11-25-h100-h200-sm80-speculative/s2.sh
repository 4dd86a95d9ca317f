#!/bin/bash
# H200: device build of the working tree, ctest -L gpu, sanitizers, then A/B of tactics 0 and 4.
OUT=${OUT:-/tmp/out}; R=$OUT/r2; mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH
{
  echo "# $(date -u '+%F %T') $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader) $(git rev-parse --short HEAD) + working tree"
  scripts/device-build.sh build-gpu > $R/build.txt 2>&1; echo "build rc $? ($(date -u +%T))"
  (cd build-gpu && timeout 240 ctest -L gpu --output-on-failure > $R/ctest-gpu.txt 2>&1); echo "ctest -L gpu rc $? ($(date -u +%T))"
  grep -E "tests passed|tests failed|Total Test" $R/ctest-gpu.txt
  timeout 120 scripts/sanitize.sh build-gpu > $R/sanitize.txt 2>&1; echo "sanitize rc $? ($(date -u +%T))"
  grep -E "^==|SUMMARY" $R/sanitize.txt
  B=build-gpu/mlakit
  S=$(timeout 60 $B info --measure | tee $R/stream-1.txt | grep 'read-only HBM stream' | grep -oE '[0-9.]+ TB/s' | cut -d' ' -f1); echo "stream $S TB/s"
  for rep in 1 2; do
    { timeout 120 $B bench --pdl --no-verify --settle-ms 300 --peak-tbs $S --heads 16 --batch 1,8,32,64,128 --seq-len 4096 --backend sm80:0,sm80:4
      timeout 60 $B bench --pdl --no-verify --settle-ms 300 --peak-tbs $S --heads 16 --batch 64 --seq-len 8192 --backend sm80:0,sm80:4
      timeout 60 $B bench --pdl --no-verify --settle-ms 300 --peak-tbs $S --heads 16 --batch 64 --var 1 --seq-len 4096 --backend sm80:0,sm80:4
      timeout 60 $B bench --pdl --no-verify --settle-ms 300 --peak-tbs $S --heads 16 --s-q 2 --batch 1,8,64 --seq-len 4096 --backend sm80:0,sm80:4
      timeout 60 $B bench --pdl --no-verify --settle-ms 300 --peak-tbs $S --heads 128 --batch 1,64 --seq-len 4096 --backend sm80:0
    } > $R/ab-$rep.txt 2>&1
    echo "rep $rep:"; grep '^sm80' $R/ab-$rep.txt | awk '{printf "  %s h%s s%s b%s L%s v%s %s us %s\n", $1, $2, $3, $4, $5, $6, $8, $11}'
  done
} 2>&1 | tee $R/summary.txt
