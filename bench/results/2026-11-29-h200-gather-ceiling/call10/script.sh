#!/bin/bash
# Session 28 call 10: L2 = L (the lazy max) + the `jumps` test cases (tokens of magnitudes 2^0 ..
# 2^11: the running max moves by far in any block). The sparse sweeps of sm90 and sm80, the
# sparse and PDL/graph tests, memcheck of the sm90 sweep.
set -u
mkdir -p /tmp/b
xz -dc .peers/ab/gpu-tests-L2.xz > /tmp/b/gpu-tests-L2 && chmod +x /tmp/b/gpu-tests-L2
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/gpu.txt
timeout 200 /tmp/b/gpu-tests-L2 --gtest_filter='Sm90Sparse.*:Sm80Sparse.*:Sm90Sanitize.Sparse:Sm90Pdl.*:Sm90Graph.*:Tune*' > $OUT/tests.txt 2>&1
timeout 200 /usr/local/cuda/bin/compute-sanitizer --tool memcheck /tmp/b/gpu-tests-L2 --gtest_filter='Sm90Sparse.EveryTacticAgainstReference' --gtest_brief=1 2>&1 | grep -E "SUMMARY|PASSED|FAILED|Invalid" | head -5 | sed "s/^/memcheck: /" >> $OUT/tests.txt
grep -E "^\[  (PASSED|FAILED)|FAILED \]|memcheck" $OUT/tests.txt | head -20; grep -c "jumps" $OUT/tests.txt; grep "jumps" $OUT/tests.txt | head -30
