#!/bin/bash
# Session 29, on nvidia-h200-x2 (two H200s of one host): the context-parallel GPU tests, the three
# CpNccl ones among them (they need two GPUs), with call 1's test binary (c6c8550).
mkdir -p /tmp/b && xz -dc .peers/ab/gpu-tests-P.xz > /tmp/b/g && chmod +x /tmp/b/g && nvidia-smi -L && timeout 120 /tmp/b/g --gtest_filter='CpNccl.*:CpDecodeGpu.*:CpMergeGpu.*' 2>&1 | tee $OUT/cp.txt | grep -E "^\[  (PASSED|FAILED|SKIPPED|      OK|  FAILED)|^\[       OK|FAILED" | head -20
