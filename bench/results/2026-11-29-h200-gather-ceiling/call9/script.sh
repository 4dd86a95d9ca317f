#!/bin/bash
# Session 28 call 9: L = main + the lazy max in the mma kernel (P against the running max unless
# a value passes it by 2^8; one bar.red tells all; 2 barriers a block instead of 3). Sparse GPU
# tests and memcheck/racecheck/synccheck of the sparse sweep on L; A/B M (main) against L.
set -u
mkdir -p /tmp/b
for f in mlakit-M mlakit-L gpu-tests-L; do xz -dc .peers/ab/$f.xz > /tmp/b/$f && chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
timeout 120 /tmp/b/gpu-tests-L --gtest_filter='Sm90Sparse.*:Sm90Sanitize.Sparse:Sm90Pdl.*:Sm90Graph.*' > $OUT/tests.txt 2>&1
for tool in memcheck racecheck synccheck; do
  timeout 90 /usr/local/cuda/bin/compute-sanitizer --tool $tool /tmp/b/gpu-tests-L --gtest_filter='Sm90Sanitize.Sparse' --gtest_brief=1 2>&1 | grep -E "SUMMARY|PASSED|FAILED|Invalid|hazard" | head -5 | sed "s/^/$tool: /" >> $OUT/tests.txt
done
B="--pdl --settle-ms 200 --replays 20 --verify-requests 1 --seq-len 8192 --dtype fp8-blockwise --q-dtype bf16"
timeout 250 scripts/ab-bench.sh /tmp/b/mlakit-M /tmp/b/mlakit-L /tmp/ab 2 \
  -- --topk 2048 --heads 8,16,32 --s-q 1 --batch 1,8,32,64,128 $B \
  -- --topk 2048 --heads 64,128 --s-q 1 --batch 1,8 $B \
  -- --topk 512 --heads 16,32 --s-q 1 --batch 32,128 $B > /dev/null 2>&1
cp /tmp/ab/summary.txt $OUT/ab.txt
tar cf $OUT/raw.tar -C /tmp ab
grep -E "^\[  (PASSED|FAILED)|FAILED \]|memcheck|racecheck|synccheck" $OUT/tests.txt | head -20; cat $OUT/ab.txt
