#!/bin/bash
# Session 27 call 9: the sparse sweeps after the magnitude cases moved into sparse_test_util.
set -u
mkdir -p /tmp/b && xz -dc .peers/ab/gpu-tests-H.xz > /tmp/b/gpu-tests-H && chmod +x /tmp/b/gpu-tests-H
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
timeout 120 /tmp/b/gpu-tests-H --gtest_filter='Sm90Sparse.EveryTacticAgainstReference:Sm80Sparse.BlockwiseEveryTacticAgainstReference' > $OUT/tests.txt 2>&1
grep -E "^\[  (PASSED|FAILED)|FAILED \]|times" $OUT/tests.txt | grep -cE "times" ; grep -E "^\[  (PASSED|FAILED)|FAILED \]" $OUT/tests.txt
