#!/bin/bash
# Session 27 call 8: G = main (22a658a) + the cluster producers' index entries turned into slots
# only when their block is copied (not right after their load). Sparse GPU tests and memcheck of
# the sparse sweep on G; A/B F (main) against G on the cluster tactics' rows (13 and 12).
set -u
mkdir -p /tmp/b
for f in mlakit-F mlakit-G gpu-tests-G; do xz -dc .peers/ab/$f.xz > /tmp/b/$f && chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
timeout 100 /tmp/b/gpu-tests-G --gtest_filter='Sm90Sparse.*:Sm90Sanitize.Sparse:Sm90Pdl.*' > $OUT/tests.txt 2>&1
timeout 60 /usr/local/cuda/bin/compute-sanitizer --tool memcheck /tmp/b/gpu-tests-G --gtest_filter='Sm90Sanitize.Sparse' --gtest_brief=1 2>&1 | grep -E "SUMMARY|PASSED|FAILED|Invalid" | head -5 | sed "s/^/memcheck: /" >> $OUT/tests.txt
B="--pdl --settle-ms 200 --replays 20 --verify-requests 1 --seq-len 8192 --dtype fp8-blockwise --q-dtype bf16"
timeout 170 scripts/ab-bench.sh /tmp/b/mlakit-F /tmp/b/mlakit-G /tmp/ab 2 \
  -- --topk 2048 --heads 16 --s-q 1 --batch 8,32,128 $B \
  -- --topk 2048 --heads 64,128 --s-q 1 --batch 1,8,32,128 $B \
  -- --topk 512 --heads 16,64 --s-q 1 --batch 32 $B > /dev/null 2>&1
cp /tmp/ab/summary.txt $OUT/ab.txt
tar cf $OUT/raw.tar -C /tmp ab
grep -E "^\[  (PASSED|FAILED)|FAILED \]|memcheck" $OUT/tests.txt | head; cat $OUT/ab.txt
