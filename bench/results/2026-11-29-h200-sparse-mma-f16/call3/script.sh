#!/bin/bash
# Session 27 call 3: C = main + the sparse mma kernel in fp16 + the V4 gather addresses + the
# magnitude tests. The whole GPU suite on C; A/B main (a6f7ea0) against C: the V4 rows (2 rounds)
# and the grid at h_q 8-32 (1 round).
set -u
mkdir -p /tmp/b
for f in mlakit-main mlakit-C gpu-tests-C; do xz -dc .peers/ab/$f.xz > /tmp/b/$f && chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
timeout 280 /tmp/b/gpu-tests-C > $OUT/suite.txt 2>&1
B="--pdl --settle-ms 200 --replays 20 --verify-requests 1 --seq-len 8192"
timeout 120 scripts/ab-bench.sh /tmp/b/mlakit-main /tmp/b/mlakit-C /tmp/v4 2 \
  -- --layout v4 --q-dtype bf16 --topk 512,1024 --extra-topk 128 --heads 64,128 --s-q 1 --batch 1,32,128 $B > /dev/null 2>&1
timeout 200 scripts/ab-bench.sh /tmp/b/mlakit-main /tmp/b/mlakit-C /tmp/grid 1 \
  -- --dtype fp8-blockwise --q-dtype bf16 --topk 2048 --heads 8,16,32 --s-q 1,2 --batch 1,8,32,64,128 $B \
  -- --dtype fp8-blockwise --q-dtype bf16 --topk 512 --heads 8,16,32 --s-q 1,2 --batch 1,8,32,64,128 $B > /dev/null 2>&1
cp /tmp/v4/summary.txt $OUT/ab-v4.txt; cp /tmp/grid/summary.txt $OUT/ab-grid.txt
tar cf $OUT/raw.tar -C /tmp v4 grid
grep -E "^\[  (PASSED|FAILED)|FAILED \]|tests from .* ran" $OUT/suite.txt | head; cat $OUT/ab-v4.txt; tail -4 $OUT/ab-grid.txt
