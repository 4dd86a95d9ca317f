#!/bin/bash
# H100: the #3 targets again (default tactics, verified), then h_q 128 b 64 with clock and power
# (tactics 0 and 1, >= 1 s of replays), twice.
OUT=${OUT:-/tmp/out}; R=$OUT/h100b; mkdir -p $R
export PATH=/usr/local/cuda/bin:$PATH
B=build-gpu/mlakit
{
  echo "# $(date -u '+%F %T') $(nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader)"
  scripts/device-build.sh build-gpu > $R/build.txt 2>&1; echo "build rc $? ($(date -u +%T))"
  S=$(timeout 60 $B info --measure | grep 'read-only HBM stream' | grep -oE '[0-9.]+ TB/s' | cut -d' ' -f1); echo "stream $S TB/s"
  for rep in 1 2; do
    { timeout 120 $B bench --pdl --settle-ms 300 --peak-tbs $S --heads 16 --batch 64,128 --seq-len 4096 --backend sm80
      timeout 120 $B bench --pdl --settle-ms 300 --peak-tbs $S --heads 128 --batch 1,64 --seq-len 4096 --backend sm80
      timeout 120 $B bench --pdl --no-verify --settle-ms 300 --replays 6000 --heads 128 --batch 64 --seq-len 4096 --backend sm80:0,sm80:1; } > $R/targets-$rep.txt 2>&1
    echo "round $rep:"; grep '^sm80' $R/targets-$rep.txt | awk '{printf "  %s h%s b%s L%s %s us %s MHz %s W %s %s\n", $1, $2, $4, $5, $8, $11, $12, $13, $14}'
  done
} 2>&1 | tee $R/summary.txt
