#!/bin/bash
# Session 28 call 2: P = main + L2 prefetch of the next block's rows in the sparse mma kernel's
# producer (tactics 10, 11, 13). gather_copy_rate with the prefetch variant; sparse tests on P;
# A/B G (main) against P on the mma kernel's rows.
set -u
mkdir -p /tmp/b
for f in mlakit-G mlakit-P gpu-tests-P; do xz -dc .peers/ab/$f.xz > /tmp/b/$f && chmod +x /tmp/b/$f; done
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
.peers/gcr/gather_copy_rate > $OUT/gcr.txt 2>&1
timeout 100 /tmp/b/gpu-tests-P --gtest_filter='Sm90Sparse.*:Sm90Sanitize.Sparse:Sm90Pdl.*' > $OUT/tests.txt 2>&1
timeout 60 /usr/local/cuda/bin/compute-sanitizer --tool memcheck /tmp/b/gpu-tests-P --gtest_filter='Sm90Sanitize.Sparse' --gtest_brief=1 2>&1 | grep -E "SUMMARY|PASSED|FAILED|Invalid" | head -5 | sed "s/^/memcheck: /" >> $OUT/tests.txt
B="--pdl --settle-ms 200 --replays 20 --verify-requests 1 --seq-len 8192 --dtype fp8-blockwise --q-dtype bf16"
timeout 320 scripts/ab-bench.sh /tmp/b/mlakit-G /tmp/b/mlakit-P /tmp/ab 2 \
  -- --topk 2048 --heads 8,16,32 --s-q 1 --batch 1,32,64,128 $B \
  -- --topk 2048 --heads 64,128 --s-q 1 --batch 1,8 $B \
  -- --topk 512 --heads 16 --s-q 1 --batch 32,128 $B > /dev/null 2>&1
cp /tmp/ab/summary.txt $OUT/ab.txt
tar cf $OUT/raw.tar -C /tmp ab
grep -E "^\[  (PASSED|FAILED)|FAILED \]|memcheck" $OUT/tests.txt | head; grep -E "cp\+pf|cp.async +(6.44|0.69) +(8|16) +4" $OUT/gcr.txt; cat $OUT/ab.txt
